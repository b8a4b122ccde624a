"""Pareto fronts of two competing metrics (recall against bias, recall against ODmAP).

A trial is on the front when no other trial is at least as good on both metrics and strictly
better on one. "Good" follows each metric's mode (``max`` / ``min``); biases are judged by
their absolute value (:class:`~xmr.tune.space.Objective` ``abs``).

Two front points next to each other along the x metric (:func:`front_neighbours`) may differ
by less than the test set can tell: :func:`pareto_ties` pairs their trials' per-query values
(:func:`xmr.compare.paired.tied_pairs`) and calls them indistinguishable when the paired
intervals of both differences hold 0; :func:`front_marks` and :func:`plot_pareto` show such
ties (:data:`~xmr.compare.verdict.TIE`).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from xmr.compare.paired import tied_pairs
from xmr.compare.per_query import QueryValues
from xmr.compare.verdict import TIE
from xmr.storage import StoragePath
from xmr.tune.space import Objective


def pareto_front(values: np.ndarray, modes: Sequence[str]) -> np.ndarray:
    """bool ``[N]``: which rows of ``values`` ``[N, M]`` are non-dominated.

    ``modes[j]`` is ``"max"`` or ``"min"`` for column j. Rows with a NaN are never on the front
    and never dominate. Equal rows are all on the front.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] != len(modes):
        raise ValueError(f"values {values.shape} do not match {len(modes)} modes")
    sign = np.array([1.0 if m == "max" else -1.0 for m in modes])
    gain = values * sign  # larger is better in every column
    valid = ~np.isnan(gain).any(axis=1)
    front = valid.copy()
    for i in np.flatnonzero(valid):
        others = gain[valid]
        dominated = (others >= gain[i]).all(axis=1) & (others > gain[i]).any(axis=1)
        front[i] = not dominated.any()
    return front


def objective_values(frame: pd.DataFrame, x: Objective, y: Objective) -> np.ndarray:
    """float ``[N, 2]``: each row's ``x`` and ``y`` values as the front judges them (abs taken
    where the objective says so; NaN where a metric is missing)."""
    return np.column_stack(
        [frame[o.name].astype(float).map(o.value).to_numpy(np.float64) for o in (x, y)]
    )


def front_neighbours(xs: np.ndarray, front: np.ndarray) -> list[tuple[int, int]]:
    """The pairs of adjacent front points: ``(i, j)`` row indices of consecutive rows of the
    front (bool ``[N]``) ordered by ``xs`` ``[N]`` (ties in row order), ``xs[i] <= xs[j]``.

    >>> front_neighbours(np.array([0.9, 0.1, 0.5, 0.3]), np.array([True, True, False, True]))
    [(1, 3), (3, 0)]
    """
    rows = np.flatnonzero(front)
    ordered = rows[np.argsort(xs[rows], kind="stable")].tolist()
    return list(pairwise(ordered))


def pareto_ties(
    frame: pd.DataFrame,
    x: Objective,
    y: Objective,
    *,
    tracking_uri: str,
    per_query: dict[str, dict[str, QueryValues] | None] | None = None,
) -> list[tuple[int, int]]:
    """The neighbours on the front of ``frame``'s trials (row positions, as
    :func:`front_neighbours`) that the test set cannot tell apart: over the queries both
    trials' runs (``mlflow_run_id``) scored, the paired bootstrap intervals of their difference
    on ``x`` and on ``y`` both hold 0 (:func:`xmr.compare.paired.tied_pairs`; for an ``abs``
    objective, the difference of the signed metric). Neighbours are left out when either run
    has no per-query values of both metrics or they scored other queries.

    ``per_query``: run id -> its logged values (None: none), filled as runs are read, so that
    several pairs of metrics read each run once.
    """
    values = objective_values(frame, x, y)
    front = pareto_front(values, (x.mode, y.mode))
    runs = frame["mlflow_run_id"].fillna("").astype(str).tolist()
    pairs = front_neighbours(values[:, 0], front)
    return tied_pairs(pairs, runs, (x.name, y.name), tracking_uri=tracking_uri, per_query=per_query)


def front_marks(
    front: np.ndarray, ties: Sequence[tuple[int, int]], names: Sequence[str]
) -> list[str]:
    """Each row's standing, for a table: ``"dominated"``, ``"front"``, or ``"front ≈ <name>"``
    for a front row not distinguishable from its neighbour ``<name>`` (both neighbours:
    ``"front ≈ <name>; <name>"``). ``front``: bool ``[N]``; ``ties``: row index pairs of
    indistinguishable neighbours; ``names``: ``[N]`` the rows' names.

    >>> front_marks(np.array([True, True, False]), [(0, 1)], ["a=0", "a=1", "a=2"])
    ['front ≈ a=1', 'front ≈ a=0', 'dominated']
    """
    tied: dict[int, list[str]] = {}
    for i, j in ties:
        tied.setdefault(i, []).append(names[j])
        tied.setdefault(j, []).append(names[i])
    return [
        (f"front {TIE} " + "; ".join(tied[row]) if row in tied else "front") if on else "dominated"
        for row, on in enumerate(front)
    ]


def front_line(
    xs: np.ndarray, front: np.ndarray, ties: Sequence[tuple[int, int]], names: Sequence[str]
) -> str:
    """The front in one line: its rows' ``names`` in ``xs`` order (:func:`front_neighbours`),
    ``" ≈ "`` between neighbours in ``ties``, ``"; "`` between the others.

    >>> front_line(np.array([0.2, 0.1, 0.3]), np.array([True, True, True]), [(1, 0)], "abc")
    'b ≈ a; c'
    """
    rows = np.flatnonzero(front)
    pairs = front_neighbours(xs, front)
    if not pairs:
        return names[rows[0]] if len(rows) else ""
    tied = {(min(i, j), max(i, j)) for i, j in ties}
    line = names[pairs[0][0]]
    for i, j in pairs:
        line += (f" {TIE} " if (min(i, j), max(i, j)) in tied else "; ") + names[j]
    return line


def plot_pareto(
    frame: pd.DataFrame,
    x: Objective,
    y: Objective,
    *,
    labels: Sequence[str],
    path: StoragePath,
    title: str,
    ties: Sequence[tuple[int, int]] = (),
    diagnostics: Sequence[str] = (),
) -> np.ndarray:
    """Scatter of every trial (:func:`objective_values` of ``frame``), the front highlighted and
    its neighbours joined (:func:`front_neighbours`), each point labelled with ``labels[i]``
    (its swept values). Neighbours in ``ties`` (row index pairs: not distinguishable on either
    metric) are joined by a dashed segment marked ``≈``. ``diagnostics``: columns of ``frame``
    drawn in a second panel against ``y`` (Bias@K's gendered and male shares: what moved it),
    each point labelled alike. Writes a PNG to ``path`` and returns the front, bool ``[N]``
    (:func:`pareto_front`)."""
    values = objective_values(frame, x, y)
    xs, ys = values[:, 0], values[:, 1]
    front = pareto_front(values, (x.mode, y.mode))
    tied = {(min(i, j), max(i, j)) for i, j in ties}
    shown = [name for name in diagnostics if name in frame and frame[name].notna().any()]
    fig = Figure(figsize=(15 if shown else 9, 5.5))
    ax, *others = fig.subplots(1, 2 if shown else 1, squeeze=False)[0]
    ax.scatter(xs[~front], ys[~front], color="0.6", label="dominated", zorder=2)
    ax.scatter(xs[front], ys[front], color="tab:red", label="Pareto front", zorder=3)
    tie_label = f"{TIE} not distinguishable (both paired intervals hold 0)"  # once in the legend
    for i, j in front_neighbours(xs, front):
        tie = (min(i, j), max(i, j)) in tied
        ax.plot(xs[[i, j]], ys[[i, j]], "--" if tie else "-", color="tab:red", zorder=3,
                label=tie_label if tie else None)  # fmt: skip
        if tie:
            tie_label = None
            middle = ((xs[i] + xs[j]) / 2, (ys[i] + ys[j]) / 2)
            ax.annotate(TIE, middle, textcoords="offset points", xytext=(-4, -14),
                        color="tab:red", fontsize=12, fontweight="bold")  # fmt: skip
    _label_points(ax, xs, ys, labels)
    ax.set_xlabel(f"{x.label} ({'higher' if x.mode == 'max' else 'lower'} is better)")
    ax.set_ylabel(f"{y.label} ({'higher' if y.mode == 'max' else 'lower'} is better)")
    ax.margins(x=0.25, y=0.1)  # room for the labels
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    ax.set_title(title, fontsize=10)
    if shown:
        _plot_diagnostics(others[0], frame, y, shown, labels)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png.getvalue())  # a local file or an object in a bucket
    return front


def _label_points(ax: Any, xs: np.ndarray, ys: np.ndarray, labels: Sequence[str]) -> None:
    for xi, yi, label in zip(xs, ys, labels, strict=True):
        if np.isfinite(xi) and np.isfinite(yi):
            ax.annotate(label, (xi, yi), textcoords="offset points", xytext=(5, 5), fontsize=8)


def _plot_diagnostics(
    ax: Any, frame: pd.DataFrame, y: Objective, names: Sequence[str], labels: Sequence[str]
) -> None:
    """Each diagnostic column of ``frame`` against the trials' ``y`` (raw, sign kept), one
    series each, with the balanced share 0.5 marked when a share is drawn."""
    against = frame[y.name].to_numpy(dtype=float)
    for name in names:
        values = frame[name].to_numpy(dtype=float)
        ax.plot(against, values, "o", label=name.split("/", 1)[-1], zorder=3)  # less the split
        _label_points(ax, against, values, labels)
    if any("share" in name for name in names):
        ax.axhline(0.5, color="0.5", linestyle=":", linewidth=1, label="0.5: balanced male share")
    ax.set_xlabel(y.name)
    ax.set_ylabel("diagnostic value (no better value)")
    ax.set_title(f"what moved {y.name.rsplit('/', 1)[-1]}: its diagnostics", fontsize=10)
    ax.margins(x=0.25, y=0.1)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
