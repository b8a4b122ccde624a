"""MedR: the median over queries of the rank of each query's first positive (1 is best).

A query's rank is the 1-based place of its best-ranked positive in the whole gallery (higher
score first, equal scores by the lower gallery index), so it is not cut at any K: Recall@K
says whether it is <= K, MedR is where the middle query finds its match (VSE++, Faghri et al.
2018, Table 1: "Med r"). Lower is better and the metric is a median, not a mean
(:data:`xmr.metrics.direction.AGGREGATIONS`): its bootstrap takes each resample's median.

A complete ranking of every query costs ``O(Q × G)`` memory; :func:`first_positive_ranks`
reads the ranks of the top K from a :class:`Ranking` and takes the rest from
:func:`xmr.retrieval.positive_ranks`, which computes them chunk by chunk from the embeddings.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import torch

from xmr.metrics.ranking import Ranking, as_ranking

# (query, positive) pairs are looked up in blocks of about this many ranked items (~9 B each).
_BLOCK_ELEMENTS = 1 << 22


def first_positive_ranks(
    scores: np.ndarray | torch.Tensor | Ranking,
    positives: Sequence[Collection[int]],
    *,
    beyond: np.ndarray | None = None,
) -> np.ndarray:
    """Per query, the 1-based rank of its best-ranked positive: int64 ``[Q]`` in ``[1, G + 1]``.

    Args:
        scores: a dense ``[Q, G]`` score matrix (ranked completely here: ``O(Q × G)``) or a
            :class:`Ranking` (e.g. re-ranked); a ranking of only the top ``K < G`` needs
            ``beyond``.
        positives: ``positives[q]``, the correct gallery indices of query q. A query without
            any ranks ``G + 1``, below every gallery item (it is never a hit at any K).
        beyond: int ``[Q]``, each query's rank over the whole gallery
            (:func:`xmr.retrieval.positive_ranks` of the embeddings the ranking was made
            from), read for the queries that have no positive in the ranking's top K. It is
            taken as at least ``K + 1``: the ranking, re-ranked or made by another kernel
            whose last bits differ, decides who is in its top K.

    Raises:
        ValueError: no queries, a positive set per query missing, or an incomplete ranking
            without ``beyond`` (or ``beyond`` of another shape).
    """
    if isinstance(scores, Ranking):
        ranking = as_ranking(scores, scores.k)
    else:  # every column: a complete ranking
        ranking = as_ranking(scores, max(1, scores.shape[-1]))
    num_queries, top = ranking.num_queries, ranking.k
    if len(positives) != num_queries:
        raise ValueError(f"{len(positives)} positive sets for {num_queries} queries")
    complete = top == ranking.num_gallery
    if not complete and beyond is None:
        raise ValueError(
            f"the ranking holds the top {top} of {ranking.num_gallery} gallery items: give the "
            "ranks beyond them (xmr.retrieval.positive_ranks)"
        )
    rows = np.repeat(np.arange(num_queries), [len(p) for p in positives])
    cols = np.fromiter((g for p in positives for g in p), dtype=np.int64, count=len(rows))
    ranks = np.full(num_queries, ranking.num_gallery + 1, dtype=np.int64)
    if not complete:
        fallback = np.asarray(beyond, dtype=np.int64)
        if fallback.shape != (num_queries,):
            raise ValueError(f"beyond has shape {list(fallback.shape)}, expected [{num_queries}]")
        with_positive = np.bincount(rows, minlength=num_queries) > 0
        ranks[with_positive] = np.maximum(fallback[with_positive], top + 1)
    block = max(1, _BLOCK_ELEMENTS // top)
    for start in range(0, len(rows), block):
        pair_rows, pair_cols = rows[start : start + block], cols[start : start + block]
        # [pairs, K]: where each (query, positive) pair sits in its query's top K
        at = ranking.indices[pair_rows] == pair_cols[:, None]
        found = at.any(axis=1)
        np.minimum.at(ranks, pair_rows[found], at[found].argmax(axis=1) + 1)
    return ranks


def median_rank(ranks: np.ndarray) -> float:
    """MedR: the median of ``[Q]`` per-query ranks (:func:`first_positive_ranks`), in ranks.

    >>> median_rank(np.array([1, 3, 2, 40]))
    2.5
    """
    values = np.asarray(ranks, dtype=np.float64)
    if values.size == 0:
        raise ValueError("no queries to evaluate")
    return float(np.median(values))
