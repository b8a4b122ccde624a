"""``xmr compare``'s tables: runs side by side, and two runs paired.

- many runs (a sweep's trials, an experiment's runs: :mod:`xmr.compare.runs`): the terminal
  version of what the MLflow UI shows, one row per run (its name, status and the params that
  differ between the runs), one column per metric (the latest value of each):
  :func:`comparison_frame`, :func:`comparison_table`, :func:`comparison_json`;
- two runs (:class:`~xmr.compare.paired.PairedComparison`): each metric of both, the
  difference with its paired interval and the verdict (:mod:`xmr.compare.verdict`):
  :func:`paired_table`, :func:`paired_json`.

A run that did not finish (its MLflow status is not :data:`~xmr.compare.runs.FINISHED`) is
marked in the tables, and its status recorded in the JSON.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from xmr.compare.paired import PairedComparison
from xmr.compare.runs import FINISHED
from xmr.compare.verdict import TIE, bounds_text, verdict
from xmr.metrics.direction import find_direction

DEFAULT_METRICS = (
    "test/recall_i2t_at_10",
    "test/recall_t2i_at_10",
    "test/odmap_at_1",
    "test/bias_at_10",
    "test/gendered_share_at_10",
    "test/male_share_at_10",
    "test/natural/bias_at_10",
    "test/natural/gendered_share_at_10",
    "test/natural/male_share_at_10",
)
"""Shown for an experiment when no --metrics are given (those the runs have): Bias@10 with its
two diagnostics (:mod:`xmr.metrics.gender_bias`), and the same of the test split's own images
when Bias@K ranks a gender split (``natural/``)."""

IDENTITY_PARAMS = frozenset({"train.name", "data.root", "model.checkpoint"})
"""Params that differ between runs by construction, not by choice: never shown as columns."""


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
    :data:`~xmr.compare.runs.FINISHED` has its status in bold red, and the caption counts such
    runs."""
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


def paired_table(comparison: PairedComparison) -> Table:
    """A rich table of a :class:`~xmr.compare.paired.PairedComparison`: each metric's two
    values, the difference B − A with its interval (bold: the interval excludes 0) and the
    verdict (:func:`~xmr.compare.verdict.verdict`)."""
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
        f"({comparison.resamples} resamples); {TIE}: the interval holds 0"
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
            escape(bounds_text(row.ci_low, row.ci_high)),
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
    """A :class:`~xmr.compare.paired.PairedComparison` as JSON: ``runs`` (A then B, each with
    its ``run_id``, ``name`` and ``status``), ``confidence``, ``resamples`` and ``metrics`` (the
    rows of its frame)."""
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
