"""Retrieval over large galleries: exact chunked top-k by dot product; each query's rank of its
first positive over the whole gallery, chunked; top-k re-ranking."""

from xmr.retrieval.positive_ranks import positive_ranks
from xmr.retrieval.rerank import rerank
from xmr.retrieval.topk import topk_similarity

__all__ = ["positive_ranks", "rerank", "topk_similarity"]
