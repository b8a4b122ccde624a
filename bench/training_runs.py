"""What the reproduction scripts share: run an ``xmr`` command line, read a run's results back
from MLflow, and summarise conditions over seeds (mean ± std, a run's bootstrap interval, gains
with their paired intervals).
"""

from __future__ import annotations

import itertools
import shlex
import subprocess
from collections.abc import Mapping, Sequence

import mlflow
import numpy as np
from mlflow.entities import Run

from xmr.compare.paired import paired_comparison
from xmr.compare.per_query import logged_per_query, select_metrics
from xmr.compare.runs import find_run
from xmr.compare.verdict import change_text

EXPERIMENT = "xmr/train/toyworld"


def run(command: list[str]) -> None:
    """Print ``command`` as a shell line, then run it; a failure stops the script."""
    print("$", shlex.join(command), flush=True)
    subprocess.run(command, check=True)


def seeds_flag(seeds: Sequence[int]) -> str:
    """The value of ``xmr train --seeds``: ``0,1,2``."""
    return ",".join(str(seed) for seed in seeds)


def _finished_run(tracking_uri: str, name: str, experiment: str) -> Run:
    """The newest finished run named ``name`` in ``experiment``."""
    client = mlflow.MlflowClient(tracking_uri)
    found = client.search_runs(
        [client.get_experiment_by_name(experiment).experiment_id],
        f"attributes.run_name = '{name}' and attributes.status = 'FINISHED'",
        max_results=1,
    )
    if not found:
        raise RuntimeError(f"{tracking_uri}: no finished run named {name!r} in {experiment}")
    return found[0]


def final_metrics(tracking_uri: str, name: str, experiment: str = EXPERIMENT) -> dict[str, float]:
    """The metrics of the finished run ``name`` in ``experiment``, ``final/`` prefix dropped
    (``test/recall_t2i_at_10``, its interval's ends ``..._ci_low``, ``..._ci_high``); a failed
    or unfinished run of that name is never read."""
    found = _finished_run(tracking_uri, name, experiment)
    return {k.removeprefix("final/"): v for k, v in found.data.metrics.items()}


def total_steps(tracking_uri: str, name: str, experiment: str = EXPERIMENT) -> int:
    """The optimiser steps the finished run ``name`` trained: its last ``train/global_step``;
    for a run trained before xmr logged it, the sum of its epochs' ``train/steps``."""
    found = _finished_run(tracking_uri, name, experiment)
    if "train/global_step" in found.data.metrics:
        return int(found.data.metrics["train/global_step"])
    history = mlflow.MlflowClient(tracking_uri).get_metric_history(found.info.run_id, "train/steps")
    return int(sum({m.step: m.value for m in history}.values()))  # a resumed epoch counts once


def lr_step_period(tracking_uri: str, name: str, experiment: str = EXPERIMENT) -> int:
    """The ``step`` schedule's period (optimiser steps) of the finished run ``name``: its
    param ``train.lr_step_period``, what a control matched to its steps takes
    (``--lr-step-period``) to have its rate at every step."""
    found = _finished_run(tracking_uri, name, experiment)
    if "train.lr_step_period" not in found.data.params:
        raise RuntimeError(f"{name} was trained before xmr logged train.lr_step_period")
    return int(found.data.params["train.lr_step_period"])


def by_steps(steps: Mapping[int, int]) -> list[tuple[int, list[int]]]:
    """Seeds grouped by step count, ``[(steps, seeds)]`` in ascending steps: one
    ``xmr train --steps N --seeds ...`` per group trains the step-matched control."""
    ordered = sorted(steps.items(), key=lambda item: (item[1], item[0]))
    return [
        (count, [seed for seed, _ in group])
        for count, group in itertools.groupby(ordered, key=lambda item: item[1])
    ]


def short_name(metric: str) -> str:
    """``test/odmap_at_1`` -> ``odmap@1``."""
    return metric.removeprefix("test/").replace("_at_", "@")


def summarise(
    rows: Mapping[str, Sequence[Mapping[str, float]]], metrics: Sequence[str], seeds: Sequence[int]
) -> str:
    """A Markdown table: one row per condition, per metric the mean ± sample std over seeds
    (``–`` for one seed) and, when the run has them, the first seed's run's 95 % bootstrap
    interval over the test queries (``[low, high]``).

    ``rows``: per condition, one run's metrics per seed, in the order of ``seeds``.
    """
    lines = ["| condition | seeds | " + " | ".join(short_name(m) for m in metrics) + " |"]
    lines.append("|---|---|" + "---|" * len(metrics))
    intervals = False
    for condition, results in rows.items():
        cells = []
        for metric in metrics:
            values = np.array([r[metric] for r in results if metric in r])
            if not len(values):
                cells.append("–")
                continue
            spread = f"{values.std(ddof=1):.3f}" if len(values) > 1 else "–"
            cell = f"{values.mean():.3f} ± {spread}"
            low, high = (results[0].get(f"{metric}_ci_{end}") for end in ("low", "high"))
            if low is not None and high is not None:
                cell += f" [{low:.3f}, {high:.3f}]"
                intervals = True
            cells.append(cell)
        lines.append(f"| {condition} | {len(results)} | " + " | ".join(cells) + " |")
    legend = "mean ± std over seeds"
    if intervals:
        legend += f"; [low, high]: seed {seeds[0]}'s run's 95 % bootstrap interval over the queries"
    return "\n".join([*lines, "", legend])


def paired_gains(
    tracking_uri: str,
    treatment: tuple[str, Mapping[int, str]],
    controls: Mapping[str, Mapping[int, str]],
    metrics: Sequence[str],
) -> str:
    """One line per seed and control: the treatment's run minus the control's run of the same
    seed on each of ``metrics``, with the paired 95 % bootstrap interval over the test queries
    both runs scored (``xmr compare``); ``*`` marks a difference whose interval excludes 0.

    ``treatment``: ``(condition, run name per seed)``; ``controls``: per condition, its run
    name per seed.
    """
    label, runs = treatment
    lines = []
    for seed, name in runs.items():
        for condition, control in controls.items():
            frame = paired_comparison(control[seed], name, metrics, tracking_uri=tracking_uri).frame
            cells = ", ".join(
                f"{short_name(row.metric)} "
                f"{change_text(row.difference, row.ci_low, row.ci_high, mark=True)}"
                for row in frame.itertuples()
            )
            lines.append(f"seed {seed}: {label} − {condition}: {cells}")
    legend = "[low, high]: paired 95 % bootstrap interval over the test queries; * excludes 0"
    return "\n".join([*lines, "", legend])


def seed_differences(
    tracking_uri: str,
    treated: Mapping[int, str],
    control: Mapping[int, str],
    metrics: Sequence[str],
) -> dict[str, np.ndarray]:
    """Per metric of ``metrics`` (of one query set), ``[S, Q]``: per seed (in ``treated``'s
    order), the treated run's per-query values minus the same seed's control run's, on the
    queries both scored (what :func:`xmr.compare.bootstrap.seeds_and_queries_interval`
    resamples). Each run's values are read once.

    Raises:
        ValueError: two runs scored other queries (another test set).
    """
    rows: dict[str, list[np.ndarray]] = {metric: [] for metric in metrics}
    keys = None
    for seed, name in treated.items():
        values = []
        for run in (control[seed], name):
            run_id = find_run(run, tracking_uri=tracking_uri).run_id
            (query_set,) = select_metrics(logged_per_query(run_id, tracking_uri=tracking_uri),
                                          metrics).values()  # fmt: skip
            if keys is not None and query_set.keys != keys:
                raise ValueError(f"{run} scored other queries than the first seed's runs")
            keys = query_set.keys
            values.append(query_set.values)
        for metric in metrics:
            rows[metric].append(values[1][metric] - values[0][metric])
    return {metric: np.stack(differences) for metric, differences in rows.items()}
