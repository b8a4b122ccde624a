"""Each query's rank of its first positive over the whole gallery, chunked so that memory is
``O(query_chunk × G)`` rather than a complete ``[Q, G]`` ranking (MedR's ranks,
:mod:`xmr.metrics.medr`).

A query's rank is ``1 +`` the number of gallery items ranked above its best positive ``p``: the
items scoring more than ``p``, and those scoring the same with a lower index (the tie rule of
:func:`xmr.metrics.rank`). ``p`` is the positive with the highest score, the lowest index among
equal ones. So no ranking is sorted: one block of scores ``[query_chunk, G]`` at a time, a
gather of the positives' scores and two counts per row.

Scores are the float32 products of :func:`xmr.retrieval.topk_similarity` (the same kernel:
oneDNN on the CPU, ``torch.mm`` elsewhere), so a rank within the top K agrees with that
ranking's, up to the last-bit caveat it states.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import torch

from xmr.retrieval.topk import _finite, _matmul

# Scores per block by default: 16 MiB of float32 on the CPU, 1 GiB elsewhere.
_CPU_BLOCK = 1 << 22
_GPU_BLOCK = 1 << 28


def positive_ranks(
    queries: np.ndarray | torch.Tensor,
    gallery: np.ndarray | torch.Tensor,
    positives: Sequence[Collection[int]],
    *,
    query_chunk: int | None = None,
    device: str | torch.device | None = None,
) -> np.ndarray:
    """Per query, the 1-based rank of its best-ranked positive by dot-product similarity.

    Args:
        queries: ``[Q, D]`` embeddings (numpy or torch, any float dtype, finite; normalise them
            first for cosine similarity).
        gallery: ``[G, D]`` embeddings, likewise.
        positives: ``positives[q]``, the correct gallery indices of query q (each in
            ``[0, G)``). A query without any ranks ``G + 1``, below every item.
        query_chunk: queries scored at once; default: as many as make a block of 2^22 scores
            on the CPU, 2^28 on a GPU (at least one).
        device: where scores are computed, in float32 (default: the device of ``queries`` if
            it is a tensor, else the CPU).

    Returns:
        int64 ``[Q]`` in ``[1, G + 1]``: what :func:`xmr.metrics.medr.first_positive_ranks`
        gives on the complete ranking of the same float32 scores, ties included.

    Memory beyond the inputs: both in float32 on ``device``, one ``[query_chunk, G]`` float32
    score block and two boolean ones of its shape.
    """
    if device is None:
        device = queries.device if isinstance(queries, torch.Tensor) else "cpu"
    q = torch.as_tensor(queries).to(device, torch.float32).contiguous()
    g = torch.as_tensor(gallery).to(q.device, torch.float32).contiguous()
    if q.ndim != 2 or g.ndim != 2 or q.shape[1] != g.shape[1]:
        raise ValueError(
            f"expected queries [Q, D] and gallery [G, D], got {list(q.shape)} and {list(g.shape)}"
        )
    num_queries, num_gallery = len(q), len(g)
    if num_gallery == 0:
        raise ValueError("the gallery is empty")
    if len(positives) != num_queries:
        raise ValueError(f"{len(positives)} positive sets for {num_queries} queries")
    if not (_finite(q) and _finite(g)):
        raise ValueError("queries or gallery contain NaN or infinity")
    if query_chunk is None:
        block = _CPU_BLOCK if q.device.type == "cpu" else _GPU_BLOCK
        query_chunk = max(1, block // num_gallery)
    if query_chunk < 1:
        raise ValueError(f"query_chunk must be >= 1, got {query_chunk}")
    rows = np.repeat(np.arange(num_queries), [len(p) for p in positives])  # ascending
    cols = np.fromiter((p for pos in positives for p in pos), dtype=np.int64, count=len(rows))
    if len(cols) and (cols.min() < 0 or cols.max() >= num_gallery):
        raise ValueError(f"positives must be gallery indices in [0, {num_gallery})")
    ranks = np.empty(num_queries, dtype=np.int64)
    index = torch.arange(num_gallery, device=q.device)
    with torch.inference_mode():
        for start in range(0, num_queries, query_chunk):
            scores = _matmul(q[start : start + query_chunk], g)  # [B, G]
            lo, hi = np.searchsorted(rows, [start, start + len(scores)])
            pair_rows = torch.as_tensor(rows[lo:hi] - start, device=q.device)
            pair_cols = torch.as_tensor(cols[lo:hi], device=q.device)
            pair_scores = scores[pair_rows, pair_cols]
            # Each row's best positive: its highest score, then its lowest index. A row without
            # positives keeps (-inf, G): every item ranks above it, so its rank is G + 1.
            best = torch.full((len(scores),), -torch.inf, device=q.device)
            best = best.scatter_reduce(0, pair_rows, pair_scores, "amax")
            at_best = pair_scores == best[pair_rows]
            first = torch.full((len(scores),), num_gallery, dtype=torch.int64, device=q.device)
            first = first.scatter_reduce(0, pair_rows[at_best], pair_cols[at_best], "amin")
            above = (scores > best[:, None]).sum(dim=1)
            tied_before = ((scores == best[:, None]) & (index < first[:, None])).sum(dim=1)
            ranks[start : start + len(scores)] = (above + tied_before + 1).cpu().numpy()
    return ranks
