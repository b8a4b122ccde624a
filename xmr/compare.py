"""``xmr compare``: the runs of a sweep or an experiment side by side, from the tracking store.

The terminal version of what the MLflow UI shows: one row per run (its name, status and the
params that differ between the runs), one column per metric (the latest value of each).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from rich.table import Table

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


def comparison_frame(runs: pd.DataFrame, metrics: Sequence[str] = ()) -> pd.DataFrame:
    """Runs as rows: ``run``, ``status``, the params that vary (short names), ``metrics``.

    With no ``metrics``, :data:`DEFAULT_METRICS` that any run has. Rows are sorted by the
    varying params.
    """
    if runs.empty:
        return pd.DataFrame(columns=["run", "status"])
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
    return frame.reset_index(drop=True)


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
    Bias@K with their sign: :func:`xmr.metrics.find_direction`)."""
    headers, prefix = _headers(list(frame.columns))
    signed = {c for c in frame.columns if (d := find_direction(str(c))) and d.signed}
    table = Table(title=f"{title}{f' ({prefix} metrics)' if prefix else ''}")
    for column, header in zip(frame.columns, headers, strict=True):
        numeric = pd.api.types.is_float_dtype(frame[column]) and column not in ("run", "status")
        table.add_column(header, justify="right" if numeric else "left")
    for _, row in frame.iterrows():
        cells = []
        for column in frame.columns:
            value = row[column]
            if isinstance(value, float):
                cells.append("" if pd.isna(value) else f"{value:+.3f}" if column in signed
                             else f"{value:.3f}")  # fmt: skip
            else:
                cells.append(str(value))
        table.add_row(*cells)
    return table
