"""Metrics that are weighted means over queries, and the metric whose per-query values weigh
each.

Most metrics are plain means over queries of a per-query value. A weighted one is
``Σ_q w_q·x_q / Σ_q w_q``: ``male_share_at_K`` is each query's male share (NaN for a query
whose top K holds no gendered image) weighted by its gendered share, ``gendered_share_at_K`` of
the same query set, so that it equals the pooled ``Σ N_male / Σ (N_male + N_female)``
(:func:`xmr.metrics.gender_bias.male_share_at_k`). Declared here once: the bootstrap
(:mod:`xmr.compare.bootstrap`) resamples a weighted metric's values and weights together, and
its interval, or a paired difference's, is of the weighted mean.
"""

from __future__ import annotations

import re

import numpy as np

WEIGHTS: tuple[tuple[str, str], ...] = ((r"male_share_at_(\d+)(.*)", r"gendered_share_at_\1\2"),)
"""(pattern of a metric name's last ``/`` part, the weighing metric's as a template of its
groups): the declaration, in one place."""


def weight_metric(name: str) -> str | None:
    """The metric whose per-query values weigh ``name``'s (the same ``split/`` prefix), or
    None for a plain mean.

    >>> weight_metric("test/male_share_at_10_cup"), weight_metric("test/bias_at_10")
    ('test/gendered_share_at_10_cup', None)
    """
    prefix, slash, stem = name.rpartition("/")
    for pattern, weight in WEIGHTS:
        match = re.fullmatch(pattern, stem)
        if match:
            return f"{prefix}{slash}{match.expand(weight)}"
    return None


def weighted_mean(values: np.ndarray, weights: np.ndarray) -> float:
    """``Σ w·x / Σ w`` over ``[Q]`` values and their ``[Q]`` weights (>= 0); a value whose weight
    is 0 is left out (it may be NaN); NaN when every weight is 0."""
    x = np.asarray(values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if x.shape != w.shape:
        raise ValueError(f"{x.shape} values for {w.shape} weights")
    total = w.sum()
    if not total > 0:
        return float("nan")
    return float(np.where(w > 0, x * w, 0.0).sum() / total)
