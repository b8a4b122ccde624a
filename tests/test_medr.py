"""MedR: each query's rank of its first positive over the whole gallery (chunked,
xmr.retrieval.positive_ranks; from a ranking, xmr.metrics.first_positive_ranks), its median,
and the bootstrap and paired comparison that take medians (xmr.compare.bootstrap)."""

from __future__ import annotations

import numpy as np
import pytest

from xmr.compare.bootstrap import Interval, mean_intervals, paired_intervals
from xmr.compare.paired import paired_differences
from xmr.compare.per_query import QueryValues
from xmr.metrics import (
    Aggregation,
    Direction,
    find_direction,
    first_positive_ranks,
    metric_aggregation,
    metric_direction,
    recall_hits,
)
from xmr.metrics.medr import median_rank
from xmr.retrieval import positive_ranks, rerank, topk_similarity


def brute_force_ranks(scores: np.ndarray, positives: list[set[int]]) -> np.ndarray:
    """Every row sorted by (score descending, index ascending); the first positive's place."""
    num_gallery = scores.shape[1]
    order = [list(np.lexsort((np.arange(num_gallery), -row))) for row in scores]
    return np.array(
        [min((o.index(p) + 1 for p in pos), default=num_gallery + 1)
         for o, pos in zip(order, positives, strict=True)]
    )  # fmt: skip


def _tied_problem(seed: int) -> tuple[np.ndarray, np.ndarray, list[set[int]]]:
    """Small-integer embeddings (exact scores, many ties), 23 queries over 31 items, each with 0
    to 3 positives."""
    rng = np.random.default_rng(seed)
    queries = rng.integers(-1, 2, (23, 3)).astype(np.float32)
    gallery = rng.integers(-1, 2, (31, 3)).astype(np.float32)
    positives = [set(rng.choice(31, rng.integers(0, 4), replace=False).tolist()) for _ in range(23)]
    return queries, gallery, positives


@pytest.mark.parametrize("query_chunk", [1, 4, 7, 23, 100, None])
def test_chunked_ranks_equal_a_brute_force_full_ranking_ties_included(query_chunk) -> None:
    for seed in range(3):
        queries, gallery, positives = _tied_problem(seed)
        scores = queries @ gallery.T
        expected = brute_force_ranks(scores, positives)
        assert (expected == 32).any()  # queries without a positive: below every item
        ranks = positive_ranks(queries, gallery, positives, query_chunk=query_chunk)
        assert ranks.dtype == np.int64
        np.testing.assert_array_equal(ranks, expected)
        np.testing.assert_array_equal(first_positive_ranks(scores, positives), expected)
        hits = recall_hits(scores, positives, ks=(1, 5))  # Recall@K: the rank is <= K
        for k, hit in hits.items():
            np.testing.assert_array_equal(hit, expected <= k)


def test_equal_scores_rank_the_lower_gallery_index_first() -> None:
    gallery = np.ones((6, 2), np.float32)
    gallery[4] = 2.0  # item 4 first, then 0, 1, 2, 3, 5
    query = np.ones((1, 2), np.float32)
    for positives, expected in (({3}, 5), ({5, 3}, 5), ({1, 5}, 3), ({4, 0}, 1), ({5}, 6)):
        assert positive_ranks(query, gallery, [positives]).tolist() == [expected], positives
        assert first_positive_ranks(query @ gallery.T, [positives]).tolist() == [expected]


def test_ranks_past_a_top_k_come_from_the_chunked_ranks_and_a_rerank_decides_its_top() -> None:
    queries, gallery, positives = _tied_problem(4)
    expected = brute_force_ranks(queries @ gallery.T, positives)
    top = topk_similarity(queries, gallery, 3)
    beyond = positive_ranks(queries, gallery, positives)
    np.testing.assert_array_equal(first_positive_ranks(top, positives, beyond=beyond), expected)
    with pytest.raises(ValueError, match="holds the top 3 of 31"):
        first_positive_ranks(top, positives)
    # A re-ranker that puts each row's last candidate first: within the top 3 the re-ranked
    # places count, below it the whole gallery's; a query whose positives left the top 3 (per
    # the ranking) is placed at least 4th, whatever ``beyond`` says.
    reranked = rerank(top, lambda q, g: (g == top.indices[q, -1]) * 100.0, 3)
    ranks = first_positive_ranks(reranked, positives, beyond=np.ones(23, np.int64))
    for q, pos in enumerate(positives):
        places = [i + 1 for i, g in enumerate(reranked.indices[q]) if g in pos]
        assert ranks[q] == (min(places) if places else 4 if pos else 32), q


def test_medr_is_the_median_rank_and_its_interval_the_median_of_each_resample() -> None:
    ranks = np.array([1, 1, 9])
    assert median_rank(ranks) == 1.0 and median_rank(np.array([4, 1, 2, 7])) == 3.0
    # (1, 1, 9): a resample's median is 9 when 2 or 3 of its draws are 9, P = 7/27 > 2.5 %.
    interval = mean_intervals({"test/medr_i2t": ranks}, resamples=4000, seed=3)["test/medr_i2t"]
    assert interval == Interval(value=1.0, low=1.0, high=9.0)

    values = np.random.default_rng(0).integers(1, 60, 101).astype(np.float64)
    hits = (values <= 5).astype(np.float64)
    name = "test/medr_t2i"
    both = mean_intervals({name: values, "test/recall_t2i_at_5": hits}, resamples=500, seed=7)
    # By hand: the same draws of queries, each resample's median, its 2.5 and 97.5 % quantiles.
    drawn = np.random.default_rng(7).integers(0, 101, size=(500, 101))
    low, high = np.quantile(np.median(values[drawn], axis=1), [0.025, 0.975])
    assert both[name] == Interval(float(np.median(values)), low, high)
    assert both == mean_intervals(
        {name: values, "test/recall_t2i_at_5": hits}, resamples=500, seed=7
    )
    alone = mean_intervals({"test/recall_t2i_at_5": hits}, resamples=500, seed=7)
    assert both["test/recall_t2i_at_5"] == alone["test/recall_t2i_at_5"]  # one draw for both
    assert both["test/recall_t2i_at_5"].value == pytest.approx(hits.mean())


def test_a_paired_medr_is_the_difference_of_the_medians_over_the_same_draws() -> None:
    rng = np.random.default_rng(1)
    first = rng.integers(1, 40, 80).astype(np.float64)
    second = np.where(np.arange(80) % 2 == 0, first - 6, first + 1)
    name = "test/medr_i2t"
    difference = paired_intervals({name: first}, {name: second}, resamples=400, seed=2)[name]
    value = float(np.median(second) - np.median(first))
    assert value != float(np.median(second - first))  # another statistic
    drawn = np.random.default_rng(2).integers(0, 80, size=(400, 80))
    medians = np.median(second[drawn], axis=1) - np.median(first[drawn], axis=1)
    low, high = np.quantile(medians, [0.025, 0.975])
    assert difference == Interval(value, low, high)
    # Two runs' query sets, paired by xmr compare: the same interval, B − A.
    keys = [str(n) for n in range(80)]
    runs = [{"t2i": QueryValues(keys, {name: v})} for v in (first, second)]
    assert paired_differences(*runs, resamples=400, seed=2)[name] == difference
    same = paired_intervals({name: first}, {name: first.copy()})[name]
    assert same == Interval(0.0, 0.0, 0.0)


def test_medr_declares_lower_is_better_and_a_median() -> None:
    for name in ("test/medr_i2t", "final/val/medr_t2i", "medr_t2i"):
        assert metric_direction(name) is Direction.LOWER is find_direction(name)
        assert metric_aggregation(name) is Aggregation.MEDIAN
    assert Direction.LOWER.better(2.0, than=3.0) and Direction.LOWER.mode == "min"
    for name in ("test/recall_t2i_at_1", "test/bias_at_10", "train/loss", "anything"):
        assert metric_aggregation(name) is Aggregation.MEAN
    assert find_direction("test/medr_i2t_ci_low") is None  # an interval's end is not judged
    assert find_direction("test/medr") is None and find_direction("test/medr_at_10") is None


def test_chunked_ranks_validate_their_inputs() -> None:
    queries, gallery = np.ones((2, 3)), np.ones((4, 3))
    with pytest.raises(ValueError, match="1 positive sets for 2 queries"):
        positive_ranks(queries, gallery, [{0}])
    with pytest.raises(ValueError, match=r"gallery indices in \[0, 4\)"):
        positive_ranks(queries, gallery, [{0}, {4}])
    with pytest.raises(ValueError, match="expected queries"):
        positive_ranks(queries, np.ones((4, 2)), [{0}, {1}])
    with pytest.raises(ValueError, match="NaN"):
        positive_ranks(np.full((2, 3), np.nan), gallery, [{0}, {1}])
    with pytest.raises(ValueError, match="query_chunk"):
        positive_ranks(queries, gallery, [{0}, {1}], query_chunk=0)
    with pytest.raises(ValueError, match="empty"):
        positive_ranks(queries, np.ones((0, 3)), [{0}, {1}])
