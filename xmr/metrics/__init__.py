"""Retrieval and bias metrics over dense scores ``[Q, G]`` or a precomputed :class:`Ranking`.

Ranking everywhere: higher score first, equal scores by the lower gallery index.
"""

from xmr.metrics.average_precision import map_at_k
from xmr.metrics.gender_bias import bias_at_k, similarity_bias
from xmr.metrics.odmap import odmap_at_k, odmap_relevance
from xmr.metrics.ranking import Ranking, rank
from xmr.metrics.recall import recall_at_k

__all__ = [
    "Ranking",
    "bias_at_k",
    "map_at_k",
    "odmap_at_k",
    "odmap_relevance",
    "rank",
    "recall_at_k",
    "similarity_bias",
]
