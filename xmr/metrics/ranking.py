"""The ranking every metric reads: top-K gallery indices per query, higher score first.

Tie rule (everywhere in :mod:`xmr`): among equal scores the LOWER gallery index ranks first, so a
ranking is a pure function of the score values. :func:`rank` ranks a dense score matrix;
:func:`xmr.retrieval.topk_similarity` builds the same :class:`Ranking` from embeddings without
ever holding a dense ``[Q, G]`` matrix.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

from xmr.metrics.arrays import as_numpy

# Row blocks of :func:`rank` hold about this many scores, bounding its temporaries (~8 B each).
_BLOCK_ELEMENTS = 1 << 22


@dataclass(frozen=True, eq=False)
class Ranking:
    """The top-K gallery items of each query, best first.

    ``indices`` is int64 ``[Q, K]``: gallery indices per query in rank order, ties broken by the
    lower gallery index. ``num_gallery`` is the gallery size ``G`` (``K <= G``; ``K == G`` means
    the ranking is complete). ``scores``, when present, is float32 ``[Q, K]``: the score of each
    ranked item (non-increasing along a row). Equality is identity (arrays do not compare as
    one truth value).
    """

    indices: np.ndarray
    num_gallery: int
    scores: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.indices.ndim != 2 or self.indices.dtype != np.int64:
            raise ValueError(
                f"Ranking.indices must be int64 [Q, K], got {self.indices.dtype} "
                f"{list(self.indices.shape)}"
            )
        if self.indices.shape[1] > self.num_gallery:
            raise ValueError(
                f"Ranking has K={self.indices.shape[1]} > num_gallery={self.num_gallery}"
            )
        if self.scores is not None and self.scores.shape != self.indices.shape:
            raise ValueError(
                f"Ranking.scores {list(self.scores.shape)} must match indices "
                f"{list(self.indices.shape)}"
            )

    @property
    def num_queries(self) -> int:
        return self.indices.shape[0]

    @property
    def k(self) -> int:
        """K, the number of ranked items per query."""
        return self.indices.shape[1]

    def top(self, k: int) -> np.ndarray:
        """Indices int64 ``[Q, min(k, G)]`` of the top-``k`` items per query.

        Raises ``ValueError`` when ``k`` exceeds the ranked ``K`` of an incomplete ranking.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if k > self.k and self.k < self.num_gallery:
            raise ValueError(
                f"need the top {k} but the ranking holds only the top {self.k} of "
                f"{self.num_gallery} gallery items; rank with k >= {k}"
            )
        return self.indices[:, :k]


def rank(scores: np.ndarray | torch.Tensor, k: int) -> Ranking:
    """Rank a dense score matrix: the top ``K = min(k, G)`` gallery items per query.

    ``scores`` is ``[Q, G]`` (numpy or torch, any float dtype); higher is better and equal scores
    rank by the lower gallery index. Works in row blocks, so its temporaries stay near
    ``_BLOCK_ELEMENTS`` scores whatever ``Q``. Returns a :class:`Ranking` with float32 scores.
    """
    s = as_numpy(scores)
    if s.ndim != 2 or s.shape[1] == 0:
        raise ValueError(f"scores must be [Q, G] with G >= 1, got {list(s.shape)}")
    if not np.issubdtype(s.dtype, np.floating):
        s = s.astype(np.float64)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    num_queries, num_gallery = s.shape
    top = min(k, num_gallery)
    indices = np.empty((num_queries, top), dtype=np.int64)
    values = np.empty((num_queries, top), dtype=s.dtype)
    block = max(1, _BLOCK_ELEMENTS // num_gallery)
    for start in range(0, num_queries, block):
        rows = s[start : start + block]
        if np.isnan(rows).any():
            raise ValueError("scores contain NaN, which has no rank")
        cols = _top_set(rows, top)
        vals = np.take_along_axis(rows, cols, axis=1)
        # ``cols`` ascends within a row, so a stable sort by -score breaks ties by lower index.
        order = np.argsort(-vals, axis=1, kind="stable")
        indices[start : start + block] = np.take_along_axis(cols, order, axis=1)
        values[start : start + block] = np.take_along_axis(vals, order, axis=1)
    return Ranking(indices, num_gallery, values.astype(np.float32))


def _top_set(rows: np.ndarray, top: int) -> np.ndarray:
    """The ``top`` best column indices of each row of ``rows`` [B, G], ascending, int64 [B, top].

    Everything above the ``top``-th largest value, then the lowest-index columns equal to it.
    """
    num_rows, num_cols = rows.shape
    if top == num_cols:
        return np.broadcast_to(np.arange(num_cols, dtype=np.int64), (num_rows, num_cols))
    kth = np.partition(rows, num_cols - top, axis=1)[:, num_cols - top, None]
    above = rows > kth
    at = rows == kth
    need = top - above.sum(axis=1, keepdims=True)
    take = above | (at & (np.cumsum(at, axis=1) <= need))
    return np.nonzero(take)[1].reshape(num_rows, top)


def check_ks(ks: Iterable[int]) -> tuple[int, ...]:
    """``ks`` as a tuple; ``ValueError`` unless it is non-empty and every k is >= 1."""
    ks = tuple(int(k) for k in ks)
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be a non-empty sequence of integers >= 1, got {ks}")
    return ks


def as_ranking(scores: np.ndarray | torch.Tensor | Ranking, k: int) -> Ranking:
    """``scores`` itself if it is a :class:`Ranking`, else ``rank(scores, k)``.

    Raises ``ValueError`` when there are no queries: a mean over no queries is undefined.
    """
    ranking = scores if isinstance(scores, Ranking) else rank(scores, k)
    if ranking.num_queries == 0:
        raise ValueError("no queries to evaluate")
    return ranking
