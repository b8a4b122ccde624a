"""Precision@K: the share of a query's top K gallery items that are correct."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

import numpy as np
import torch

from xmr.metrics.ranking import Ranking, as_ranking, check_ks


def precision_hits(
    scores: np.ndarray | torch.Tensor | Ranking,
    positives: Sequence[Collection[int]],
    ks: Iterable[int] = (1, 5, 10),
) -> dict[int, np.ndarray]:
    """Per query, the share of its top K that are in ``positives[q]``: ``{K: float [Q]}``.
    ``scores``: ``[Q, G]`` (higher first) or a :class:`Ranking` of at least ``max(ks)``."""
    ks = check_ks(ks)
    top = as_ranking(scores, max(ks)).top(max(ks))  # [Q, min(max(ks), G)]
    hit = np.array(
        [[g in pos for g in row] for row, pos in zip(top.tolist(), positives, strict=True)],
        dtype=np.float64,
    ).reshape(top.shape)
    return {k: hit[:, :k].sum(axis=1) / k for k in ks}
