"""A job's last step: its conditions' metrics side by side (``comparison.csv``, the job's
MLflow run) and the table its report prints.

A condition (``D``, ``D ∪ BiAug-D′``; ``CLIP``, ``EI-CLIP``) is the steps whose outcomes hold
its numbers: a training run (its final test metrics) and the evaluations of its checkpoint
(ARO, SugarCrepe). The change is the last condition's over the first, coloured by the metric's
direction (:func:`~xmr.metrics.metric_direction`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from rich.table import Table

from xmr.jobs.steps import StepContext, StepOutcome
from xmr.metrics import metric_direction

DELTA = "delta"
"""The prefix of the change's metrics in the job's run (``delta/<metric>``)."""


def condition_metrics(
    outcomes: Mapping[str, StepOutcome], conditions: Mapping[str, Sequence[str]]
) -> dict[str, dict[str, float]]:
    """Per condition, the metrics of its steps in one mapping (steps the job did not run, such
    as an evaluation whose data was not given, are left out)."""
    return {
        condition: {
            name: value
            for step in steps
            if step in outcomes
            for name, value in outcomes[step].metrics.items()
        }
        for condition, steps in conditions.items()
    }


def compared_rows(metrics: Mapping[str, Mapping[str, float]], rows: Sequence[str]) -> list[str]:
    """The metrics of ``rows`` that every condition has, in ``rows`` order."""
    return [row for row in rows if all(row in values for values in metrics.values())]


def record_comparison(
    context: StepContext,
    metrics: Mapping[str, Mapping[str, float]],
    rows: Sequence[str],
    prefixes: Mapping[str, str],
) -> StepOutcome:
    """Write ``comparison.csv`` into the job's folder (a row per metric of ``rows`` that every
    condition has, a column per condition) and log it, and each value as
    ``<prefixes[condition]>/<metric>`` and the change as ``delta/<metric>`` (with two or more
    conditions), into the job's MLflow run.

    Raises:
        RuntimeError: no metric of ``rows`` was measured in every condition.
    """
    import pandas as pd

    kept = compared_rows(metrics, rows)
    if not kept:
        raise RuntimeError(f"no metric to compare: none of {', '.join(rows)} in every condition")
    conditions = list(metrics)
    frame = pd.DataFrame(
        [{"metric": row, **{c: metrics[c][row] for c in conditions}} for row in kept]
    )
    path = context.folder / "comparison.csv"
    path.write_text(frame.to_csv(index=False))  # a local file or an object in a bucket
    logged: dict[str, float] = {}
    for row in kept:
        logged.update({f"{prefixes[c]}/{row}": metrics[c][row] for c in conditions})
        if len(conditions) > 1:
            logged[f"{DELTA}/{row}"] = metrics[conditions[-1]][row] - metrics[conditions[0]][row]
    run = context.job_run
    run.log_metrics(logged)
    run.log_artifact(path)
    return StepOutcome(context.parent_run_id, logged, {"comparison": str(path)})


def comparison_table(
    title: str,
    metrics: Mapping[str, Mapping[str, float]],
    rows: Sequence[str],
    label: Callable[[str], str] = lambda row: row,
) -> Table:
    """Metrics (``rows`` that every condition has, named by ``label``) as rows, conditions as
    columns with 3 decimals, then with two or more conditions the change of the last over the
    first: green where it is better by the metric's direction, red where it is not. A
    metric's name carries its direction (↑ higher is better, →0 closer to 0)."""
    conditions = list(metrics)
    table = Table(title=title)
    table.add_column("metric")
    for condition in conditions:
        table.add_column(condition, justify="right")
    if len(conditions) > 1:
        table.add_column("Δ", justify="right")
    for row in compared_rows(metrics, rows):
        direction = metric_direction(row)
        cells = [f"{metrics[c][row]:.3f}" for c in conditions]
        if len(conditions) > 1:
            first, last = metrics[conditions[0]][row], metrics[conditions[-1]][row]
            colour = "green" if direction.better(last, than=first) else "red"
            cells.append(f"[{colour}]{last - first:+.3f}[/{colour}]")
        table.add_row(f"{label(row)} {direction.symbol}", *cells)
    return table
