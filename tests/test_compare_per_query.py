"""Per-query values of an evaluation (xmr.compare.per_query): the parquet round trip, intervals
by query set (xmr.eval.intervals), the paired difference that refuses runs of other queries
(xmr.compare.paired), and a benchmark's strata."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from xmr.compare.paired import paired_differences
from xmr.compare.per_query import QueryValues, read_per_query, write_per_query
from xmr.eval.intervals import intervals_of
from xmr.metrics.grouped import group_weighted_values


def _sets(shift: float = 0.0) -> dict[str, QueryValues]:
    rng = np.random.default_rng(0)
    hits = (rng.random(300) < 0.4).astype(np.float64)
    return {
        "i2t": QueryValues(
            [f"{n}" for n in range(300)],
            {"test/recall_i2t_at_1": hits, "test/recall_i2t_at_5": np.maximum(hits, shift > 0)},
        ),
        "bias": QueryValues(
            [f"{n}:a person" for n in range(50)],
            {"test/bias_at_10": np.clip(rng.normal(0.1, 0.3, 50) - shift, -1, 1)},
        ),
    }


def test_per_query_values_round_trip_through_parquet(tmp_path) -> None:
    sets = _sets()
    back = read_per_query(write_per_query(sets, tmp_path / "per_query.parquet"))
    assert list(back) == ["i2t", "bias"]
    for name, values in sets.items():
        assert back[name].keys == values.keys and back[name].values.keys() == values.values.keys()
        for metric, column in values.values.items():
            assert np.array_equal(back[name].values[metric], column)
    pq.write_table(pa.table({"x": [1]}), tmp_path / "other.parquet")
    with pytest.raises(ValueError, match=r"other\.parquet: not a per-query table"):
        read_per_query(tmp_path / "other.parquet")
    with pytest.raises(ValueError, match="2 values for 3 queries"):
        QueryValues(["a", "b", "c"], {"m": np.zeros(2)})


def test_intervals_come_per_query_set_and_hold_each_metric() -> None:
    sets = _sets()
    intervals = intervals_of(sets, resamples=500, confidence=0.9, seed=0)
    assert list(intervals) == ["test/recall_i2t_at_1", "test/recall_i2t_at_5", "test/bias_at_10"]
    for values in sets.values():
        for metric, column in values.values.items():
            interval = intervals[metric]
            assert interval.value == column.mean() and interval.low < interval.value < interval.high
    assert intervals_of(sets, resamples=0, confidence=0.9, seed=0) == {}
    assert intervals_of({"i2t": QueryValues([], {})}, resamples=10, confidence=0.9, seed=0) == {}


def test_a_paired_difference_needs_the_same_queries() -> None:
    first, second = _sets(), _sets(shift=0.05)
    differences = paired_differences(first, second, resamples=500, confidence=0.95, seed=0)
    assert differences["test/recall_i2t_at_1"].value == 0.0
    assert differences["test/bias_at_10"].value == pytest.approx(-0.05, abs=0.02)
    assert differences["test/bias_at_10"].excludes(0.0)  # the same shift on every query
    assert differences["test/recall_i2t_at_5"].value > 0
    other = _sets()
    other["bias"] = QueryValues(
        ["0:a person", "1:someone"], {"test/bias_at_10": np.zeros(2)}
    )  # another test set
    with pytest.raises(ValueError, match=r"other bias queries \(50 vs 2; query 1 is"):
        paired_differences(first, other, resamples=10, confidence=0.95, seed=0)


def test_strata_round_trip_and_drive_the_paired_resampling(tmp_path) -> None:
    """A benchmark's items carry their group: written and read back with the values (a file from
    before strata reads as none), and a paired difference resamples within them, as
    `xmr compare` does for two runs of one benchmark; the same items grouped otherwise are
    refused."""
    keys = [f"vg-relation/{n}:caption {n}" for n in range(6)]
    strata = ["on", "on", "on", "on", "eating", "eating"]
    weights = {"on": 1.0, "eating": 1.0}
    first = {
        "vg-relation": QueryValues(
            keys,
            {"aro/vg_relation_acc": group_weighted_values(np.ones(6), strata, weights)},
            strata,
        ),
        **_sets(),
    }
    path = write_per_query(first, tmp_path / "per_query.parquet")
    back = read_per_query(path)
    assert back["vg-relation"].strata == strata and back["i2t"].strata is None
    assert np.array_equal(
        back["vg-relation"].values["aro/vg_relation_acc"],
        first["vg-relation"].values["aro/vg_relation_acc"],
    )
    pq.write_table(pq.read_table(path).drop_columns(["stratum"]), tmp_path / "old.parquet")
    assert read_per_query(tmp_path / "old.parquet")["vg-relation"].strata is None

    # The second run: wrong on both "eating" items; its macro accuracy is 0.5, and with every
    # "on" item the same in both runs, the difference resampled within the groups is -0.5.
    right = np.array([1.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    second = {
        "vg-relation": QueryValues(
            keys,
            {"aro/vg_relation_acc": group_weighted_values(right, strata, weights)},
            strata,
        )
    }
    differences = paired_differences(back, second, resamples=200, confidence=0.95, seed=0)
    interval = differences["aro/vg_relation_acc"]
    assert (interval.value, interval.low, interval.high) == pytest.approx((-0.5, -0.5, -0.5))
    regrouped = {"vg-relation": QueryValues(keys, second["vg-relation"].values, ["on"] * 6)}
    with pytest.raises(ValueError, match="grouped their vg-relation queries differently"):
        paired_differences(back, regrouped, resamples=10, confidence=0.95, seed=0)
    with pytest.raises(ValueError, match="5 strata for 6 queries"):
        QueryValues(keys, {}, strata[:5])
