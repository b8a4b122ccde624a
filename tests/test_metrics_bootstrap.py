"""Bootstrap intervals of per-query means (xmr.metrics.bootstrap) and the per-query values they
resample (Recall@K hits, ODmAP's AP@k, Bias@K's Δ_K)."""

from __future__ import annotations

import numpy as np
import pytest

from xmr.metrics import (
    Interval,
    bias_at_k,
    bias_deltas,
    mean_intervals,
    odmap_at_k,
    odmap_per_query,
    paired_intervals,
    recall_at_k,
    recall_hits,
)
from xmr.metrics import bootstrap as bootstrap_module
from xmr.metrics.bootstrap import bootstrap_means


def test_the_bootstrap_distribution_of_a_mean_matches_the_hand_computed_one() -> None:
    """Values (0, 0, 1): a resample's mean is j/3 with j ~ Binomial(3, 1/3), so it is 0, 1/3,
    2/3, 1 with probabilities 8/27, 12/27, 6/27, 1/27; the 95 % percentile interval is [0, 1]
    (P(mean ≤ 2/3) = 26/27 < 0.975)."""
    means = bootstrap_means(np.array([0.0, 0.0, 1.0]), resamples=40_000, seed=3)
    frequencies = [np.isclose(means, j / 3).mean() for j in range(4)]
    assert frequencies == pytest.approx([8 / 27, 12 / 27, 6 / 27, 1 / 27], abs=0.01)
    interval = mean_intervals({"m": np.array([0.0, 0.0, 1.0])}, resamples=40_000, seed=3)["m"]
    assert interval == Interval(value=1 / 3, low=0.0, high=1.0)


def test_an_interval_holds_its_estimate_matches_the_normal_width_and_shrinks() -> None:
    rng = np.random.default_rng(0)
    widths = {}
    for queries in (400, 6400):
        hits = rng.random(queries) < 0.3
        interval = mean_intervals({"recall": hits}, seed=1)["recall"]
        assert interval.low <= interval.value <= interval.high
        assert interval.value == pytest.approx(hits.mean())
        normal = 2 * 1.96 * np.sqrt(hits.mean() * (1 - hits.mean()) / queries)
        widths[queries] = interval.high - interval.low
        assert widths[queries] == pytest.approx(normal, rel=0.12)
    assert widths[6400] == pytest.approx(widths[400] / 4, rel=0.2)  # 16x the queries


def test_intervals_are_seeded_joint_and_chunk_invariant(monkeypatch) -> None:
    values = np.random.default_rng(5).random(300)
    first = mean_intervals({"a": values, "b": values}, seed=7)
    assert first["a"] == first["b"]  # one draw of queries for both
    alone = mean_intervals({"a": values}, seed=7)["a"]
    assert (alone.value, alone.low, alone.high) == pytest.approx(
        (first["a"].value, first["a"].low, first["a"].high), rel=1e-12
    )
    assert mean_intervals({"a": values}, seed=8)["a"] != first["a"]
    whole = bootstrap_means(values, resamples=50, seed=2)
    monkeypatch.setattr(bootstrap_module, "_CHUNK_VALUES", 7 * 300)  # 7 resamples per chunk
    assert np.allclose(bootstrap_means(values, resamples=50, seed=2), whole, rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="as many values"):
        mean_intervals({"a": values, "b": values[:10]})
    with pytest.raises(ValueError, match="confidence"):
        mean_intervals({"a": values}, confidence=1.0)
    with pytest.raises(ValueError, match="no queries"):
        bootstrap_means(np.array([]))


def test_a_paired_difference_cancels_what_the_queries_share() -> None:
    """Two models on the same queries, the second better by 0.02 on each: unpaired intervals
    overlap, the paired one is exactly the shift and excludes 0."""
    first = np.random.default_rng(1).random(500)
    second = first + 0.02
    a = mean_intervals({"ap": first})["ap"]
    b = mean_intervals({"ap": second})["ap"]
    assert a.high > b.low  # unpaired: indistinguishable
    difference = paired_intervals({"ap": first, "only_a": first}, {"ap": second})
    assert list(difference) == ["ap"]
    assert difference["ap"].value == pytest.approx(0.02)
    assert difference["ap"].low == pytest.approx(0.02) and difference["ap"].excludes(0.0)
    same = paired_intervals({"ap": first}, {"ap": first.copy()})["ap"]
    assert same == Interval(0.0, 0.0, 0.0) and not same.excludes(0.0)
    assert same.to_json() == {"value": 0.0, "ci_low": 0.0, "ci_high": 0.0}
    with pytest.raises(ValueError, match="same queries"):
        paired_intervals({"ap": first}, {"ap": second[:-1]})


def test_the_per_query_values_average_to_the_metrics() -> None:
    scores = np.array(
        [[0.9, 0.1, 0.5], [0.2, 0.8, 0.7], [0.3, 0.4, 0.1]]
    )  # ranks 0 2 1, 1 2 0, 1 0 2
    hits = recall_hits(scores, [{0}, {2}, {2}], ks=(1, 2))
    assert hits[1].tolist() == [True, False, False] and hits[2].tolist() == [True, True, False]
    assert recall_at_k(scores, [{0}, {2}, {2}], ks=(1, 2)) == {1: 1 / 3, 2: 2 / 3}
    genders = ["male", "female", "neutral"]
    deltas = bias_deltas(scores, genders, ks=(1, 2))
    assert deltas[1].tolist() == [1.0, -1.0, -1.0] and deltas[2].tolist() == [1.0, -1.0, 0.0]
    assert bias_at_k(scores, genders, ks=(1, 2)) == pytest.approx({1: -1 / 3, 2: 0.0})
    mentions = [{"dog"}, {"dog", "frisbee"}, {"cat"}]
    removed, present = [{"frisbee"}, {"frisbee"}, {"dog"}], [{"dog"}, {"cat"}, {"cat"}]
    ap = odmap_per_query(scores, mentions, removed, present, ks=(1, 3))
    assert ap[1].tolist() == [1.0, 0.0, 0.0] and ap[3].tolist() == pytest.approx([1, 1 / 2, 1 / 3])
    want = {1: 1 / 3, 3: 11 / 18}
    assert odmap_at_k(scores, mentions, removed, present, ks=(1, 3)) == pytest.approx(want)
