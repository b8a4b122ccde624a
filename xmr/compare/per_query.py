"""Per-query metric values: what an interval resamples and what a paired comparison of two
runs pairs.

An evaluation's metrics are means over query sets: ``i2t`` (the split's images), ``t2i`` (its
captions), ``odmap`` (the object-removed queries) and ``bias`` (the gender-neutral captions); a
benchmark's over its items (``vg-relation``, ``sugarcrepe``, ``binding``, ...); product
retrieval's over its image and text queries (``products_i2t``, ``subcat_t2i``, ...).
:class:`QueryValues` holds one set's queries (a key that names each, so that two runs can be
checked to have scored the same queries), each metric's ``[Q]`` values and, for a benchmark,
each query's stratum (its relation, category, ...: macro accuracies are resampled within them,
:func:`~xmr.compare.bootstrap.bootstrap_stratified_means`). Evaluations and training runs
write them as ``per_query.parquet`` (an MLflow artifact of every evaluation and training run),
one row per (query set, query, metric): columns ``query_set``, ``query``, ``metric``,
``value`` and ``stratum`` (null when the set has none; a file without the column reads as
none); :func:`logged_per_query` reads a run's back from the tracking store.
"""

from __future__ import annotations

import tempfile
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from xmr.metrics.weighting import weight_metric
from xmr.tracking import download_artifact

PER_QUERY_FILE = "per_query.parquet"
SCHEMA = pa.schema(
    [
        ("query_set", pa.string()),
        ("query", pa.string()),
        ("metric", pa.string()),
        ("value", pa.float64()),
        ("stratum", pa.string()),
    ]
)
_REQUIRED = ("query_set", "query", "metric", "value")  # files written before strata lack one


@dataclass
class QueryValues:
    """One query set: ``keys`` ``[Q]`` (each query's identity, e.g. ``"1234:a dog on grass"``
    for an image id and its first caption, ``"1234#2:a red car"`` for that image's third
    caption) and metric name -> float64 ``[Q]`` values; ``strata``: ``[Q]`` each query's
    stratum (a benchmark item's group), None for one stratum of all queries."""

    keys: list[str]
    values: dict[str, np.ndarray]
    strata: list[str] | None = None

    def __post_init__(self) -> None:
        for name, column in self.values.items():
            if len(column) != len(self.keys):
                raise ValueError(f"{name}: {len(column)} values for {len(self.keys)} queries")
        if self.strata is not None and len(self.strata) != len(self.keys):
            raise ValueError(f"{len(self.strata)} strata for {len(self.keys)} queries")


def select_metrics(
    sets: Mapping[str, QueryValues], metrics: Collection[str]
) -> dict[str, QueryValues]:
    """The query sets with only the values of ``metrics`` and of the metrics that weigh them
    (:func:`~xmr.metrics.weighting.weight_metric`: a male share's gendered share, without
    which it has no value); a set left without any is dropped."""
    kept = set(metrics) | {weight for m in metrics if (weight := weight_metric(m)) is not None}
    selected = {
        name: QueryValues(
            values.keys, {m: v for m, v in values.values.items() if m in kept}, values.strata
        )
        for name, values in sets.items()
    }
    return {name: values for name, values in selected.items() if values.values}


def to_table(sets: Mapping[str, QueryValues]) -> pa.Table:
    """The long table of :data:`SCHEMA`: a row per (query set, query, metric)."""
    columns: dict[str, list] = {name: [] for name in SCHEMA.names}
    for query_set, values in sets.items():
        for metric, column in values.values.items():
            columns["query_set"] += [query_set] * len(values.keys)
            columns["query"] += values.keys
            columns["metric"] += [metric] * len(values.keys)
            columns["value"].append(np.asarray(column, np.float64))
            columns["stratum"] += values.strata or [None] * len(values.keys)
    columns["value"] = np.concatenate(columns["value"]) if columns["value"] else []
    return pa.table(columns, schema=SCHEMA)


def from_table(table: pa.Table) -> dict[str, QueryValues]:
    """The query sets of a :func:`to_table` table (query order kept; a table without the
    ``stratum`` column has no strata)."""
    sets: dict[str, QueryValues] = {}
    frame = table.select([n for n in SCHEMA.names if n in table.column_names]).to_pydict()
    strata = frame.pop("stratum", [None] * table.num_rows)
    rows: dict[tuple[str, str], tuple[list[str], list[float], list[str | None]]] = {}
    for query_set, query, metric, value, stratum in zip(*frame.values(), strata, strict=True):
        keys, values, groups = rows.setdefault((query_set, metric), ([], [], []))
        keys.append(query)
        values.append(value)
        groups.append(stratum)
    for (query_set, metric), (keys, values, groups) in rows.items():
        stratified = None if all(g is None for g in groups) else groups
        found = sets.setdefault(query_set, QueryValues(keys, {}, stratified))
        if found.keys != keys or found.strata != stratified:
            raise ValueError(f"{query_set}: {metric} has other queries than the set's first metric")
        found.values[metric] = np.array(values, np.float64)
    return sets


def write_per_query(sets: Mapping[str, QueryValues], path: Path) -> Path:
    """Write :func:`to_table` of ``sets`` to ``path`` (parquet); returns ``path``."""
    pq.write_table(to_table(sets), path)
    return path


def read_per_query(path: Path) -> dict[str, QueryValues]:
    """The query sets written by :func:`write_per_query`. ``ValueError`` names a file that is
    not such a table."""
    table = pq.read_table(path)
    missing = set(_REQUIRED) - set(table.column_names)
    if missing:
        raise ValueError(f"{path}: not a per-query table (no {', '.join(sorted(missing))} column)")
    return from_table(table)


def logged_per_query(run_id: str, *, tracking_uri: str) -> dict[str, QueryValues]:
    """The per-query values MLflow run ``run_id`` logged (its ``per_query.parquet`` artifact).

    Raises:
        LookupError: the run has none (an evaluation from before per-query values were
            logged, or a run that never reached its evaluation).
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = download_artifact(run_id, PER_QUERY_FILE, Path(tmp), tracking_uri=tracking_uri)
        if path is None:
            raise LookupError(
                f"run {run_id} has no {PER_QUERY_FILE} artifact (it was evaluated before "
                "per-query values were logged, or did not finish): evaluate it again"
            )
        return read_per_query(path)
