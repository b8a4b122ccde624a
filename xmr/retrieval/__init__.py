"""Retrieval over large galleries: exact chunked top-k by dot product; top-k re-ranking."""

from xmr.retrieval.rerank import rerank
from xmr.retrieval.topk import topk_similarity

__all__ = ["rerank", "topk_similarity"]
