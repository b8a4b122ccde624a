"""An evaluation's intervals: each metric's percentile bootstrap interval over the queries it
averages (:func:`xmr.compare.bootstrap.mean_intervals` of its per-query values), and their
names as MLflow metrics.
"""

from __future__ import annotations

from collections.abc import Mapping

from xmr.compare.bootstrap import Interval, mean_intervals
from xmr.compare.per_query import QueryValues


def intervals_of(
    sets: Mapping[str, QueryValues], *, resamples: int, confidence: float, seed: int
) -> dict[str, Interval]:
    """Each metric's bootstrap interval, a set's metrics resampled together (within its strata,
    if it has any); none for a set without queries or when ``resamples`` is 0."""
    intervals: dict[str, Interval] = {}
    if not resamples:
        return intervals
    for values in sets.values():
        if values.keys and values.values:
            intervals.update(
                mean_intervals(
                    values.values,
                    strata=values.strata,
                    resamples=resamples,
                    confidence=confidence,
                    seed=seed,
                )
            )
    return intervals


def interval_metrics(intervals: Mapping[str, Interval]) -> dict[str, float]:
    """The intervals as MLflow metrics: ``{name}_ci_low`` and ``{name}_ci_high``."""
    return {
        f"{name}_ci_{end}": value
        for name, interval in intervals.items()
        for end, value in (("low", interval.low), ("high", interval.high))
    }
