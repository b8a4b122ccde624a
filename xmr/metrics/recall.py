"""Recall@K: the fraction of queries with a correct gallery item in their top K; and the summed
recall (RSUM / SumR) that ranks models by all of them at once."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from xmr.metrics.ranking import Ranking, as_ranking, check_ks


def recall_hits(
    scores: np.ndarray | torch.Tensor | Ranking,
    positives: Sequence[Collection[int]],
    ks: Iterable[int] = (1, 5, 10),
) -> dict[int, np.ndarray]:
    """Per query, whether it is a hit at each K in ``ks``: ``{K: bool [Q]}``.

    ``scores`` is a dense ``[Q, G]`` score matrix (higher first, ties to the lower gallery index)
    or a :class:`Ranking` with at least the top ``max(ks)`` (or all ``G``). ``positives[q]`` holds
    the correct gallery indices of query q; the query is a hit at K when any of them ranks in the
    top K (a query without positives never is). A K above ``G`` ranks the whole gallery.
    Recall@K is the mean (:func:`recall_at_k`); its bootstrap resamples these.
    """
    ks = check_ks(ks)
    ranking = as_ranking(scores, max(ks))
    if len(positives) != ranking.num_queries:
        raise ValueError(f"{len(positives)} positive sets for {ranking.num_queries} queries")
    top = ranking.top(max(ks))
    hit = np.array(
        [[g in pos for g in row] for row, pos in zip(top.tolist(), positives, strict=True)],
        dtype=bool,
    ).reshape(top.shape)
    hit_within = np.logical_or.accumulate(hit, axis=1)  # [Q, K]: a hit at rank <= i + 1
    return {k: hit_within[:, min(k, top.shape[1]) - 1] for k in ks}


def recall_at_k(
    scores: np.ndarray | torch.Tensor | Ranking,
    positives: Sequence[Collection[int]],
    ks: Iterable[int] = (1, 5, 10),
) -> dict[int, float]:
    """Recall@K for each K in ``ks``: ``{K: fraction of queries in [0, 1]}``, the mean of
    :func:`recall_hits` (same arguments)."""
    return {k: float(hits.mean()) for k, hits in recall_hits(scores, positives, ks).items()}


def summed_recall(recalls: Iterable[Mapping[Any, float]]) -> float:
    """The summed recall (RSUM, SumR) in percentage points: ``100 ×`` the sum of every Recall@K.

    ``recalls`` holds Recall@K as fractions in [0, 1]: one mapping per retrieval direction
    (``{K: recall}``, as :func:`recall_at_k` returns), or a single mapping of them all (MLflow
    name -> recall); they are summed in the order given. With K = 1, 5, 10 both ways the result
    lies in [0, 600].

    This is the papers' overall retrieval score: EI-CLIP (Ma et al. 2022) reports
    "SumR = (Rank@1 + Rank@5 + Rank@10) × 100" over image-to-text and text-to-image (its Table 1:
    SumR 302 = 25.7 + 54.5 + 66.8 + 28.4 + 57.1 + 69.4), and VSE++ selects its best checkpoint
    by the same sum of R@1, 5, 10 in percent both ways (its ``rsum``). xmr logs it as
    ``{split}/sumr`` (product retrieval) and selects the best training checkpoint by it.

    >>> i2t, t2i = {1: 0.257, 5: 0.545, 10: 0.668}, {1: 0.284, 5: 0.571, 10: 0.694}
    >>> round(summed_recall([i2t, t2i]), 1)
    301.9
    """
    return 100.0 * sum(sum(r.values()) for r in recalls)
