"""Mean average precision at k (mAP@k), the accuracy measure under ODmAP@k (odmap paper §3.2).

For one query with the relevance ``rel(i)`` of its rank-``i`` item and the precision
``P(i) = (relevant items in the top i) / i``::

    AP@k = Σ_{i≤k} P(i)·rel(i) / N

and mAP@k is the mean of AP@k over queries. The normalisation ``N`` is a named option:

* ``"retrieved"`` (default): ``N = Σ_{i≤k} rel(i)``, the relevant items retrieved in the top k;
  AP@k = 0 when none is. This is ``mean_average_precision`` of pytorch-metric-learning, the
  library of "A metric learning reality check" (Musgrave et al., ECCV 2020), which the ODmAP
  paper cites for its mAP@k ([52]). A query whose relevant hits all rank first scores 1, however
  many more relevant items the gallery holds.
* ``"min_k_relevant"``: ``N = min(k, R)`` with ``R`` the relevant items in the whole gallery (the
  usual information-retrieval AP@k); relevant items missing from the top k lower the score.

Neither is that library's mAP@R, which sets ``k = R`` per query and divides by ``R``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from xmr.metrics.arrays import as_numpy
from xmr.metrics.ranking import Ranking, as_ranking

Normalization = Literal["retrieved", "min_k_relevant"]


def average_precision_at_k(
    ranked_relevance: np.ndarray, num_relevant: np.ndarray | None = None
) -> np.ndarray:
    """AP@k of each query from the relevance of its ranked items: float64 ``[Q]`` in [0, 1].

    ``ranked_relevance`` is bool ``[Q, k]``: whether each query's rank-1..k items are relevant;
    its column count is the cutoff k. ``num_relevant`` is None for the ``"retrieved"``
    normalisation, or int ``[Q]``, the relevant items in the whole gallery, for
    ``"min_k_relevant"`` (see the module docstring). This is the single definition of AP in
    :mod:`xmr.metrics`; callers that can only judge the ranked items (ODmAP over a 600k-caption
    gallery) call it directly.
    """
    rel = np.asarray(ranked_relevance, dtype=bool)
    hits = np.cumsum(rel, axis=1)
    summed = (hits / np.arange(1, rel.shape[1] + 1) * rel).sum(axis=1)
    denom = hits[:, -1] if num_relevant is None else np.minimum(rel.shape[1], num_relevant)
    return np.divide(summed, denom, out=np.zeros_like(summed), where=denom > 0)


def map_at_k(
    scores: np.ndarray | torch.Tensor | Ranking,
    relevance: np.ndarray | torch.Tensor,
    k: int,
    *,
    normalization: Normalization = "retrieved",
) -> float:
    """mAP@k, a fraction in [0, 1].

    ``scores`` is a dense ``[Q, G]`` score matrix (higher first, ties to the lower gallery index)
    or a :class:`Ranking` with at least the top ``k`` (or all ``G``). ``relevance`` is bool
    ``[Q, G]``: whether gallery item g is relevant to query q. When k exceeds ``G`` the whole
    gallery is ranked. ``normalization`` is ``"retrieved"`` (default) or ``"min_k_relevant"``;
    see the module docstring.
    """
    if normalization not in ("retrieved", "min_k_relevant"):
        raise ValueError(
            f"normalization must be 'retrieved' or 'min_k_relevant', got {normalization!r}"
        )
    ranking = as_ranking(scores, k)
    rel = as_numpy(relevance)
    if rel.dtype != bool:
        raise ValueError(f"relevance must be boolean, got {rel.dtype}")
    if rel.shape != (ranking.num_queries, ranking.num_gallery):
        raise ValueError(
            f"relevance is {list(rel.shape)}, expected [Q, G] = "
            f"{[ranking.num_queries, ranking.num_gallery]}"
        )
    ranked = np.take_along_axis(rel, ranking.top(k), axis=1)
    num_relevant = rel.sum(axis=1) if normalization == "min_k_relevant" else None
    return float(average_precision_at_k(ranked, num_relevant).mean())
