"""Metrics averaged over groups of queries, written as plain means over queries.

A benchmark's macro accuracy is the mean over its groups (relations, categories) of each
group's accuracy: a weighted mean of the groups' means. :func:`group_weighted_values` rescales
each query's value so that the plain mean over the queries is that weighted mean; the metric is
then a mean over queries like every other, and its interval is the stratified bootstrap of
these values within the groups (:func:`xmr.compare.bootstrap.bootstrap_stratified_means`),
which keeps each group's size and weight.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np


def group_weighted_values(
    values: np.ndarray, groups: Sequence[Hashable], weights: Mapping[Hashable, float]
) -> np.ndarray:
    """Per-query values whose mean is the weighted mean of the groups' means.

    Query ``i`` of group ``g`` (``n_g`` queries) becomes ``values[i] · w_g · Q / (n_g · W)``,
    with ``W`` the sum of the weights of the groups present, so that the mean over the ``Q``
    queries is ``Σ_g w_g · mean_g / W``: with a weight of 1 per group the macro average, with
    ``n_g`` the plain mean over the groups' queries, with 0 a group left out. Stratified by
    ``groups`` (:func:`~xmr.compare.bootstrap.bootstrap_stratified_means`), a resample's mean
    of these values is that weighted mean of the resampled groups' means, since every group
    keeps its size.

    Args:
        values: ``[Q]`` per-query values (a benchmark item's correctness, 0 or 1).
        groups: ``[Q]`` each query's group.
        weights: group -> its weight, >= 0 (a group not in it: 0), at least one group present
            with a positive weight.

    Returns:
        float64 ``[Q]``.
    """
    data = np.asarray(values, dtype=np.float64)
    if data.shape != (len(groups),):
        raise ValueError(f"{data.shape} values for {len(groups)} queries' groups")
    sizes: dict[Hashable, int] = {}
    for group in groups:
        sizes[group] = sizes.get(group, 0) + 1
    total = sum(weights.get(group, 0.0) for group in sizes)
    if not total > 0:
        raise ValueError("no group present has a positive weight")
    scale = np.array([weights.get(g, 0.0) * len(data) / (sizes[g] * total) for g in groups])
    return data * scale
