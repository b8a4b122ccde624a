"""Re-ranking the top-k of a ranking with a pairwise scorer (BLIP's ITM evaluation).

BLIP ranks the whole gallery by ITC similarity, then rescores each query's top ``k`` (COCO
256, Flickr 128) with its image–text matching head; the final score of a candidate is
``ITM logit + ITC similarity``. :func:`rerank` does the second step for any pairwise scorer;
:meth:`xmr.models.blip.BlipModel.pair_scorer` builds BLIP's.

>>> import numpy as np
>>> from xmr.metrics.ranking import rank
>>> itc = rank(np.array([[0.9, 0.8, 0.1]]), k=3)
>>> rerank(itc, lambda q, g: np.where(g == 1, 1.0, 0.0), k=2).indices
array([[1, 0]])
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from xmr.metrics.arrays import as_numpy
from xmr.metrics.ranking import Ranking

ScorePairs = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""``(query_idx [n], gallery_idx [n]) -> [n]`` scores of the pairs (higher = better match)."""


def rerank(
    ranking: Ranking, score_pairs: ScorePairs, k: int, *, pairs_per_call: int = 1 << 20
) -> Ranking:
    """Rescore the top ``k`` of each query: final score = pair score + ranking score.

    Args:
        ranking: the first-stage ranking; its ``scores`` (e.g. ITC cosine similarities) are
            added to the pair scores. It must hold the top ``min(k, G)`` of every query.
        score_pairs: scores int64 ``[n]`` query indices (rows of ``ranking``) against int64
            ``[n]`` gallery indices, returning ``[n]`` finite floats (e.g. ITM match logits).
        k: candidates per query (BLIP: 256 on COCO, 128 on Flickr30k).
        pairs_per_call: ``score_pairs`` gets whole queries, about this many pairs per call (at
            least one query); batching for the device is the scorer's business.

    Returns:
        A :class:`Ranking` of the same candidates, ``K = min(k, G)`` per query, ordered by the
        final score (float32, in ``scores``), equal scores by the lower gallery index.
        ``num_gallery`` is unchanged, so metrics at depths beyond ``K`` are refused.

    Raises:
        ValueError: ``ranking`` has no scores or too few candidates, or ``score_pairs`` returns
            the wrong shape or non-finite values.
    """
    if ranking.scores is None:
        raise ValueError("the ranking has no first-stage scores to add to")
    if pairs_per_call < 1:
        raise ValueError(f"pairs_per_call must be >= 1, got {pairs_per_call}")
    candidates = ranking.top(k)  # [Q, K]; raises when the ranking holds fewer than k
    first_stage = ranking.scores[:, : candidates.shape[1]]
    num_queries, top = candidates.shape
    final = np.empty((num_queries, top), dtype=np.float32)
    step = max(1, pairs_per_call // top)
    for start in range(0, num_queries, step):
        block = candidates[start : start + step]
        queries = np.repeat(np.arange(start, start + len(block), dtype=np.int64), top)
        pair = as_numpy(score_pairs(queries, block.reshape(-1)))
        if pair.shape != queries.shape:
            raise ValueError(
                f"score_pairs returned shape {list(pair.shape)} for {len(queries)} pairs"
            )
        if not np.isfinite(pair).all():
            raise ValueError("score_pairs returned NaN or infinite scores")
        final[start : start + len(block)] = (
            pair.reshape(block.shape) + first_stage[start : start + len(block)]
        )
    # Sort by final score descending, then by gallery index (np.lexsort: last key is primary).
    order = np.lexsort((candidates, -final), axis=1)
    return Ranking(
        np.take_along_axis(candidates, order, axis=1),
        ranking.num_gallery,
        np.take_along_axis(final, order, axis=1),
    )
