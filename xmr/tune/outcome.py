"""What a sweep logs when its trials have run (no Ray): the best trial, ``trials.csv`` and a
Pareto front per pair of metrics, each checked against the test set's noise
(:func:`~xmr.tune.pareto.pareto_ties`)."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from xmr.compare.per_query import QueryValues
from xmr.storage import StoragePath
from xmr.tracking import TrackedRun, is_finite_number
from xmr.tune.pareto import front_line, front_marks, objective_values, pareto_ties, plot_pareto
from xmr.tune.space import SearchSpace


@dataclass
class SweepResult:
    """One row per trial (``trials``), the best trial's row, the parent run and folder."""

    name: str
    parent_run_id: str
    experiment: str
    trials: pd.DataFrame
    best: dict[str, Any] | None
    path: StoragePath
    artifacts: list[str]

    @property
    def failed(self) -> pd.DataFrame:
        return self.trials[self.trials["status"] != "FINISHED"]


def status_of(metrics: dict[str, Any]) -> str:
    """A trial's status in ``trials.csv`` from its last result (not failed): FINISHED when Tune
    marked it done, else UNFINISHED (a stop cut it short; a rerun resumes it).

    >>> status_of({"done": True, "test/bias_at_10": 0.1}), status_of({"trial_id": "a1"})
    ('FINISHED', 'UNFINISHED')
    """
    return "FINISHED" if metrics.get("done") else "UNFINISHED"


def log_trials(parent: TrackedRun, trials: pd.DataFrame) -> None:
    """Log ``trials`` as the parent run's ``trials.csv``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trials.csv"
        trials.to_csv(path, index=False)
        parent.log_artifact(path)


def error_reason(error: BaseException, run: Any) -> str:
    """Why a trial failed: the reason its child run recorded, else the error's last line."""
    if run is not None and run.data.tags.get("xmr.error"):
        return run.data.tags["xmr.error"]
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return (lines[-1] if lines else type(error).__name__)[:500]


def log_outcome(
    space: SearchSpace, trials: pd.DataFrame, name: str, parent: TrackedRun
) -> tuple[pd.DataFrame, dict[str, Any] | None, list[str]]:
    """Log the sweep's outcome into the parent run and close it; the trials with a
    ``pareto_<x>_vs_<y>`` column per Pareto pair (:func:`front_marks`; empty for the trials not
    plotted: failed, or without both metrics)."""
    objective = space.objective
    done = trials[trials["status"] == "FINISHED"] if not trials.empty else trials
    best = None
    if not done.empty and done[objective.name].notna().any():
        score = done[objective.name].map(objective.value)
        index = score.idxmax() if objective.mode == "max" else score.idxmin()
        best = trials.loc[index].to_dict()
    trials = trials.copy()
    artifacts = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if best is not None:
            payload = {
                "trial_id": best["trial_id"],
                "mlflow_run_id": best["mlflow_run_id"],
                "selected_by": f"{objective.mode} {objective.label}",
                "config": {**space.fixed, **{k: best[k] for k in space.params}},
                "metrics": {m.name: best[m.name] for m in space.metrics},
            }
            (folder / "best_config.json").write_text(
                json.dumps(payload, indent=2, default=str) + "\n"
            )
            parent.log_artifact(folder / "best_config.json")
            artifacts.append("best_config.json")
            parent.log_metrics(
                {
                    f"best/{m.name}": float(best[m.name])
                    for m in space.metrics
                    if is_finite_number(best[m.name])
                }
            )
        plotted = done.dropna(subset=[m.name for m in space.metrics]) if not done.empty else done
        names = plotted["run_name"].tolist() if not plotted.empty else []
        per_query: dict[str, dict[str, QueryValues] | None] = {}  # run id -> its values
        for pair, (x_name, y_name) in enumerate(space.pareto):
            if plotted.empty:
                break
            x, y = space.metric(x_name), space.metric(y_name)
            slug = f"{_slug(x_name)}_vs_{_slug(y_name)}"
            ties = pareto_ties(plotted, x, y, tracking_uri=parent.tracking_uri, per_query=per_query)
            file = f"pareto_{slug}.png"
            front = plot_pareto(
                plotted,
                x,
                y,
                labels=names,
                path=folder / file,
                title=f"{name}: {len(plotted)} trials, front in red",
                ties=ties,
                diagnostics=space.diagnostics,
            )
            trials.loc[plotted.index, f"pareto_{slug}"] = front_marks(front, ties, names)
            parent.log_artifact(folder / file)
            artifacts.append(file)
            if pair == 0:
                xs = objective_values(plotted, x, y)[:, 0]
                parent.set_tag("xmr.pareto_front", front_line(xs, front, ties, names))
        log_trials(parent, trials)
        artifacts.insert(0, "trials.csv")
    parent.log_metrics(
        {
            "sweep/trials": float(len(trials)),
            "sweep/failed": float((trials["status"] == "FAILED").sum()),
        }
    )
    parent.end("FINISHED")
    return trials, best, artifacts


def _slug(metric: str) -> str:
    return metric.replace("/", "_")
