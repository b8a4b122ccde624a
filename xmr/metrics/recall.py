"""Recall@K: the fraction of queries with a correct gallery item in their top K."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

import numpy as np
import torch

from xmr.metrics.ranking import Ranking, as_ranking, check_ks


def recall_at_k(
    scores: np.ndarray | torch.Tensor | Ranking,
    positives: Sequence[Collection[int]],
    ks: Iterable[int] = (1, 5, 10),
) -> dict[int, float]:
    """Recall@K for each K in ``ks``: ``{K: fraction of queries in [0, 1]}``.

    ``scores`` is a dense ``[Q, G]`` score matrix (higher first, ties to the lower gallery index)
    or a :class:`Ranking` with at least the top ``max(ks)`` (or all ``G``). ``positives[q]`` holds
    the correct gallery indices of query q; the query is a hit at K when any of them ranks in the
    top K (a query without positives never is). A K above ``G`` ranks the whole gallery.
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
    return {k: float(hit_within[:, min(k, top.shape[1]) - 1].mean()) for k in ks}
