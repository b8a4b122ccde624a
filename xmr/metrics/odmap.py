"""ODmAP@k (odmap paper §3.2): mAP@k of captions retrieved for images with objects removed.

A query is a synthetic image from which the classes ``removed[q]`` were inpainted away while the
classes ``present[q]`` remain. A retrieved caption is correct iff it mentions none of the removed
classes and at least one present class (the paper's conditions (1) and (2); ``mentions[g]`` is the
set of classes caption g refers to, after the dataset's ``match`` function). Only the ranked
captions are judged, so a :class:`Ranking` over a 600k-caption gallery never needs a dense
``[Q, G]`` relevance matrix.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet

import numpy as np
import torch

from xmr.metrics.average_precision import average_precision_at_k
from xmr.metrics.ranking import Ranking, as_ranking, check_ks


def odmap_relevance(
    ranked: np.ndarray,
    gallery_mentions: Sequence[AbstractSet[str]],
    removed: Sequence[AbstractSet[str]],
    present: Sequence[AbstractSet[str]],
) -> np.ndarray:
    """Whether each ranked caption is correct for its query: ``[Q, K]`` bool.

    ``ranked`` holds gallery indices ``[Q, K]``. Caption g is correct for query q iff it mentions
    no class of ``removed[q]`` and at least one class of ``present[q]`` (odmap paper §3.2).
    """
    return np.array(
        [
            [
                gallery_mentions[g].isdisjoint(gone) and not gallery_mentions[g].isdisjoint(kept)
                for g in row
            ]
            for row, gone, kept in zip(np.asarray(ranked).tolist(), removed, present, strict=True)
        ],
        dtype=bool,
    ).reshape(np.shape(ranked))


def odmap_per_query(
    scores: np.ndarray | torch.Tensor | Ranking,
    gallery_mentions: Sequence[AbstractSet[str]],
    removed: Sequence[AbstractSet[str]],
    present: Sequence[AbstractSet[str]],
    ks: Iterable[int] = (1, 5, 10),
) -> dict[int, np.ndarray]:
    """Each query's AP@k for each k in ``ks``: ``{k: float64 [Q] in [0, 1]}``.

    ``scores`` is a dense ``[Q, G]`` image-to-caption score matrix (higher first, ties to the
    lower gallery index) or a :class:`Ranking` with at least the top ``max(ks)`` (or all ``G``).
    ``gallery_mentions`` has one class-name set per gallery caption; ``removed`` and ``present``
    one per query. Caption g is relevant to query q iff ``gallery_mentions[g] ∩ removed[q] = ∅``
    and ``gallery_mentions[g] ∩ present[q] ≠ ∅`` (so a query with nothing present scores 0). AP
    uses the default ``"retrieved"`` normalisation of :mod:`xmr.metrics.average_precision`.
    ODmAP@k is the mean (:func:`odmap_at_k`); its bootstrap resamples these.
    """
    ks = check_ks(ks)
    ranking = as_ranking(scores, max(ks))
    if len(gallery_mentions) != ranking.num_gallery:
        raise ValueError(
            f"{len(gallery_mentions)} gallery mention sets for a gallery of {ranking.num_gallery}"
        )
    if not len(removed) == len(present) == ranking.num_queries:
        raise ValueError(
            f"{len(removed)} removed and {len(present)} present sets for "
            f"{ranking.num_queries} queries"
        )
    relevant = odmap_relevance(ranking.top(max(ks)), gallery_mentions, removed, present)
    return {k: average_precision_at_k(relevant[:, :k]) for k in ks}


def odmap_at_k(
    scores: np.ndarray | torch.Tensor | Ranking,
    gallery_mentions: Sequence[AbstractSet[str]],
    removed: Sequence[AbstractSet[str]],
    present: Sequence[AbstractSet[str]],
    ks: Iterable[int] = (1, 5, 10),
) -> dict[int, float]:
    """ODmAP@k for each k in ``ks``: ``{k: mAP@k in [0, 1]}``, the mean of
    :func:`odmap_per_query` (same arguments)."""
    per_query = odmap_per_query(scores, gallery_mentions, removed, present, ks)
    return {k: float(ap.mean()) for k, ap in per_query.items()}
