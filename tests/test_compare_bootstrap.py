"""Bootstrap intervals of per-query means (xmr.compare.bootstrap) and the per-query values they
resample (Recall@K hits, ODmAP's AP@k, Bias@K's Δ_K)."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from xmr.compare import bootstrap as bootstrap_module
from xmr.compare.bootstrap import (
    Interval,
    bootstrap_means,
    bootstrap_stratified_means,
    mean_intervals,
    paired_intervals,
    seeds_and_queries_interval,
)
from xmr.metrics import (
    bias_at_k,
    bias_deltas,
    odmap_at_k,
    odmap_per_query,
    recall_at_k,
    recall_hits,
)
from xmr.metrics.grouped import group_weighted_values


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
    # One draw of queries for both columns: a column and 1 - it have resample means that sum to
    # exactly 1 (correlation -1); drawn apart, they would move independently.
    means = bootstrap_means(np.stack([values, 1.0 - values], axis=1), resamples=200, seed=7)
    assert np.allclose(means.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert np.corrcoef(means.T)[0, 1] == pytest.approx(-1.0, abs=1e-9)
    first = mean_intervals({"a": values, "b": 1.0 - values}, seed=7)
    assert (first["b"].low, first["b"].high) == pytest.approx(
        (1.0 - first["a"].high, 1.0 - first["a"].low), abs=1e-12
    )
    alone = mean_intervals({"a": values}, seed=7)["a"]
    assert (alone.value, alone.low, alone.high) == pytest.approx(
        (first["a"].value, first["a"].low, first["a"].high), rel=1e-12
    )
    assert mean_intervals({"a": values}, seed=8)["a"] != first["a"]
    whole = bootstrap_means(values, resamples=50, seed=2)
    strata = np.arange(300) % 7
    stratified = bootstrap_stratified_means(values, strata, resamples=50, seed=2)
    monkeypatch.setattr(bootstrap_module, "_CHUNK_VALUES", 7 * 300)  # 7 resamples per chunk
    assert np.allclose(bootstrap_means(values, resamples=50, seed=2), whole, rtol=1e-12, atol=0)
    again = bootstrap_stratified_means(values, strata, resamples=50, seed=2)
    assert np.allclose(again, stratified, rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="as many values"):
        mean_intervals({"a": values, "b": values[:10]})
    with pytest.raises(ValueError, match="confidence"):
        mean_intervals({"a": values}, confidence=1.0)
    with pytest.raises(ValueError, match="no queries"):
        bootstrap_means(np.array([]))


def test_a_macro_mean_is_resampled_within_each_group_as_enumerated() -> None:
    """Groups a = (1, 1, 1), b = (0, 1), c = (0, 0, 1): a group resampled within itself keeps
    its size, so a's mean is always 1 (no variance from it), b's is j/2 with j ~ Binomial(2,
    1/2), c's is j/3 with j ~ Binomial(3, 1/3). The macro mean (a + b + c) / 3 has the
    distribution of those 4 x 27 equally likely draws of b's and c's items, enumerated here;
    a bootstrap ignoring the groups would also move a's share and the group sizes."""
    correct = np.array([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    groups = ["a"] * 3 + ["b"] * 2 + ["c"] * 3
    macro = group_weighted_values(correct, groups, {"a": 1.0, "b": 1.0, "c": 1.0})
    assert macro.mean() == pytest.approx((1.0 + 0.5 + 1 / 3) / 3)
    means = bootstrap_stratified_means(macro, groups, resamples=40_000, seed=0)
    b_draws = itertools.product([0.0, 1.0], repeat=2)
    exact = Counter(
        round((1.0 + np.mean(b) + np.mean(c)) / 3, 9)
        for b, c in itertools.product(b_draws, list(itertools.product([0.0, 0.0, 1.0], repeat=3)))
    )
    assert sum(exact.values()) == 4 * 27
    found = Counter(np.round(means, 9).tolist())
    assert set(found) <= set(exact)
    for value, count in exact.items():
        assert found[value] / len(means) == pytest.approx(count / (4 * 27), abs=0.01)
    # Group a alone: all 1s, its resampled mean never moves; an indicator of a group always
    # averages to that group's share of the queries.
    only_a = group_weighted_values(correct, groups, {"a": 1.0})
    assert np.all(bootstrap_stratified_means(only_a, groups, resamples=200, seed=1) == 1.0)
    share = bootstrap_stratified_means(np.array([g == "b" for g in groups]), groups, 200, seed=1)
    assert np.allclose(share, 2 / 8, rtol=0, atol=1e-15)
    assert np.ptp(bootstrap_means(only_a, resamples=200, seed=1)) > 0  # unstratified: it moves


def test_group_weights_give_macro_pooled_and_single_group_means() -> None:
    correct = np.array([1.0, 0.0, 0.0, 1.0, 1.0])
    groups = ["x", "x", "x", "y", "y"]  # x: 1/3 right, y: 2/2
    weighted = {
        "macro": ({"x": 1.0, "y": 1.0}, (1 / 3 + 1.0) / 2),
        "pooled": ({"x": 3.0, "y": 2.0}, 3 / 5),
        "y alone": ({"y": 1.0}, 1.0),
    }
    for weights, expected in weighted.values():
        assert group_weighted_values(correct, groups, weights).mean() == pytest.approx(expected)
    # One stratum: the plain bootstrap, draw for draw.
    values = np.random.default_rng(2).random(40)
    assert np.array_equal(
        bootstrap_stratified_means(values, None, 30, seed=4), bootstrap_means(values, 30, seed=4)
    )
    assert np.array_equal(
        bootstrap_stratified_means(values, ["s"] * 40, 30, seed=4),
        bootstrap_means(values, 30, seed=4),
    )
    with pytest.raises(ValueError, match="positive weight"):
        group_weighted_values(correct, groups, {"z": 1.0})
    with pytest.raises(ValueError, match="groups"):
        group_weighted_values(correct, groups[:4], {"x": 1.0})
    with pytest.raises(ValueError, match="3 strata labels for 40 queries"):
        bootstrap_stratified_means(values, [0, 1, 2], 5)


def test_a_paired_macro_difference_is_resampled_within_the_groups() -> None:
    """Two runs alike on group a's 3 items; on group b's 2 items the second is right once more.
    The macro difference is 0.5 x (b's mean difference), resampled within b: 0, 0.25 or 0.5, so
    its 95 % interval is [0, 0.5]. Resampled without the groups, b's item could be drawn up
    to 5 times and the interval would reach past 0.5."""
    groups = ["a", "a", "a", "b", "b"]
    weights = {"a": 1.0, "b": 1.0}
    first = group_weighted_values(np.array([1.0, 0.0, 1.0, 0.0, 0.0]), groups, weights)
    second = group_weighted_values(np.array([1.0, 0.0, 1.0, 1.0, 0.0]), groups, weights)
    paired = paired_intervals({"m": first}, {"m": second}, strata=groups, resamples=4000)["m"]
    assert (paired.value, paired.low, paired.high) == pytest.approx((0.25, 0.0, 0.5))
    unstratified = paired_intervals({"m": first}, {"m": second}, resamples=4000)["m"]
    assert unstratified.high > 0.5


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


def test_a_weighted_share_is_resampled_as_a_ratio_of_sums() -> None:
    """``male_share_at_K`` is Σ w·x / Σ w (w: the gendered share): each resample's value is the
    ratio of its drawn sums, against the 27 draws of three queries enumerated."""
    gendered = np.array([1.0, 0.5, 0.0])
    male = np.array([1.0, 0.0, np.nan])  # query 3 saw no gendered image: no share, no weight
    values = {"test/gendered_share_at_2": gendered, "test/male_share_at_2": male}
    intervals = mean_intervals(values, resamples=20_000, seed=1)
    assert intervals["test/male_share_at_2"].value == pytest.approx(1 / 1.5)
    assert intervals["test/gendered_share_at_2"].value == pytest.approx(0.5)
    # the 27 equally likely resamples; one of all query 3 (1/27) has no share and is left out
    ratios = []
    for draw in itertools.product(range(3), repeat=3):
        w = gendered[list(draw)]
        if w.sum() > 0:
            ratios.append(np.nansum(w * male[list(draw)]) / w.sum())
    low, high = np.quantile(ratios, [0.025, 0.975])
    interval = intervals["test/male_share_at_2"]
    assert (interval.low, interval.high) == pytest.approx((low, high), abs=1e-9)
    with pytest.raises(ValueError, match="male_share_at_2 is a mean weighted by test/gendered"):
        mean_intervals({"test/male_share_at_2": male})


def test_a_paired_share_difference_is_the_difference_of_the_ratios() -> None:
    rng = np.random.default_rng(0)
    shown = rng.integers(0, 11, size=(2, 400)) / 10  # gendered share of each query, two runs
    male = rng.random((2, 400)) + np.array([[0.0], [0.3]])  # run B sees more men
    male = np.where(shown > 0, np.clip(male, 0, 1), np.nan)
    runs = [{"gendered_share_at_10": shown[i], "male_share_at_10": male[i]} for i in (0, 1)]
    paired = paired_intervals(runs[0], runs[1], resamples=500)
    single = [mean_intervals(run, resamples=500)["male_share_at_10"].value for run in runs]
    change = paired["male_share_at_10"]
    assert change.value == pytest.approx(single[1] - single[0])
    assert change.low <= change.value <= change.high and change.excludes(0.0)
    assert paired["gendered_share_at_10"].value == pytest.approx((shown[1] - shown[0]).mean())


def test_the_seeds_and_queries_interval_holds_training_variance() -> None:
    """Per-seed gains that disagree (one seed +0.1 on every query, the other 0) give an
    interval over seeds and queries that reaches both, where the paired interval of the
    pooled queries alone (one draw of queries) is as narrow as the noise; one seed reduces to
    the queries' paired interval; the mean is the plain mean; seeded."""
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.01, size=(2, 500))
    differences = noise + np.array([[0.1], [0.0]])
    interval = seeds_and_queries_interval(differences, seed=1)
    assert interval.value == pytest.approx(differences.mean())
    assert interval.low < 0.01 and interval.high > 0.09  # the seeds' disagreement
    pooled = mean_intervals({"d": differences.mean(0)}, seed=1)["d"]
    assert pooled.high - pooled.low < 0.01
    one = seeds_and_queries_interval(differences[:1], seed=1)
    alone = mean_intervals({"d": differences[0]}, seed=1)["d"]
    assert (one.low, one.high) == pytest.approx((alone.low, alone.high), abs=2e-3)
    assert seeds_and_queries_interval(differences, seed=1) == interval
    with pytest.raises(ValueError, match=r"\[seeds, queries\]"):
        seeds_and_queries_interval(np.zeros(3))
