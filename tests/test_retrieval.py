"""Chunked top-k retrieval equals the dense ranking exactly, ties across chunks included."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xmr.metrics import rank, recall_at_k
from xmr.retrieval import topk_similarity


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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu_on_ties():
    rng = np.random.default_rng(4)
    queries = rng.integers(-1, 2, (33, 4)).astype(np.float32)
    gallery = rng.integers(-1, 2, (500, 4)).astype(np.float32)
    cpu = topk_similarity(queries, gallery, 10, query_chunk=8, gallery_chunk=37)
    cuda = topk_similarity(queries, gallery, 10, query_chunk=8, gallery_chunk=37, device="cuda")
    np.testing.assert_array_equal(cuda.indices, cpu.indices)
