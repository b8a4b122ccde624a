"""Pareto fronts of two competing metrics (recall against bias, recall against ODmAP).

A trial is on the front when no other trial is at least as good on both metrics and strictly
better on one. "Good" follows each metric's mode (``max`` / ``min``); biases are judged by
their absolute value (:class:`~xmr.tune.space.Objective` ``abs``).
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

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


def plot_pareto(
    frame: pd.DataFrame,
    x: Objective,
    y: Objective,
    *,
    labels: Sequence[str],
    path: StoragePath,
    title: str,
) -> np.ndarray:
    """Scatter of every trial (``frame[x.name]``, ``frame[y.name]``; abs taken where the
    objective says so), the front highlighted and joined, each point labelled with
    ``labels[i]`` (its swept values). Writes a PNG to ``path`` and returns the front,
    bool ``[N]`` (:func:`pareto_front`)."""
    xs = frame[x.name].astype(float).map(x.value).to_numpy()
    ys = frame[y.name].astype(float).map(y.value).to_numpy()
    front = pareto_front(np.column_stack([xs, ys]), (x.mode, y.mode))
    fig = Figure(figsize=(9, 5.5))
    ax = fig.subplots()
    ax.scatter(xs[~front], ys[~front], color="0.6", label="dominated", zorder=2)
    order = np.argsort(xs[front])
    ax.plot(xs[front][order], ys[front][order], "-o", color="tab:red", label="Pareto front",
            zorder=3)  # fmt: skip
    for xi, yi, label in zip(xs, ys, labels, strict=True):
        if np.isfinite(xi) and np.isfinite(yi):
            ax.annotate(label, (xi, yi), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_xlabel(f"{x.label} ({'higher' if x.mode == 'max' else 'lower'} is better)")
    ax.set_ylabel(f"{y.label} ({'higher' if y.mode == 'max' else 'lower'} is better)")
    ax.margins(x=0.25, y=0.1)  # room for the labels
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png.getvalue())  # a local file or an object in a bucket
    return front
