"""Exact top-k retrieval by dot product, chunked so a ``[Q, G]`` score matrix never exists.

Scores are computed one ``[query_chunk, gallery_chunk]`` block at a time, gallery chunks in
index order, and merged into a running best ``[Q, K]`` (score descending, index ascending: the
tie rule of :func:`xmr.metrics.rank`, lower gallery index first among equal scores).

Most of the time is the matrix product, so the rest is kept to about one pass over each block:

- Once a row holds ``K`` items, all of them have lower gallery indices than the block, so an
  item of the block can enter only with a score strictly above the row's ``K``-th (an equal
  score loses the tie). The block's maxima over groups of 256 columns (one read pass) show where
  such items can be; only those groups are gathered and compared, and the few items above the
  threshold are merged by one stable sort per row (current items first, candidates in column
  order, so ties stay in index order). On random embeddings a row meets about
  ``K * gallery_chunk / start`` candidates in the block starting at ``start``.
- Rows that do not hold ``K`` items yet (the first block, or ``k > gallery_chunk``) and rows with
  many candidates (e.g. a gallery sorted by similarity) take the block's exact top-k instead
  (:func:`_block_topk`, ``torch.topk`` with ties at the ``K``-th place redone by index), merged
  by a two-key sort.

The product itself, on the CPU, is oneDNN's (``torch.ops.mkldnn._linear_pointwise``, the
inner-product primitive torch's compiler uses; plain float32, no reduced precision) rather than
``torch.mm``, which calls MKL. On the 2-core AMD EPYC of ``bench/RESULTS.md`` oneDNN's AVX-512
kernels ran at ~510 GFLOP/s, MKL's at ~220 and numpy's OpenBLAS at ~235: the kernel, more than
the selection, makes this ~0.55x the time of ``faiss.IndexFlatIP.search`` there (with
``torch.mm`` it is ~1.2x). FAISS was weighed as the CPU backend and not taken: its search is
bound by the same AVX2-class BLAS (~220 GFLOP/s) and keeps arbitrary copies of tied items, so
it would be slower and still need the tie rule restored; it is the benchmark's anchor. Where
oneDNN is unavailable or disabled (``torch.backends.mkldnn.flags(enabled=False)``), and on
GPUs, the product is ``torch.mm``. oneDNN returns a new block per call (no ``out=``), so CPU
blocks are kept at 16 MiB: larger ones are fresh ``mmap`` pages at each allocation, and the page
faults cost 20-30 %. On an H100 the selection took 0.09 s against 0.12 s for a ``torch.topk``
per block (5000 x 600,000 x 512, k=10, 1 GiB blocks; the products alone 0.06 s); with small
blocks its few host synchronisations per block cost more than they save.
"""

from __future__ import annotations

import numpy as np
import torch
from tqdm import tqdm

from xmr.metrics.ranking import Ranking

# Columns per group whose maximum is compared with a row's threshold (see the module docstring).
_GROUP = 256
# A row with more candidates than this in one block takes the block's exact top-k instead.
_MAX_CANDIDATES = 64
# Default (query_chunk, gallery_chunk): 16 MiB score blocks on the CPU, 1 GiB elsewhere.
_CPU_CHUNKS = (1024, 4096)
_GPU_CHUNKS = (8192, 32768)


def topk_similarity(
    queries: np.ndarray | torch.Tensor,
    gallery: np.ndarray | torch.Tensor,
    k: int,
    *,
    query_chunk: int | None = None,
    gallery_chunk: int | None = None,
    device: str | torch.device | None = None,
    progress: bool = False,
) -> Ranking:
    """The top ``K = min(k, G)`` gallery items per query by dot-product similarity.

    ``queries`` is ``[Q, D]``, ``gallery`` ``[G, D]`` (numpy or torch, any float dtype, finite;
    normalise them first for cosine similarity). Scores are computed in float32 on ``device``
    (default: the device of ``queries`` if it is a tensor, else the CPU); gallery chunks move
    there one at a time. Returns a :class:`Ranking` whose ``indices`` are those of
    ``rank(queries @ gallery.T, k)`` for the same float32 scores, ties included, and whose
    ``scores`` are the float32 similarities ``[Q, K]``. (Scores from different matrix-product
    kernels can differ in the last bit, so two items within rounding of each other may swap
    against a dense ranking made by another kernel; exact ties, e.g. duplicate rows, stay ties.)

    Memory beyond the inputs: one float32 score block of ``query_chunk × gallery_chunk``, the
    queries in float32 on ``device``, the current gallery chunk there (if it had to be moved or
    converted), the ``[Q, K]`` result and per-block temporaries, small unless many rows gain
    many items in one block (then a few blocks' worth at most, e.g. for a gallery sorted by
    similarity). Unset chunk sizes are 1024 × 4096 (a 16 MiB block) on the CPU and 8192 × 32768
    (1 GiB) on a GPU, about the fastest measured on a 2-core CPU and an H100 (``bench/RESULTS.md``;
    pass smaller chunks to spare GPU memory: 2048 × 16384 took about twice the time there).
    """
    if device is None:
        device = queries.device if isinstance(queries, torch.Tensor) else "cpu"
    q = torch.as_tensor(queries).to(device, torch.float32).contiguous()
    default_queries, default_gallery = _default_chunks(q.device)
    query_chunk = default_queries if query_chunk is None else query_chunk
    gallery_chunk = default_gallery if gallery_chunk is None else gallery_chunk
    if k < 1 or query_chunk < 1 or gallery_chunk < 1:
        raise ValueError(
            f"k, query_chunk and gallery_chunk must be >= 1, got {k}, {query_chunk}, "
            f"{gallery_chunk}"
        )
    if q.ndim != 2 or len(gallery.shape) != 2 or q.shape[1] != gallery.shape[1]:
        raise ValueError(
            f"expected queries [Q, D] and gallery [G, D], got {list(q.shape)} and "
            f"{list(gallery.shape)}"
        )
    num_gallery = gallery.shape[0]
    if num_gallery == 0:
        raise ValueError("the gallery is empty")
    if not _finite(q):
        raise ValueError("queries contain NaN or infinity")
    top = min(k, num_gallery)
    # Sentinels: score -inf and index G, so any real item beats them (ties -> lower index).
    best_scores = torch.full((len(q), top), -torch.inf, device=q.device)
    best_indices = torch.full((len(q), top), num_gallery, dtype=torch.int64, device=q.device)
    starts = range(0, num_gallery, gallery_chunk)
    with torch.inference_mode():
        for start in tqdm(starts, desc="top-k", unit="chunk", disable=not progress):
            chunk = torch.as_tensor(gallery[start : start + gallery_chunk])
            chunk = chunk.to(q.device, torch.float32).contiguous()
            if not _finite(chunk):
                raise ValueError(f"gallery rows {start}..{start + len(chunk) - 1} are not finite")
            for row in range(0, len(q), query_chunk):
                rows = slice(row, row + query_chunk)
                _update(
                    best_scores[rows],
                    best_indices[rows],
                    _matmul(q[rows], chunk),
                    start,
                    num_gallery,
                )
    return Ranking(best_indices.cpu().numpy(), num_gallery, best_scores.cpu().numpy())


def _default_chunks(device: str | torch.device) -> tuple[int, int]:
    """The default ``(query_chunk, gallery_chunk)`` on ``device``."""
    return _CPU_CHUNKS if torch.device(device).type == "cpu" else _GPU_CHUNKS


def _finite(x: torch.Tensor) -> bool:
    """Whether every element of ``x`` is finite (one pass: min and max propagate NaN)."""
    return x.numel() == 0 or bool(torch.isfinite(torch.stack(torch.aminmax(x))).all())


def _matmul(queries: torch.Tensor, chunk: torch.Tensor) -> torch.Tensor:
    """``queries @ chunk.T`` in float32 ([B, D] and [C, D], contiguous): oneDNN on the CPU."""
    if queries.device.type == "cpu" and queries.shape[1] > 0 and _onednn_usable():
        return torch.ops.mkldnn._linear_pointwise(queries, chunk, None, "none", [], "")
    return queries @ chunk.T


def _onednn_usable() -> bool:
    """Whether torch has oneDNN's CPU inner product (``mkldnn._linear_pointwise``) enabled."""
    return (
        torch.backends.mkldnn.is_available()
        and torch.backends.mkldnn.enabled
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


def _update(
    best_scores: torch.Tensor,
    best_indices: torch.Tensor,
    scores: torch.Tensor,
    start: int,
    num_gallery: int,
) -> None:
    """Merge block ``scores`` [B, C] (gallery rows ``start..``) into the running best, in place.

    ``best_scores`` / ``best_indices`` [B, K] are sorted (score descending, index ascending) and
    hold only indices below ``start`` (or the sentinel ``num_gallery``).
    """
    num_rows, width = scores.shape
    top = best_scores.shape[1]
    filling = best_indices[:, -1] == num_gallery  # rows that do not hold K items yet
    if bool(filling.all()):
        _merge_exact(best_scores, best_indices, scores, slice(None), start)
        return
    # A full row's items all precede this block: only a score above the K-th can enter.
    threshold = best_scores[:, -1].masked_fill(filling, torch.inf)
    group = _GROUP if width % _GROUP == 0 else width
    groups = scores.view(num_rows * (width // group), group)
    maxima = groups.amax(dim=1).view(num_rows, width // group)
    hit_rows, hit_groups = (maxima > threshold[:, None]).nonzero(as_tuple=True)
    # The groups that reach the threshold, in (row, column) order: [hits, group].
    values = groups.index_select(0, hit_rows * (width // group) + hit_groups)
    hit, lane = (values > threshold[hit_rows, None]).nonzero(as_tuple=True)
    cand_rows, cand_scores = hit_rows[hit], values[hit, lane]
    cand_cols = hit_groups[hit] * group + lane
    counts = torch.bincount(cand_rows, minlength=num_rows)
    heavy = filling | (counts > _MAX_CANDIDATES)
    if bool(heavy.any()):
        _merge_exact(best_scores, best_indices, scores, heavy.nonzero().squeeze(1), start)
        light = ~heavy[cand_rows]
        cand_rows, cand_cols, cand_scores = cand_rows[light], cand_cols[light], cand_scores[light]
        counts = counts.masked_fill(heavy, 0)
    if len(cand_rows) == 0:
        return
    # Pad each row's candidates (in column order) to the longest list: [rows, most].
    rows = counts.nonzero().squeeze(1)
    counts = counts[rows]
    slot = torch.empty(num_rows, dtype=torch.int64, device=scores.device)
    slot[rows] = torch.arange(len(rows), device=scores.device)
    cand_slots = slot[cand_rows]
    first = torch.cumsum(counts, 0) - counts
    place = torch.arange(len(cand_rows), device=scores.device) - first[cand_slots]
    most = int(counts.max())
    padded_scores = torch.full((len(rows), most), -torch.inf, device=scores.device)
    padded_indices = torch.full_like(padded_scores, num_gallery, dtype=torch.int64)
    padded_scores[cand_slots, place] = cand_scores
    padded_indices[cand_slots, place] = cand_cols + start
    # The current items come first and have lower indices than the candidates, which are in
    # index order: one stable sort by score keeps every tie in index order.
    merged, order = torch.sort(
        torch.cat([best_scores[rows], padded_scores], dim=1), dim=1, descending=True, stable=True
    )
    indices = torch.cat([best_indices[rows], padded_indices], dim=1)
    best_scores[rows] = merged[:, :top]
    best_indices[rows] = indices.gather(1, order[:, :top])


def _merge_exact(
    best_scores: torch.Tensor,
    best_indices: torch.Tensor,
    scores: torch.Tensor,
    rows: slice | torch.Tensor,
    start: int,
) -> None:
    """Merge the exact top-k of ``scores[rows]`` into ``best_*[rows]``, in place."""
    top, width = best_scores.shape[1], scores.shape[1]
    values, cols = _block_topk(scores[rows], min(top, width))
    best_scores[rows], best_indices[rows] = _merge(
        best_scores[rows], best_indices[rows], values, cols + start, top
    )


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
