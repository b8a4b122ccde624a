"""Exact top-k retrieval by dot product, chunked so a ``[Q, G]`` score matrix never exists.

Scores are computed one ``[query_chunk, gallery_chunk]`` block at a time. Each block's top-k is
made exact under the tie rule of :func:`xmr.metrics.rank` (equal scores: lower gallery index
first), then merged into a running ``[Q, K]`` best by a two-key sort (index, then score
descending, stable), so ties that straddle chunk boundaries resolve the same way as in a dense
ranking.
"""

from __future__ import annotations

import numpy as np
import torch
from tqdm import tqdm

from xmr.metrics.ranking import Ranking


def topk_similarity(
    queries: np.ndarray | torch.Tensor,
    gallery: np.ndarray | torch.Tensor,
    k: int,
    *,
    query_chunk: int = 1024,
    gallery_chunk: int = 8192,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> Ranking:
    """The top ``K = min(k, G)`` gallery items per query by dot-product similarity.

    ``queries`` is ``[Q, D]``, ``gallery`` ``[G, D]`` (numpy or torch, any float dtype, finite;
    normalise them first for cosine similarity). Scores are computed in float32 on ``device``
    (default: the device of ``queries`` if it is a tensor, else the CPU); gallery chunks move
    there one at a time. Returns a :class:`Ranking` whose ``indices`` are those of
    ``rank(queries @ gallery.T, k)`` for the same float32 scores, ties included, and whose
    ``scores`` are the float32 similarities ``[Q, K]``.

    Memory beyond the inputs: one float32 score block of ``query_chunk × gallery_chunk`` (and, for
    rows with a tie at the k-th place, masks of those rows), the queries in float32 on
    ``device``, and the ``[Q, K]`` result. The default 32 MiB blocks were as fast as any chunking
    measured on a 2-core CPU (time flat for gallery chunks 4096–16384 at 1024 queries; larger or
    smaller blocks slower, see ``bench/RESULTS.md``); on a GPU larger blocks may pay off.
    """
    if k < 1 or query_chunk < 1 or gallery_chunk < 1:
        raise ValueError(
            f"k, query_chunk and gallery_chunk must be >= 1, got {k}, {query_chunk}, "
            f"{gallery_chunk}"
        )
    if device is None:
        device = queries.device if isinstance(queries, torch.Tensor) else "cpu"
    q = torch.as_tensor(queries).to(device, torch.float32)
    if q.ndim != 2 or len(gallery.shape) != 2 or q.shape[1] != gallery.shape[1]:
        raise ValueError(
            f"expected queries [Q, D] and gallery [G, D], got {list(q.shape)} and "
            f"{list(gallery.shape)}"
        )
    num_gallery = gallery.shape[0]
    if num_gallery == 0:
        raise ValueError("the gallery is empty")
    if not torch.isfinite(q).all():
        raise ValueError("queries contain NaN or infinity")
    top = min(k, num_gallery)
    # Sentinels: score -inf and index G, so any real item beats them (ties -> lower index).
    best_scores = torch.full((len(q), top), -torch.inf, device=q.device)
    best_indices = torch.full((len(q), top), num_gallery, dtype=torch.int64, device=q.device)
    starts = range(0, num_gallery, gallery_chunk)
    with torch.inference_mode():
        for start in tqdm(starts, desc="top-k", unit="chunk", disable=not progress):
            chunk = torch.as_tensor(gallery[start : start + gallery_chunk])
            chunk = chunk.to(q.device, torch.float32)
            if not torch.isfinite(chunk).all():
                raise ValueError(f"gallery rows {start}..{start + len(chunk) - 1} are not finite")
            for row in range(0, len(q), query_chunk):
                rows = slice(row, row + query_chunk)
                scores, cols = _block_topk(q[rows] @ chunk.T, min(top, len(chunk)))
                best_scores[rows], best_indices[rows] = _merge(
                    best_scores[rows], best_indices[rows], scores, cols + start, top
                )
    return Ranking(best_indices.cpu().numpy(), num_gallery, best_scores.cpu().numpy())


def _block_topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact top-``k`` set of each row of ``scores`` [B, C]: (scores, columns), each [B, k].

    ``torch.topk`` keeps arbitrary copies of a value tied at the k-th place. Taking the top
    ``k + 1`` shows which rows have such a tie (the (k+1)-th value equals the k-th); only those
    are redone: everything above the k-th value, then its lowest-column copies. The order within
    a row is unspecified (:func:`_merge` sorts).
    """
    values, cols = torch.topk(scores, min(k + 1, scores.shape[1]), dim=1)
    if values.shape[1] == k:  # the block has only k columns: all of them
        return values, cols
    redo = (values[:, k] == values[:, k - 1]).nonzero().squeeze(1)
    values, cols = values[:, :k], cols[:, :k]
    if len(redo):
        block, kth = scores[redo], values[redo, k - 1 :]
        above, at = block > kth, block == kth
        need = k - above.sum(dim=1, keepdim=True)
        take = above | (at & (at.cumsum(dim=1) <= need))
        cols[redo] = take.nonzero()[:, 1].view(len(redo), k)
        values[redo] = block.gather(1, cols[redo])
    return values, cols


def _merge(
    scores_a: torch.Tensor,
    indices_a: torch.Tensor,
    scores_b: torch.Tensor,
    indices_b: torch.Tensor,
    k: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The best ``k`` of two candidate sets per row ([B, *] each), sorted: score desc, index asc."""
    indices, order = torch.sort(torch.cat([indices_a, indices_b], dim=1), dim=1, stable=True)
    scores = torch.cat([scores_a, scores_b], dim=1).gather(1, order)
    scores, order = torch.sort(scores, dim=1, descending=True, stable=True)
    return scores[:, :k], indices.gather(1, order)[:, :k]
