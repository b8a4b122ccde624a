"""Bootstrap confidence intervals of per-query means (and medians), and of paired differences
between runs.

Nearly every metric in :mod:`xmr.metrics` is a mean over queries of a per-query value (a
Recall@K hit, an ODmAP query's AP@k, a caption's Bias@K Δ_K). Its uncertainty from the finite
query set is estimated by the percentile bootstrap (Efron & Tibshirani 1993, ch. 13): draw
``resamples`` query sets of the same size with replacement, take each metric's mean over each,
and report the ``(1 − confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of those means.
The metrics of one query set are resampled together (one draw of queries serves them all), so
their intervals describe the same hypothetical test sets.

A metric that declares itself a median (:func:`xmr.metrics.direction.metric_aggregation`:
MedR, the median rank) takes the median of each resample instead, over the same drawn queries;
its paired difference is the difference of the two runs' medians over each draw (not the
median of the differences, which is another statistic).

A metric averaged over groups of queries (a benchmark's macro accuracy: the mean over
relations of each relation's accuracy) is resampled *within* each group (stratified bootstrap,
:func:`bootstrap_stratified_means`): each resample draws every group's queries with
replacement from that group, as many as it holds, so each group keeps its size and its weight
in the average. Such a metric is a weighted mean of its groups' means;
:func:`xmr.metrics.grouped.group_weighted_values` turns per-query values into ones whose plain
mean is that weighted mean, so that it too is a mean over queries and everything below applies
to it unchanged. A group of one query always draws that query: stratification takes no variance
from it.

A paired comparison of two models on the same queries resamples the per-query *differences*
(:func:`paired_intervals`): query difficulty is shared by both models and cancels, so the
interval is much narrower than comparing two unpaired intervals. A difference whose interval
excludes 0 is significant at ``1 − confidence`` (two-sided).

A few metrics are weighted means over queries (:mod:`xmr.metrics.weighting`: Bias@K's male
share, weighted by each query's gendered share). Each resample then takes the ratio of the
resampled sums of ``w·x`` and ``w``, and a paired difference is that of the two runs' ratios
over the same drawn queries (the bootstrap of a ratio estimator, Efron & Tibshirani 1993,
§10.3).

Everything is seeded: the same values, seed and resample count give the same interval. The
defaults (:data:`RESAMPLES`, :data:`CONFIDENCE`, :data:`SEED`) are declared here only: every
interval xmr reports (an evaluation's, ``xmr compare``'s, a job's change, a sweep's Pareto
ties) uses them unless a flag says otherwise.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from xmr.metrics.direction import Aggregation, metric_aggregation
from xmr.metrics.weighting import weight_metric, weighted_mean

RESAMPLES = 1000
"""Bootstrap resamples by default. At this count a 95 % interval's endpoints move by about 2 % of
its width between seeds (measured: 1.5–2 % for 500–2,500 queries); 1,000 resamples of 25,000
queries × 10 metrics take 0.2 s on 2 cores, of 600,000 × 3 metrics 4 s."""
CONFIDENCE = 0.95
"""Default coverage of an interval."""
SEED = 0
"""The bootstrap generator's default seed: fixed, so that the same values give the same
interval (the same table, the same ``≈`` marks)."""
_CHUNK_VALUES = 4_000_000  # resample weights held at once: resamples × queries per chunk


@dataclass(frozen=True)
class Interval:
    """A metric's value (its mean, or median, over all queries) and its bootstrap interval."""

    value: float
    low: float
    high: float

    def excludes(self, point: float = 0.0) -> bool:
        """Whether ``point`` lies outside ``[low, high]`` (for a difference: significant)."""
        return not self.low <= point <= self.high

    def to_json(self) -> dict[str, float]:
        return {"value": self.value, "ci_low": self.low, "ci_high": self.high}


def bootstrap_means(values: np.ndarray, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """Means of ``resamples`` bootstrap resamples of the rows of ``values``.

    Args:
        values: ``[Q]`` or ``[Q, M]``: ``M`` per-query values of ``Q`` queries, resampled by
            query (row) together.
        resamples: how many query sets of size ``Q`` to draw with replacement.
        seed: the generator's seed.

    Returns:
        float64 ``[resamples]`` or ``[resamples, M]``: each resample's mean of each column.
    """
    return bootstrap_stratified_means(values, None, resamples, seed)


def bootstrap_stratified_means(
    values: np.ndarray,
    strata: Sequence[Hashable] | np.ndarray | None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> np.ndarray:
    """Means of ``resamples`` stratified bootstrap resamples of the rows of ``values``.

    Each resample draws, within each stratum, as many rows as the stratum holds, uniformly with
    replacement from its own rows; a resample's mean is over all ``Q`` rows drawn. The draws of
    resample ``r`` do not depend on how many resamples are drawn at once, and with one stratum
    (``strata`` None) they are :func:`bootstrap_means`'.

    Args:
        values: ``[Q]`` or ``[Q, M]``: ``M`` per-query values of ``Q`` queries, resampled by
            query (row) together.
        strata: ``[Q]`` labels (any hashable: a benchmark's relation, category), the queries of
            one label forming one stratum; None: one stratum of every query.
        resamples: how many query sets of size ``Q`` to draw.
        seed: the generator's seed.

    Returns:
        float64 ``[resamples]`` or ``[resamples, M]``: each resample's mean of each column.
    """
    return bootstrap_statistics(values, strata, resamples, seed)


def bootstrap_statistics(
    values: np.ndarray,
    strata: Sequence[Hashable] | np.ndarray | None = None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    *,
    medians: Sequence[bool] | np.ndarray | None = None,
) -> np.ndarray:
    """:func:`bootstrap_stratified_means`, with the median instead of the mean of the columns
    that ``medians`` marks, over the same drawn rows (the same draws, whatever ``medians``).

    Args:
        values, strata, resamples, seed: as :func:`bootstrap_stratified_means`.
        medians: bool ``[M]`` (``[1]`` for ``[Q]`` values): the columns whose median each
            resample takes; None: none, every column's mean.

    Returns:
        float64 ``[resamples]`` or ``[resamples, M]``: each resample's mean or median of each
        column.
    """
    data = np.asarray(values, dtype=np.float64)
    queries = len(data)
    if queries == 0:
        raise ValueError("no queries to resample")
    flat = data.reshape(queries, -1)
    median = np.zeros(flat.shape[1], bool) if medians is None else np.asarray(medians, bool)
    if median.shape != (flat.shape[1],):
        raise ValueError(f"{median.size} median flags for {flat.shape[1]} columns")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if strata is None:
        low, high = np.zeros(queries, np.int64), np.full(queries, queries, np.int64)
    else:
        codes: dict[Hashable, int] = {}  # label -> its stratum's number, by first appearance
        labels = np.array([codes.setdefault(label, len(codes)) for label in strata], np.int64)
        if labels.shape != (queries,):
            raise ValueError(f"{len(labels)} strata labels for {queries} queries")
        order = np.argsort(labels, kind="stable")  # each stratum's rows together, in query order
        flat, labels = flat[order], labels[order]
        low = np.searchsorted(labels, labels, side="left")  # row -> its stratum's first row
        high = np.searchsorted(labels, labels, side="right")  # and one past its last
    rng = np.random.default_rng(seed)
    statistics = np.empty((resamples, flat.shape[1]))
    averaged = np.flatnonzero(~median)
    chunk = max(1, _CHUNK_VALUES // queries)
    for start in range(0, resamples, chunk):
        n = min(chunk, resamples - start)
        # row i of each resample is drawn from row i's stratum: [n, Q]
        drawn = rng.integers(low, high, size=(n, queries))
        if len(averaged):
            # how often each query was drawn in each resample: [n, Q]
            offsets = (np.arange(n)[:, None] * queries + drawn).ravel()
            counts = np.bincount(offsets, minlength=n * queries).reshape(n, queries)
            columns = flat if len(averaged) == flat.shape[1] else flat[:, averaged]
            statistics[start : start + n, averaged] = counts @ columns / queries
        for column in np.flatnonzero(median):
            statistics[start : start + n, column] = np.median(flat[drawn, column], axis=1)
    return statistics.reshape((resamples, *data.shape[1:]))


def metric_values(values: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Each metric's value from its per-query values: the mean over queries, the median for a
    median (:func:`xmr.metrics.direction.metric_aggregation`: MedR), or for a weighted metric
    (:func:`xmr.metrics.weighting.weight_metric`: Bias@K's ``male_share_at_K``) the weighted
    mean by its weighing metric's values in ``values`` (NaN when they are all 0)."""
    return {name: _value(values, name) for name in values}


def _value(values: Mapping[str, np.ndarray], name: str) -> float:
    """Metric ``name``'s value from ``values`` (:func:`metric_values`)."""
    column = np.asarray(values[name], dtype=np.float64).ravel()
    if _is_median(name):
        return float(np.median(column))
    weight = _weight_of(values, name)
    return float(column.mean()) if weight is None else weighted_mean(column, weight)


def _is_median(name: str) -> bool:
    """Whether metric ``name`` is a median of its per-query values, not a mean."""
    return metric_aggregation(name) is Aggregation.MEDIAN


def mean_intervals(
    values: Mapping[str, np.ndarray],
    *,
    strata: Sequence[Hashable] | None = None,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> dict[str, Interval]:
    """Each metric's mean over queries (its median, for a median such as MedR) with its
    percentile bootstrap interval.

    Args:
        values: metric name -> ``[Q]`` per-query values, the same ``Q`` queries for all (one
            draw of queries resamples them all). A median's resamples are medians. A weighted
            metric
            (:func:`~xmr.metrics.weighting.weight_metric`) needs its weighing metric here too;
            its value and each resample's are weighted means (a ratio of the resampled sums).
        strata: ``[Q]`` each query's stratum, resampled within it
            (:func:`bootstrap_stratified_means`); None: one stratum.
        resamples: bootstrap resamples.
        confidence: the interval's coverage, in (0, 1).
        seed: the generator's seed.

    Returns:
        metric name -> :class:`Interval`, in the order of ``values``.
    """
    terms = {
        name: [_Term(1.0, *_ratio_parts(values, name), median=_is_median(name))] for name in values
    }
    points = metric_values(values)
    return _intervals(terms, points, strata, resamples, confidence, seed)


def paired_intervals(
    first: Mapping[str, np.ndarray],
    second: Mapping[str, np.ndarray],
    *,
    strata: Sequence[Hashable] | None = None,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> dict[str, Interval]:
    """``second − first`` for each metric both have, with a paired bootstrap interval.

    Args:
        first, second: metric name -> ``[Q]`` per-query values of two models on the same ``Q``
            queries in the same order.
        strata, resamples, confidence, seed: as :func:`mean_intervals` (strata: the
            queries' of both, resampled within them for both alike).

    Returns:
        metric name -> :class:`Interval` of the mean difference (positive: ``second`` higher);
        of a weighted metric, the difference of the two weighted means, of a median (MedR) the
        difference of the two medians, each resample's drawn from the same queries for both.
    """
    terms: dict[str, list[_Term]] = {}
    points: dict[str, float] = {}
    for name in [name for name in first if name in second]:
        a = np.asarray(first[name], dtype=np.float64).ravel()
        b = np.asarray(second[name], dtype=np.float64).ravel()
        if a.shape != b.shape:
            raise ValueError(
                f"{name}: {len(a)} and {len(b)} per-query values; a paired comparison needs "
                "the same queries"
            )
        if _is_median(name):  # a difference of medians
            terms[name] = [_Term(-1.0, a, median=True), _Term(1.0, b, median=True)]
            points[name] = _value(second, name) - _value(first, name)
        elif weight_metric(name) is None:  # a mean of differences
            terms[name] = [_Term(1.0, b - a)]
            points[name] = float((b - a).mean())
        else:
            terms[name] = [_Term(-1.0, *_ratio_parts(first, name)),
                           _Term(1.0, *_ratio_parts(second, name))]  # fmt: skip
            points[name] = _value(second, name) - _value(first, name)
    return _intervals(terms, points, strata, resamples, confidence, seed)


class _Term(NamedTuple):
    """One term of a metric's resampled estimate: ``sign · statistic(numerator) /
    mean(denominator)``, the statistic a mean, or a median when ``median``; ``[Q]`` columns
    (no denominator: 1)."""

    sign: float
    numerator: np.ndarray
    denominator: np.ndarray | None = None
    median: bool = False


def _weight_of(values: Mapping[str, np.ndarray], name: str) -> np.ndarray | None:
    """The per-query weights of ``name`` (its weighing metric's values), None for a plain
    mean; ValueError when they are missing from ``values``."""
    weight = weight_metric(name)
    if weight is None:
        return None
    if weight not in values:
        raise ValueError(f"{name} is a mean weighted by {weight}, whose values are not given")
    return np.asarray(values[weight], dtype=np.float64).ravel()


def _ratio_parts(
    values: Mapping[str, np.ndarray], name: str
) -> tuple[np.ndarray, np.ndarray | None]:
    """``(numerator, denominator)`` ``[Q]`` columns whose means' ratio is ``name``'s value:
    ``(x, None)`` for a plain mean, ``(w·x, w)`` for a weighted one (0 where ``w`` is 0)."""
    column = np.asarray(values[name], dtype=np.float64).ravel()
    weight = _weight_of(values, name)
    if weight is None:
        return column, None
    if weight.shape != column.shape:
        raise ValueError(f"{name}: {len(column)} values for {len(weight)} weights")
    return np.where(weight > 0, column * weight, 0.0), weight


def _intervals(
    terms: Mapping[str, list[_Term]],
    points: Mapping[str, float],
    strata: Sequence[Hashable] | None,
    resamples: int,
    confidence: float,
    seed: int,
) -> dict[str, Interval]:
    """Each metric's :class:`Interval`: ``points[name]`` and the percentile interval of
    ``Σ sign · statistic(numerator) / mean(denominator)`` over its ``terms`` (:class:`_Term`),
    all columns resampled by one draw of queries. A resample whose denominator is 0 is left
    out of the quantiles."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if not terms:
        return {}
    columns: list[np.ndarray] = []
    medians: list[bool] = []
    for parts in terms.values():
        for term in parts:
            columns.append(term.numerator)
            medians.append(term.median)
            if term.denominator is not None:
                columns.append(term.denominator)
                medians.append(False)
    sizes = {len(column) for column in columns}
    if len(sizes) > 1:
        counts = {name: len(parts[0].numerator) for name, parts in terms.items()}
        raise ValueError(f"metrics of one query set need as many values each, got {counts}")
    statistics = bootstrap_statistics(
        np.stack(columns, axis=1), strata, resamples, seed, medians=medians
    )
    tail = (1.0 - confidence) / 2.0
    out, column = {}, 0
    for name, parts in terms.items():
        estimate = np.zeros(resamples)
        for term in parts:
            if term.denominator is None:
                estimate += term.sign * statistics[:, column]
                column += 1
            else:
                with np.errstate(divide="ignore", invalid="ignore"):
                    estimate += term.sign * statistics[:, column] / statistics[:, column + 1]
                column += 2
        finite = estimate[np.isfinite(estimate)]
        if len(finite):
            low, high = np.quantile(finite, [tail, 1.0 - tail])
        else:
            low = high = float("nan")
        out[name] = Interval(points[name], float(low), float(high))
    return out


def seeds_and_queries_interval(
    differences: np.ndarray,
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> Interval:
    """The mean of paired differences over training seeds and test queries, with a two-stage
    bootstrap interval that holds both sources of variation: each resample draws ``S`` seeds
    with replacement (training's variance: the models of one seed against another's) and,
    once for all of them, ``Q`` queries with replacement (the test set's: every seed's runs
    scored the same queries), and takes the mean of the drawn cells (Davison & Hinkley 1997,
    §3.8, resampling both stages).

    Args:
        differences: ``[S, Q]``: per seed, each query's value under the treatment minus under
            the control trained with that seed (:func:`paired_intervals`' differences).
        resamples, confidence, seed: as :func:`mean_intervals`.

    Returns:
        :class:`Interval` of the mean difference. With one seed it is the paired interval over
        the queries alone; a few seeds make it wide (3 seeds: 10 distinct seed draws), as it
        should be.
    """
    data = np.asarray(differences, dtype=np.float64)
    if data.ndim != 2 or 0 in data.shape:
        raise ValueError(f"differences must be [seeds, queries] with both > 0, got {data.shape}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    seeds = len(data)
    # [resamples, S]: each seed's mean over one draw of queries, the same draw for every seed
    per_seed = bootstrap_means(data.T, resamples, seed).reshape(resamples, seeds)
    drawn = np.random.default_rng([seed, 1]).integers(0, seeds, size=(resamples, seeds))
    seed_counts = (drawn[:, :, None] == np.arange(seeds)).sum(1)  # [resamples, S]
    means = (per_seed * seed_counts).sum(1) / seeds
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return Interval(float(data.mean()), float(low), float(high))
