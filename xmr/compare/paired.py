"""Two runs paired query by query: is B different from A?

Both runs scored the same queries (their logged per-query values, :mod:`xmr.compare.per_query`),
so each metric's difference ``B − A`` is resampled per query (:func:`paired_differences`, the
paired bootstrap of :mod:`xmr.compare.bootstrap`): query difficulty is shared and cancels.
Runs of different test sets or benchmark files are refused. Two runs by their ids or names
(:func:`paired_comparison`: ``xmr compare RUN_A RUN_B``, the benchmarks' scripts), a job's two
conditions (:mod:`xmr.jobs.comparison`) and a sweep's neighbours on a Pareto front
(:func:`tied_pairs`) are compared so, with the bootstrap's defaults unless told otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from xmr.compare.bootstrap import (
    CONFIDENCE,
    RESAMPLES,
    SEED,
    Interval,
    metric_values,
    paired_intervals,
)
from xmr.compare.per_query import QueryValues, logged_per_query, select_metrics
from xmr.compare.runs import FINISHED, find_run
from xmr.tracking import resolve_tracking_uri


def paired_differences(
    first: Mapping[str, QueryValues],
    second: Mapping[str, QueryValues],
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> dict[str, Interval]:
    """``second − first`` of every metric both have (in ``first``'s order), with a paired
    bootstrap interval over the queries they share by construction (within the set's strata,
    if it has any: a macro accuracy's difference is resampled as the accuracy is).

    ``first``, ``second``: query set name -> its values, of two runs. ``resamples``,
    ``confidence``, ``seed``: the bootstrap's (:func:`~xmr.compare.bootstrap.paired_intervals`).

    Raises:
        ValueError: a query set of both that holds other queries (another split or dataset,
            images that failed to encode in one run only), naming the set and the first query
            that differs; or the same queries in other strata.
    """
    out: dict[str, Interval] = {}
    for name in [name for name in first if name in second]:
        a, b = first[name], second[name]
        if a.keys != b.keys:
            n = next(
                (i for i, (x, y) in enumerate(zip(a.keys, b.keys, strict=False)) if x != y),
                min(len(a.keys), len(b.keys)),
            )
            left = a.keys[n] if n < len(a.keys) else "(none)"
            right = b.keys[n] if n < len(b.keys) else "(none)"
            raise ValueError(
                f"the runs scored other {name} queries ({len(a.keys)} vs {len(b.keys)}; "
                f"query {n} is {left!r} vs {right!r}): a paired comparison needs the same test "
                "set (the same dataset and split; the default ToyWorld depends on --seed)"
            )
        if a.strata != b.strata:
            raise ValueError(f"the runs grouped their {name} queries differently")
        if a.keys:
            out.update(
                paired_intervals(
                    a.values,
                    b.values,
                    strata=a.strata,
                    resamples=resamples,
                    confidence=confidence,
                    seed=seed,
                )
            )
    return out


def tied_pairs(
    pairs: Sequence[tuple[int, int]],
    run_ids: Sequence[str],
    metrics: Sequence[str],
    *,
    tracking_uri: str,
    per_query: dict[str, dict[str, QueryValues] | None] | None = None,
) -> list[tuple[int, int]]:
    """The pairs of ``pairs`` (positions into ``run_ids``) whose runs the test set cannot tell
    apart: over the queries both runs scored, the paired bootstrap interval of their
    difference (:func:`paired_differences` with the bootstrap's defaults) holds 0 on every
    metric of ``metrics``.
    A pair is left out when either run (``""``: none) has no per-query values of every metric
    or they scored other queries.

    ``per_query``: run id -> its logged values (None: none), filled as runs are read, so that
    several calls read each run once.
    """
    cache = per_query if per_query is not None else {}
    ties = []
    for i, j in pairs:
        first, second = (_logged_once(run_ids[k], tracking_uri, cache) for k in (i, j))
        if first is None or second is None:
            continue
        try:
            differences = paired_differences(
                select_metrics(first, metrics), select_metrics(second, metrics)
            )
        except ValueError:  # other queries: not comparable, left unmarked
            continue
        if all(m in differences and not differences[m].excludes(0.0) for m in metrics):
            ties.append((i, j))
    return ties


def _logged_once(
    run_id: str, tracking_uri: str, cache: dict[str, dict[str, QueryValues] | None]
) -> dict[str, QueryValues] | None:
    """A run's logged per-query values (None: no run, or none logged), read once into
    ``cache``."""
    if run_id not in cache:
        try:
            cache[run_id] = logged_per_query(run_id, tracking_uri=tracking_uri) if run_id else None
        except LookupError:
            cache[run_id] = None
    return cache[run_id]


@dataclass
class PairedComparison:
    """Two runs' metrics on the same queries and their paired differences.

    ``frame``: one row per metric: ``metric``, ``first``, ``second`` (the runs' values),
    ``difference`` (second − first), ``ci_low``, ``ci_high`` (its paired bootstrap interval)
    and ``significant`` (the interval excludes 0).
    """

    first: tuple[str, str]  # (run id, run name)
    second: tuple[str, str]
    frame: pd.DataFrame
    confidence: float
    resamples: int
    statuses: tuple[str, str] = (FINISHED, FINISHED)  # the runs' MLflow statuses


def paired_comparison(
    first: str,
    second: str,
    metrics: Sequence[str] = (),
    *,
    tracking_uri: str | None = None,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> PairedComparison:
    """``second`` against ``first`` (run ids or names), metric by metric, with paired bootstrap
    intervals over the queries both scored (:func:`paired_differences`).

    ``metrics``: the names to keep (default: every metric both runs have per-query values of).
    A run that is not :data:`~xmr.compare.runs.FINISHED` is compared all the same, its status
    in ``statuses``.
    Raises LookupError (a run, its values or a metric not found) or ValueError (the runs scored
    different queries).
    """
    uri = resolve_tracking_uri(tracking_uri)
    runs = [find_run(reference, tracking_uri=uri) for reference in (first, second)]
    values = [logged_per_query(run.run_id, tracking_uri=uri) for run in runs]
    if metrics:
        known = {m for sets in values for query_set in sets.values() for m in query_set.values}
        unknown = [m for m in metrics if m not in known]
        if unknown:
            raise LookupError(
                f"no per-query values of {', '.join(unknown)}; the runs have: "
                f"{', '.join(sorted(known))}"
            )
        values = [select_metrics(sets, metrics) for sets in values]
    intervals = paired_differences(
        values[0], values[1], resamples=resamples, confidence=confidence, seed=seed
    )
    means = [{m: v for s in sets.values() for m, v in metric_values(s.values).items()}
             for sets in values]  # fmt: skip
    frame = pd.DataFrame(
        [
            {
                "metric": name,
                "first": means[0][name],
                "second": means[1][name],
                "difference": interval.value,
                "ci_low": interval.low,
                "ci_high": interval.high,
                "significant": interval.excludes(0.0),
            }
            for name, interval in intervals.items()
        ],
        columns=["metric", "first", "second", "difference", "ci_low", "ci_high", "significant"],
    )
    a, b = ((run.run_id, run.name) for run in runs)
    return PairedComparison(a, b, frame, confidence, resamples, (runs[0].status, runs[1].status))
