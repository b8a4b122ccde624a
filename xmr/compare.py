"""``xmr compare``: runs side by side, from the tracking store.

- a sweep's trials or an experiment's runs: the terminal version of what the MLflow UI shows,
  one row per run (its name, status and the params that differ between the runs), one column
  per metric (the latest value of each);
- two runs (:func:`paired_comparison`): each metric of both, and the difference with a paired
  bootstrap interval over the queries both scored, read from their ``per_query.parquet``
  (:mod:`xmr.eval.per_query`): two evaluations, two training runs, or two runs of one
  benchmark (its items resampled within their groups, as its macro accuracies are). Runs of
  different test sets or benchmark files are refused.

Every run carries its MLflow status (:data:`FINISHED`, or RUNNING, FAILED, KILLED): the tables
mark a run that did not finish, as :func:`comparison_json` and :func:`paired_json` record it.
Whether to compare such a run at all is the caller's choice (``xmr compare`` refuses one unless
``--allow-unfinished``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from xmr.eval.per_query import (
    QueryValues,
    logged_per_query,
    paired_differences,
    select_metrics,
)
from xmr.metrics.direction import find_direction
from xmr.tracking import (
    PARENT_TAG,
    experiment_id,
    experiment_names,
    resolve_tracking_uri,
    runs_frame,
)

DEFAULT_METRICS = (
    "test/recall_i2t_at_10",
    "test/recall_t2i_at_10",
    "test/odmap_at_1",
    "test/bias_at_10",
)
"""Shown for an experiment when no --metrics are given (those the runs have)."""

FINISHED = "FINISHED"
"""The MLflow status of a run that ended well; any other (RUNNING, FAILED, KILLED, SCHEDULED)
means its metrics are the last it logged, perhaps not its final ones."""

IDENTITY_PARAMS = frozenset({"train.name", "data.root", "model.checkpoint"})
"""Params that differ between runs by construction, not by choice: never shown as columns."""


def sweep_runs(sweep: str, *, tracking_uri: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """The trial runs of sweep ``sweep`` (its ``xmr.sweep_id``) and the sweep's metrics.

    Raises LookupError when no sweep has that id.
    """
    uri = resolve_tracking_uri(tracking_uri)
    parents = runs_frame({"xmr.sweep_id": sweep, "xmr.command": "tune"}, tracking_uri=uri)
    if parents.empty:
        raise LookupError(f"no sweep {sweep!r} in {uri} (see the parent runs of xmr/tune/...)")
    parent = parents.iloc[0]
    children = runs_frame(
        {PARENT_TAG: parent["run_id"]}, tracking_uri=uri, experiment_ids=[parent["experiment_id"]]
    )
    metrics = str(parent.get("tags.xmr.metrics") or "").split(",")
    return children, [m for m in metrics if m]


def experiment_runs(experiment: str, *, tracking_uri: str | None = None) -> pd.DataFrame:
    """Every run of ``experiment`` except sweep parents. LookupError when it doesn't exist."""
    uri = resolve_tracking_uri(tracking_uri)
    found = experiment_id(experiment, tracking_uri=uri)
    if found is None:
        names = experiment_names(tracking_uri=uri)
        raise LookupError(f"no experiment {experiment!r} in {uri}; there are: {', '.join(names)}")
    runs = runs_frame(tracking_uri=uri, experiment_ids=[found])
    if "tags.xmr.command" in runs:
        runs = runs[runs["tags.xmr.command"] != "tune"]
    return runs


def unfinished_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``runs`` (a :func:`~xmr.tracking.runs_frame`) whose status is not
    :data:`FINISHED`."""
    if runs.empty:
        return runs
    return runs[runs["status"] != FINISHED]


def describe_runs(runs: pd.DataFrame) -> str:
    """``name (run <id>, STATUS)`` for each row of ``runs`` (a
    :func:`~xmr.tracking.runs_frame`), comma-separated."""
    names = runs.get("tags.mlflow.runName", runs["run_id"]).fillna(runs["run_id"])
    return ", ".join(
        f"{name} (run {run_id}, {status})"
        for name, run_id, status in zip(names, runs["run_id"], runs["status"], strict=True)
    )


def comparison_frame(runs: pd.DataFrame, metrics: Sequence[str] = ()) -> pd.DataFrame:
    """Runs as rows, indexed by ``run_id``: ``run`` (its name), ``status``, the params that vary
    (short names), ``metrics``.

    With no ``metrics``, :data:`DEFAULT_METRICS` that any run has. Rows are sorted by the
    varying params.
    """
    if runs.empty:
        return pd.DataFrame(columns=["run", "status"], index=pd.Index([], name="run_id"))
    metrics = list(metrics) or [m for m in DEFAULT_METRICS if f"metrics.{m}" in runs]
    param_columns = [
        c
        for c in runs.columns
        if c.startswith("params.")
        and c.removeprefix("params.") not in IDENTITY_PARAMS
        and runs[c].nunique(dropna=True) > 1  # a run that failed early may lack params
    ]
    frame = pd.DataFrame(
        {
            "run": runs.get("tags.mlflow.runName", runs["run_id"]).fillna(runs["run_id"]),
            "status": runs["status"],
        }
    )
    for column in param_columns:
        frame[column.removeprefix("params.")] = runs[column]
    for metric in metrics:
        column = f"metrics.{metric}"
        frame[metric] = runs[column] if column in runs else float("nan")
    sort = [c.removeprefix("params.") for c in param_columns]
    if sort:
        numeric = frame[sort].apply(pd.to_numeric, errors="coerce")
        keys = [numeric[c] if numeric[c].notna().all() else frame[c] for c in sort]
        order = pd.DataFrame({f"k{i}": k for i, k in enumerate(keys)}).sort_values(
            [f"k{i}" for i in range(len(keys))], kind="stable"
        )
        frame = frame.loc[order.index]
    frame.index = pd.Index(runs.loc[frame.index, "run_id"].astype(str), name="run_id")
    return frame


def _headers(columns: Sequence[str]) -> tuple[list[str], str]:
    """Short column headers: params without their namespace (``loss.fair_alpha`` ->
    ``fair_alpha``) where unambiguous, metrics without a prefix they all share (``test/``),
    which is returned to go in the title."""
    metrics = [c for c in columns if "/" in c]
    prefixes = {c.split("/", 1)[0] for c in metrics}
    prefix = f"{prefixes.pop()}/" if len(prefixes) == 1 and len(metrics) > 1 else ""
    tails = [c.rsplit(".", 1)[-1] for c in columns]
    headers = []
    for column, tail in zip(columns, tails, strict=True):
        if "/" in column:
            headers.append(column.removeprefix(prefix))
        elif "." in column and tails.count(tail) == 1:
            headers.append(tail)
        else:
            headers.append(column)
    return headers, prefix


def comparison_table(frame: pd.DataFrame, title: str) -> Table:
    """A rich table of :func:`comparison_frame` (metrics to 3 decimals, signed ones such as
    Bias@K with their sign: :func:`xmr.metrics.find_direction`). A run that is not
    :data:`FINISHED` has its status in bold red, and the caption counts such runs."""
    headers, prefix = _headers(list(frame.columns))
    signed = {c for c in frame.columns if (d := find_direction(str(c))) and d.signed}
    unfinished = frame["status"][frame["status"] != FINISHED] if "status" in frame else []
    caption = None
    if len(unfinished):
        statuses = ", ".join(sorted(set(map(str, unfinished))))
        caption = (
            f"{len(unfinished)} of {len(frame)} runs not {FINISHED} ({statuses}): "
            "their metrics are the last they logged"
        )
    table = Table(title=f"{title}{f' ({prefix} metrics)' if prefix else ''}", caption=caption)
    for column, header in zip(frame.columns, headers, strict=True):
        numeric = pd.api.types.is_float_dtype(frame[column]) and column not in ("run", "status")
        table.add_column(header, justify="right" if numeric else "left")
    for _, row in frame.iterrows():
        cells: list[str | Text] = []
        for column in frame.columns:
            value = row[column]
            if column == "status" and value != FINISHED:
                cells.append(Text(str(value), style="bold red"))
            elif isinstance(value, float):
                cells.append("" if pd.isna(value) else f"{value:+.3f}" if column in signed
                             else f"{value:.3f}")  # fmt: skip
            else:
                cells.append(str(value))
        table.add_row(*cells)
    return table


@dataclass
class PairedComparison:
    """Two runs' metrics on the same queries and their paired differences.

    ``frame``: one row per metric: ``metric``, ``first``, ``second`` (the runs' values),
    ``difference`` (second − first), ``ci_low``, ``ci_high`` (its paired bootstrap interval)
    and ``significant`` (the interval excludes 0).
    """

    first: tuple[str, str]  # (run id, run name)
    second: tuple[str, str]
    frame: pd.DataFrame
    confidence: float
    resamples: int
    statuses: tuple[str, str] = (FINISHED, FINISHED)  # the runs' MLflow statuses


@dataclass(frozen=True)
class FoundRun:
    """A run given by its id or name (:func:`find_run`): its id, name and MLflow status."""

    run_id: str
    name: str
    status: str

    @property
    def finished(self) -> bool:
        """Whether the run ended well (:data:`FINISHED`)."""
        return self.status == FINISHED


def find_run(reference: str, *, tracking_uri: str) -> FoundRun:
    """The run given by its id or its name (in any experiment), whatever its status. A name
    that several runs share means its one finished run, when the others were interrupted or
    failed (a training stopped and started afresh leaves its first run behind).

    Raises LookupError when no run, or more than one finished run, answers to ``reference``.
    """
    frame = runs_frame(tracking_uri=tracking_uri)
    if frame.empty:
        raise LookupError(f"no runs in {tracking_uri}")
    names = frame.get("tags.mlflow.runName", pd.Series([""] * len(frame), index=frame.index))
    by_id = frame[frame["run_id"] == reference]
    found = by_id if not by_id.empty else frame[names == reference]
    if found.empty:
        raise LookupError(f"no run with the id or name {reference!r} in {tracking_uri}")
    finished = found["status"] == "FINISHED"
    if len(found) > 1 and finished.sum() == 1:
        found = found[finished]
    if len(found) > 1:
        ids = ", ".join(
            f"{run_id} ({status})"
            for run_id, status in zip(found["run_id"], found["status"], strict=True)
        )
        raise LookupError(f"{len(found)} runs are named {reference!r}: {ids}; give a run id")
    row = found.iloc[0]
    name = names.loc[found.index[0]]
    return FoundRun(
        str(row["run_id"]),
        str(name if pd.notna(name) and name else row["run_id"]),
        str(row["status"]),
    )


def run_per_query(run_id: str, *, tracking_uri: str) -> dict[str, QueryValues]:
    """The per-query values a run logged (its ``per_query.parquet`` artifact;
    :func:`xmr.eval.per_query.logged_per_query`).

    Raises LookupError when the run has none (an evaluation from before per-query values were
    logged, or a run that never reached its evaluation).
    """
    return logged_per_query(run_id, tracking_uri=tracking_uri)


def paired_comparison(
    first: str,
    second: str,
    metrics: Sequence[str] = (),
    *,
    tracking_uri: str | None = None,
    resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> PairedComparison:
    """``second`` against ``first`` (run ids or names), metric by metric, with paired bootstrap
    intervals over the queries both scored (:func:`xmr.eval.per_query.paired_differences`).

    ``metrics``: the names to keep (default: every metric both runs have per-query values of).
    A run that is not :data:`FINISHED` is compared all the same, its status in ``statuses``.
    Raises LookupError (a run, its values or a metric not found) or ValueError (the runs scored
    different queries).
    """
    uri = resolve_tracking_uri(tracking_uri)
    runs = [find_run(reference, tracking_uri=uri) for reference in (first, second)]
    values = [run_per_query(run.run_id, tracking_uri=uri) for run in runs]
    if metrics:
        known = {m for sets in values for query_set in sets.values() for m in query_set.values}
        unknown = [m for m in metrics if m not in known]
        if unknown:
            raise LookupError(
                f"no per-query values of {', '.join(unknown)}; the runs have: "
                f"{', '.join(sorted(known))}"
            )
        values = [select_metrics(sets, metrics) for sets in values]
    intervals = paired_differences(
        values[0], values[1], resamples=resamples, confidence=confidence, seed=seed
    )
    means = [
        {m: float(v.mean()) for s in sets.values() for m, v in s.values.items()} for sets in values
    ]
    frame = pd.DataFrame(
        [
            {
                "metric": name,
                "first": means[0][name],
                "second": means[1][name],
                "difference": interval.value,
                "ci_low": interval.low,
                "ci_high": interval.high,
                "significant": interval.excludes(0.0),
            }
            for name, interval in intervals.items()
        ],
        columns=["metric", "first", "second", "difference", "ci_low", "ci_high", "significant"],
    )
    a, b = ((run.run_id, run.name) for run in runs)
    return PairedComparison(a, b, frame, confidence, resamples, (runs[0].status, runs[1].status))


def verdict(metric: str, first: float, second: float, significant: bool) -> str:
    """Which run is better on ``metric`` by its declared direction (``B better``, ``A nearer
    0`` for a signed metric, ``B higher`` for one without a direction), or ``≈`` when the
    interval holds 0."""
    if not significant:
        return "≈"
    direction = find_direction(metric)
    if direction is None:
        return "B higher" if second > first else "A higher"
    if direction.signed:
        return "B nearer 0" if abs(second) < abs(first) else "A nearer 0"
    return "B better" if direction.better(second, first) else "A better"


def paired_table(comparison: PairedComparison) -> Table:
    """A rich table of a :class:`PairedComparison`: each metric's two values, the difference
    B − A with its interval (bold: the interval excludes 0) and the verdict."""
    marked = [
        f"{name}{'' if status == FINISHED else f' ({status})'}"
        for (_, name), status in zip(
            (comparison.first, comparison.second), comparison.statuses, strict=True
        )
    ]
    level = f"{comparison.confidence:.0%}"
    headers, prefix = _headers(list(comparison.frame["metric"]))
    caption = (
        f"paired over the same queries: {level} bootstrap intervals of B − A "
        f"({comparison.resamples} resamples); ≈: the interval holds 0"
    )
    unfinished = [
        f"{role} is {status}"
        for role, status in zip("AB", comparison.statuses, strict=True)
        if status != FINISHED
    ]
    if unfinished:
        caption += f"; {' and '.join(unfinished)}, not {FINISHED}: values as last logged"
    table = Table(
        title=escape(f"A = {marked[0]}, B = {marked[1]}{f' ({prefix} metrics)' if prefix else ''}"),
        caption=caption,
    )
    for header in ("metric", "A", "B", "B − A", f"{level} interval", "verdict"):
        table.add_column(header, justify="left" if header in ("metric", "verdict") else "right")
    for header, row in zip(headers, comparison.frame.itertuples(index=False), strict=True):
        direction = find_direction(row.metric)
        fmt = "{:+.3f}" if direction is not None and direction.signed else "{:.3f}"
        style = "bold" if row.significant else ""
        table.add_row(
            header,
            fmt.format(row.first),
            fmt.format(row.second),
            f"[{style}]{row.difference:+.3f}[/{style}]" if style else f"{row.difference:+.3f}",
            escape(f"[{row.ci_low:+.3f}, {row.ci_high:+.3f}]"),
            verdict(row.metric, row.first, row.second, row.significant),
        )
    return table


def _plain(value: object) -> object:
    """A frame's cell as a JSON value: numpy scalars as Python ones, NaN as None."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _records(frame: pd.DataFrame) -> list[dict[str, object]]:
    """``frame``'s rows as JSON-ready dicts."""
    return [{str(k): _plain(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]


def comparison_json(frame: pd.DataFrame, title: str) -> dict[str, object]:
    """:func:`comparison_frame` as JSON: ``title`` and ``runs``, one object per run with its
    ``run_id``, ``run`` (name), ``status``, varying params and metrics (missing ones null)."""
    return {"title": title, "runs": _records(frame.reset_index())}


def paired_json(comparison: PairedComparison) -> dict[str, object]:
    """A :class:`PairedComparison` as JSON: ``runs`` (A then B, each with its ``run_id``,
    ``name`` and ``status``), ``confidence``, ``resamples`` and ``metrics`` (the rows of its
    frame)."""
    runs = [
        {"role": role, "run_id": run_id, "name": name, "status": status}
        for role, (run_id, name), status in zip(
            "AB", (comparison.first, comparison.second), comparison.statuses, strict=True
        )
    ]
    return {
        "runs": runs,
        "confidence": comparison.confidence,
        "resamples": comparison.resamples,
        "metrics": _records(comparison.frame),
    }
