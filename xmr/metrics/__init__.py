"""Retrieval and bias metrics over dense scores ``[Q, G]`` or a precomputed :class:`Ranking`.

Ranking everywhere: higher score first, equal scores by the lower gallery index.

The names below are imported from their modules on first use (PEP 562), so that light callers
(``xmr compare``, reading a sweep space) can ask a metric's direction (:mod:`.direction`) without
loading torch, which the metric functions need.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xmr.metrics.average_precision import map_at_k
    from xmr.metrics.direction import (
        Aggregation,
        Direction,
        UnknownMetricError,
        find_direction,
        metric_aggregation,
        metric_direction,
    )
    from xmr.metrics.gender_bias import (
        TopKGenders,
        bias_at_k,
        bias_deltas,
        gendered_share_at_k,
        male_share_at_k,
        similarity_bias,
        top_k_genders,
    )
    from xmr.metrics.medr import first_positive_ranks, median_rank
    from xmr.metrics.odmap import odmap_at_k, odmap_per_query, odmap_relevance
    from xmr.metrics.power import (
        TRAINED_DELTA_SD,
        delta_sd,
        detectable_effect,
        queries_for_power,
    )
    from xmr.metrics.ranking import Ranking, rank
    from xmr.metrics.recall import recall_at_k, recall_hits, summed_recall
    from xmr.metrics.weighting import weight_metric, weighted_mean

_MODULE_OF = {  # exported name -> its module
    "TRAINED_DELTA_SD": "power",
    "Aggregation": "direction",
    "Direction": "direction",
    "Ranking": "ranking",
    "TopKGenders": "gender_bias",
    "UnknownMetricError": "direction",
    "bias_at_k": "gender_bias",
    "bias_deltas": "gender_bias",
    "delta_sd": "power",
    "detectable_effect": "power",
    "find_direction": "direction",
    "first_positive_ranks": "medr",
    "gendered_share_at_k": "gender_bias",
    "male_share_at_k": "gender_bias",
    "map_at_k": "average_precision",
    "median_rank": "medr",
    "metric_aggregation": "direction",
    "metric_direction": "direction",
    "odmap_at_k": "odmap",
    "odmap_per_query": "odmap",
    "odmap_relevance": "odmap",
    "queries_for_power": "power",
    "rank": "ranking",
    "recall_at_k": "recall",
    "recall_hits": "recall",
    "similarity_bias": "gender_bias",
    "summed_recall": "recall",
    "top_k_genders": "gender_bias",
    "weight_metric": "weighting",
    "weighted_mean": "weighting",
}

__all__ = [
    "TRAINED_DELTA_SD",
    "Aggregation",
    "Direction",
    "Ranking",
    "TopKGenders",
    "UnknownMetricError",
    "bias_at_k",
    "bias_deltas",
    "delta_sd",
    "detectable_effect",
    "find_direction",
    "first_positive_ranks",
    "gendered_share_at_k",
    "male_share_at_k",
    "map_at_k",
    "median_rank",
    "metric_aggregation",
    "metric_direction",
    "odmap_at_k",
    "odmap_per_query",
    "odmap_relevance",
    "queries_for_power",
    "rank",
    "recall_at_k",
    "recall_hits",
    "similarity_bias",
    "summed_recall",
    "top_k_genders",
    "weight_metric",
    "weighted_mean",
]


def __getattr__(name: str) -> Any:
    """``name`` from the module that defines it, imported now."""
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
