"""Chunked top-k retrieval equals the dense ranking exactly, ties across chunks included."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import xmr.retrieval.topk as topk_module
from xmr.metrics import rank, recall_at_k
from xmr.retrieval import topk_similarity

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def reference_top(scores: np.ndarray, k: int) -> np.ndarray:
    """Full sort per row by (score descending, index ascending)."""
    index = np.arange(scores.shape[1])
    return np.stack([np.lexsort((index, -row))[:k] for row in scores])


def test_equals_dense_rank_on_random_embeddings():
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((50, 16)).astype(np.float32)
    gallery = rng.standard_normal((1000, 16)).astype(np.float32)
    dense = rank(torch.from_numpy(queries) @ torch.from_numpy(gallery).T, 10)
    ranking = topk_similarity(queries, gallery, 10, query_chunk=7, gallery_chunk=64)
    np.testing.assert_array_equal(ranking.indices, dense.indices)
    np.testing.assert_allclose(ranking.scores, dense.scores, rtol=1e-6)
    assert ranking.scores.dtype == np.float32
    assert ranking.num_gallery == 1000


@pytest.mark.parametrize("k", [1, 5, 10, 60, 100])
def test_equals_dense_rank_with_exact_ties_split_across_chunks(k):
    rng = np.random.default_rng(k)
    queries = rng.integers(-1, 2, (20, 3)).astype(np.float32)
    gallery = rng.integers(-1, 2, (60, 3)).astype(np.float32)  # 27 distinct rows: many ties
    scores = queries @ gallery.T  # small integers: exact in any summation order
    ranking = topk_similarity(queries, gallery, k, query_chunk=3, gallery_chunk=7)
    np.testing.assert_array_equal(ranking.indices, rank(scores, k).indices)
    np.testing.assert_array_equal(ranking.indices, reference_top(scores, k))
    np.testing.assert_array_equal(ranking.scores, np.take_along_axis(scores, ranking.indices, 1))


def test_tie_group_straddling_a_chunk_boundary():
    gallery = np.zeros((20, 1), dtype=np.float32)
    gallery[5:13] = 1.0  # the best items 5..12 span chunks [0, 7) and [7, 14)
    gallery[15] = 0.5
    ranking = topk_similarity(np.ones((1, 1)), gallery, 10, gallery_chunk=7)
    np.testing.assert_array_equal(ranking.indices, [[5, 6, 7, 8, 9, 10, 11, 12, 15, 0]])
    np.testing.assert_array_equal(ranking.scores, np.float32([[1] * 8 + [0.5, 0]]))


def test_k_larger_than_gallery_and_input_kinds():
    rng = np.random.default_rng(2)
    queries = rng.integers(-2, 3, (4, 5)).astype(np.float64)
    gallery = rng.integers(-2, 3, (9, 5)).astype(np.float64)
    expected = reference_top(queries @ gallery.T, 9)
    for q, g in [
        (queries, gallery),
        (torch.from_numpy(queries), torch.from_numpy(gallery)),
        (torch.from_numpy(queries).half(), gallery.astype(np.float16)),
    ]:
        ranking = topk_similarity(q, g, 50, gallery_chunk=4, progress=True)
        assert ranking.k == ranking.num_gallery == 9
        np.testing.assert_array_equal(ranking.indices, expected)


def test_degenerate_shapes():
    empty_dim = topk_similarity(np.ones((3, 0)), np.ones((5, 0)), 2)  # all scores 0: ties
    np.testing.assert_array_equal(empty_dim.indices, [[0, 1]] * 3)
    assert topk_similarity(np.ones((0, 4)), np.ones((5, 4)), 2).indices.shape == (0, 2)
    one = topk_similarity(np.ones((1, 4)), np.arange(20.0).reshape(5, 4), 9, query_chunk=1)
    np.testing.assert_array_equal(one.indices, [[4, 3, 2, 1, 0]])


def test_ranking_feeds_metrics():
    rng = np.random.default_rng(3)
    images = rng.standard_normal((30, 8)).astype(np.float32)
    captions = images.repeat(2, axis=0) + 0.5 * rng.standard_normal((60, 8)).astype(np.float32)
    positives = [{2 * i, 2 * i + 1} for i in range(30)]
    dense = recall_at_k(torch.from_numpy(images) @ torch.from_numpy(captions).T, positives)
    chunked = recall_at_k(topk_similarity(images, captions, 10, gallery_chunk=16), positives)
    assert chunked == dense


def test_validates_inputs():
    with pytest.raises(ValueError, match=r"\[Q, D\] and gallery \[G, D\]"):
        topk_similarity(np.ones((2, 3)), np.ones((4, 2)), 1)
    with pytest.raises(ValueError, match="empty"):
        topk_similarity(np.ones((2, 3)), np.ones((0, 3)), 1)
    with pytest.raises(ValueError, match=">= 1"):
        topk_similarity(np.ones((2, 3)), np.ones((4, 3)), 1, gallery_chunk=0)
    with pytest.raises(ValueError, match="queries contain NaN"):
        topk_similarity(np.full((2, 3), np.nan), np.ones((4, 3)), 1)
    with pytest.raises(ValueError, match=r"gallery rows 2\.\.3"):
        gallery = np.ones((4, 3))
        gallery[3, 1] = np.inf
        topk_similarity(np.ones((2, 3)), gallery, 1, gallery_chunk=2)
    with pytest.raises(ValueError, match=r"gallery rows 4\.\.5"):
        gallery = np.ones((6, 3))
        gallery[5, 0] = np.nan
        topk_similarity(np.ones((2, 3)), gallery, 1, gallery_chunk=4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu_on_ties():
    rng = np.random.default_rng(4)
    queries = rng.integers(-1, 2, (33, 4)).astype(np.float32)
    gallery = rng.integers(-1, 2, (500, 4)).astype(np.float32)
    cpu = topk_similarity(queries, gallery, 10, query_chunk=8, gallery_chunk=37)
    cuda = topk_similarity(queries, gallery, 10, query_chunk=8, gallery_chunk=37, device="cuda")
    np.testing.assert_array_equal(cuda.indices, cpu.indices)


@pytest.fixture(params=[(256, 64), (4, 64), (4, 2), (1, 0)], ids=lambda p: f"group{p[0]}-max{p[1]}")
def selection(request, monkeypatch):
    """The candidate selection's group width and per-row limit: the defaults, small groups (the
    group path on small blocks), a limit of 2 (rows often take the exact path) and 0 (always)."""
    group, most = request.param
    monkeypatch.setattr(topk_module, "_GROUP", group)
    monkeypatch.setattr(topk_module, "_MAX_CANDIDATES", most)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("k", "query_chunk", "gallery_chunk"),
    [(1, 5, 8), (3, 64, 1), (5, 1, 16), (10, 7, 24), (10, 64, 256), (40, 9, 16), (300, 64, 64)],
)
def test_many_exact_ties_equal_dense_rank(selection, device, k, query_chunk, gallery_chunk):
    """Small-integer embeddings (scores exact in any summation order) with few distinct values:
    ties at the K-th place, across chunk boundaries, k above the chunk and k >= G."""
    rng = np.random.default_rng(k + query_chunk + gallery_chunk)
    queries = rng.integers(-2, 3, (64, 4)).astype(np.float32)
    gallery = rng.integers(-2, 3, (300, 4)).astype(np.float32)
    scores = queries @ gallery.T
    ranking = topk_similarity(
        queries, gallery, k, query_chunk=query_chunk, gallery_chunk=gallery_chunk, device=device
    )
    np.testing.assert_array_equal(ranking.indices, rank(scores, k).indices)
    np.testing.assert_array_equal(ranking.indices, reference_top(scores, k))
    np.testing.assert_array_equal(ranking.scores, np.take_along_axis(scores, ranking.indices, 1))


@pytest.mark.parametrize("device", DEVICES)
def test_duplicate_float_rows_tie_by_index(selection, device):
    """Duplicate captions: identical float rows scattered over the gallery score exactly alike,
    so they tie and rank by index, also where a copy enters a full row at its threshold."""
    rng = np.random.default_rng(5)
    distinct = rng.standard_normal((40, 32)).astype(np.float32)
    distinct /= np.linalg.norm(distinct, axis=1, keepdims=True)
    which = rng.integers(0, 40, 2000)
    gallery = distinct[which]  # ~50 copies of each row
    queries = rng.standard_normal((70, 32)).astype(np.float32)
    dense = rank(torch.from_numpy(queries) @ torch.from_numpy(gallery).T, 60)
    ranking = topk_similarity(
        queries, gallery, 60, query_chunk=16, gallery_chunk=512, device=device
    )
    np.testing.assert_array_equal(ranking.indices, dense.indices)
    np.testing.assert_allclose(ranking.scores, dense.scores, rtol=1e-5, atol=1e-6)
    first_copy = np.array([np.flatnonzero(which == d)[0] for d in range(40)])
    best = ranking.indices[:, 0]  # the first copy of the best distinct row
    np.testing.assert_array_equal(best, first_copy[which[best]])


@pytest.mark.parametrize("device", DEVICES)
def test_gallery_sorted_by_similarity(device):
    """Every block beats the running best (the worst case for the candidate selection)."""
    rng = np.random.default_rng(6)
    queries = np.abs(rng.standard_normal((20, 8))).astype(np.float32)
    gallery = np.repeat(np.linspace(0, 1, 1024, dtype=np.float32)[:, None], 8, axis=1)
    gallery += 0.01 * rng.random((1024, 8), dtype=np.float32)
    scores = torch.from_numpy(queries) @ torch.from_numpy(gallery).T
    ranking = topk_similarity(queries, gallery, 100, gallery_chunk=256, device=device)
    np.testing.assert_array_equal(ranking.indices, rank(scores, 100).indices)


def test_onednn_and_torch_mm_agree(monkeypatch):
    """The CPU product (oneDNN where torch has it) and the torch.mm fallback rank alike."""
    rng = np.random.default_rng(7)
    queries = rng.integers(-3, 4, (50, 6)).astype(np.float32)
    gallery = rng.integers(-3, 4, (1000, 6)).astype(np.float32)
    expected = reference_top(queries @ gallery.T, 20)
    fast = topk_similarity(queries, gallery, 20, query_chunk=16, gallery_chunk=256)
    monkeypatch.setattr(topk_module, "_onednn_usable", lambda: False)
    fallback = topk_similarity(queries, gallery, 20, query_chunk=16, gallery_chunk=256)
    np.testing.assert_array_equal(fast.indices, expected)
    np.testing.assert_array_equal(fallback.indices, expected)
    np.testing.assert_array_equal(fast.scores, fallback.scores)
