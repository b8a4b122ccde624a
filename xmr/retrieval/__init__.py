"""Retrieval over large galleries: exact chunked top-k by dot product."""

from xmr.retrieval.topk import topk_similarity

__all__ = ["topk_similarity"]
