"""A job's last step: its conditions' metrics side by side (``comparison.csv``, the job's
MLflow run) and the table its report prints.

A condition (``D``, ``D ∪ BiAug-D′``; ``CLIP``, ``EI-CLIP``) is the steps whose outcomes hold
its numbers: a training run (its final test metrics) and the evaluations of its checkpoint
(ARO, SugarCrepe). The change is the last condition's over the first, with a paired bootstrap
interval over the queries both scored (:func:`paired_changes`: the conditions' runs' logged
per-query values, :mod:`xmr.compare.per_query`, paired by :mod:`xmr.compare.paired` with the
bootstrap's defaults) for every metric that has them; it is coloured by the metric's direction
(:func:`~xmr.metrics.metric_direction`) when that interval excludes 0, as ``xmr compare RUN_A
RUN_B`` calls a difference, and marked ``≈`` when it holds 0
(:func:`~xmr.compare.verdict.change_verdict`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from rich.markup import escape
from rich.table import Table

from xmr.compare.bootstrap import CONFIDENCE, Interval
from xmr.compare.paired import paired_differences
from xmr.compare.per_query import QueryValues, logged_per_query, select_metrics
from xmr.compare.verdict import TIE, change_text, change_verdict
from xmr.jobs.steps import StepContext, StepOutcome
from xmr.metrics import metric_direction

DELTA = "delta"
"""The prefix of the change's metrics in the job's run (``delta/<metric>``, its interval
``delta/<metric>_ci_low`` and ``delta/<metric>_ci_high``)."""


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


def condition_query_values(
    outcomes: Mapping[str, StepOutcome], steps: Sequence[str], *, tracking_uri: str
) -> dict[str, QueryValues]:
    """One condition's per-query values: the query sets its steps' runs logged, merged in step
    order (a later step's set replaces an earlier one of the same name, as its metrics do in
    :func:`condition_metrics`); a run without any (an old run, a training run on product
    data) adds none."""
    merged: dict[str, QueryValues] = {}
    for step in steps:
        run_id = outcomes[step].run_id if step in outcomes else None
        if run_id is None:
            continue
        try:
            merged.update(logged_per_query(run_id, tracking_uri=tracking_uri))
        except LookupError:
            continue
    return merged


def paired_changes(
    first: Mapping[str, QueryValues], last: Mapping[str, QueryValues], rows: Sequence[str]
) -> tuple[dict[str, Interval], str | None]:
    """The change ``last − first`` of each metric of ``rows`` that both have per-query values
    of, with its paired bootstrap interval (the bootstrap's defaults, fixed so that the same
    runs give the same table), and one line naming the query sets that could not be paired
    (the runs scored other queries: their metrics keep a plain change), or None.

    Returns:
        metric -> :class:`~xmr.compare.bootstrap.Interval` of the change, in ``rows`` order;
        the line.
    """
    first, last = select_metrics(first, rows), select_metrics(last, rows)
    found: dict[str, Interval] = {}
    refused: dict[str, str] = {}
    for name in [name for name in first if name in last]:
        try:
            found.update(paired_differences({name: first[name]}, {name: last[name]}))
        except ValueError as exc:
            refused[name] = str(exc)
    note = None
    if refused:
        reason = next(iter(refused.values()))
        note = f"no interval for the {', '.join(refused)} queries: {reason}"
    return {row: found[row] for row in rows if row in found}, note


def record_comparison(
    context: StepContext,
    conditions: Mapping[str, Sequence[str]],
    rows: Sequence[str],
    prefixes: Mapping[str, str],
) -> StepOutcome:
    """Compare ``conditions`` (condition -> the steps holding its metrics and runs) on the
    metrics of ``rows`` that every condition has.

    Writes ``comparison.csv`` into the job's folder: a row per metric, a column per condition
    and, with two or more conditions, the change (``delta``: last − first) with its paired
    interval (``ci_low``, ``ci_high``; empty for a metric without per-query values in both
    runs) and whether that excludes 0 (``significant``). Logs the CSV, each value as
    ``<prefixes[condition]>/<metric>`` and the change as ``delta/<metric>`` (with
    ``delta/<metric>_ci_low``, ``_ci_high``) into the job's MLflow run. The outcome's notes say
    why query sets could not be paired, if any could not.

    Raises:
        RuntimeError: no metric of ``rows`` was measured in every condition.
    """
    import pandas as pd

    metrics = condition_metrics(context.outcomes, conditions)
    kept = compared_rows(metrics, rows)
    if not kept:
        raise RuntimeError(f"no metric to compare: none of {', '.join(rows)} in every condition")
    names = list(metrics)
    intervals: dict[str, Interval] = {}
    note = None
    if len(names) > 1:
        first, last = (
            condition_query_values(
                context.outcomes, conditions[c], tracking_uri=context.tracking_uri
            )
            for c in (names[0], names[-1])
        )
        intervals, note = paired_changes(first, last, kept)
    table = []
    logged: dict[str, float] = {}
    for row in kept:
        values = {c: metrics[c][row] for c in names}
        logged.update({f"{prefixes[c]}/{row}": value for c, value in values.items()})
        line: dict[str, object] = {"metric": row, **values}
        if len(names) > 1:
            delta = values[names[-1]] - values[names[0]]
            logged[f"{DELTA}/{row}"] = delta
            interval = intervals.get(row)
            line.update(delta=delta, ci_low=None, ci_high=None, significant=None)
            if interval is not None:
                logged[f"{DELTA}/{row}_ci_low"] = interval.low
                logged[f"{DELTA}/{row}_ci_high"] = interval.high
                line.update(
                    ci_low=interval.low, ci_high=interval.high, significant=interval.excludes(0.0)
                )
        table.append(line)
    path = context.folder / "comparison.csv"
    path.write_text(pd.DataFrame(table).to_csv(index=False))  # a local file or in a bucket
    if note is not None:
        print(f"compare: {note}")
    run = context.job_run
    run.log_metrics(logged)
    run.log_artifact(path)
    notes = (note,) if note is not None else ()
    return StepOutcome(context.parent_run_id, logged, {"comparison": str(path)}, notes=notes)


def recorded_intervals(compared: StepOutcome) -> dict[str, Interval]:
    """The changes' intervals a :func:`record_comparison` outcome holds: metric ->
    :class:`~xmr.compare.bootstrap.Interval` (value: the change)."""
    metrics = compared.metrics
    found = {}
    for name, value in metrics.items():
        low, high = metrics.get(f"{name}_ci_low"), metrics.get(f"{name}_ci_high")
        if name.startswith(f"{DELTA}/") and low is not None and high is not None:
            found[name.removeprefix(f"{DELTA}/")] = Interval(value, low, high)
    return found


def comparison_table(
    title: str,
    metrics: Mapping[str, Mapping[str, float]],
    rows: Sequence[str],
    label: Callable[[str], str] = lambda row: row,
    compared: StepOutcome | None = None,
) -> Table:
    """Metrics (``rows`` that every condition has, named by ``label``) as rows, conditions as
    columns with 3 decimals, then with two or more conditions the change of the last over the
    first, with its paired interval where ``compared`` (the :func:`record_comparison`
    outcome) holds one: ``better`` (green) where the interval excludes 0 and the change is
    better by the metric's direction, ``worse`` (red) where it excludes 0 and is worse, dim and
    ``≈`` where it holds 0; a change without an interval is marked so, green or red by its
    direction alone. A metric's name
    carries its direction (↑ higher is better, →0 closer to 0); the caption says what the
    interval is, and why some query sets could not be paired (``compared``'s notes)."""
    conditions = list(metrics)
    intervals = recorded_intervals(compared) if compared is not None else {}
    kept = compared_rows(metrics, rows)
    lines = []
    if len(conditions) > 1 and any(row in intervals for row in kept):
        lines.append(
            f"Δ = {conditions[-1]} − {conditions[0]} [{CONFIDENCE:.0%} paired bootstrap "
            "interval over the same queries]: better or worse where the interval excludes 0, "
            f"{TIE} where it holds 0"
        )
    lines += list(compared.notes) if compared is not None else []
    caption = escape("\n".join(lines)) if lines else None
    table = Table(title=title, caption=caption, caption_justify="left")
    table.add_column("metric")
    for condition in conditions:
        table.add_column(condition, justify="right")
    if len(conditions) > 1:
        table.add_column("Δ", justify="right")
    for row in kept:
        direction = metric_direction(row)
        cells = [f"{metrics[c][row]:.3f}" for c in conditions]
        if len(conditions) > 1:
            first, last = metrics[conditions[0]][row], metrics[conditions[-1]][row]
            better = direction.better(last, than=first) if direction.judges else None
            cells.append(_change_cell(last - first, intervals.get(row), better))
        table.add_row(f"{label(row)} {direction.symbol}", *cells)
    return table


def _change_cell(change: float, interval: Interval | None, better: bool | None) -> str:
    """A Δ cell's markup, its verdict in words as well as colour (a log has no colour):
    ``better +0.084 [+0.050, +0.120]`` green (``better``) or ``worse …`` red where the
    interval excludes 0 (a diagnostic, ``better`` None: ``changed …`` cyan), ``≈ +0.012
    [-0.020, +0.040]`` dim where it holds 0; without an interval, ``+0.050 (no interval)``
    coloured by ``better`` alone."""
    colour = "cyan" if better is None else "green" if better else "red"
    if interval is None:
        return f"[{colour}]{change:+.3f} (no interval)[/{colour}]"
    text = escape(change_text(change, interval.low, interval.high))
    word = change_verdict(interval.low, interval.high, better)
    if word == TIE:
        return f"[dim]{TIE} {text}[/dim]"
    return f"[{colour}]{word} {text}[/{colour}]"
