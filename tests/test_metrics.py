"""Hand-computed cases for the ranking primitive and every metric of :mod:`xmr.metrics`."""

from __future__ import annotations

from typing import get_args

import numpy as np
import pytest
import torch

from xmr.metrics import (
    Ranking,
    bias_at_k,
    gender_bias,
    gendered_share_at_k,
    male_share_at_k,
    map_at_k,
    odmap_at_k,
    rank,
    recall_at_k,
    similarity_bias,
    top_k_genders,
    weight_metric,
    weighted_mean,
)
from xmr.metrics.arrays import as_numpy
from xmr.metrics.average_precision import average_precision_at_k
from xmr.text.gender import Gender
from xmr.toyworld.scene.classes import GENDERS as TOYWORLD_PERSON_GENDERS


def by_index(num_queries: int, num_gallery: int) -> np.ndarray:
    """Scores [Q, G] that rank every query's gallery in index order (0 best)."""
    return np.tile(-np.arange(num_gallery, dtype=np.float32), (num_queries, 1))


# --- as_numpy -------------------------------------------------------------------------------


def test_as_numpy_reads_numpy_torch_and_lists_and_widens_16_bit_floats_exactly():
    values = [[0.1, 0.5], [0.5, -2.0]]
    for x in (
        torch.tensor(values, dtype=torch.float16),
        torch.tensor(values, dtype=torch.bfloat16),
        np.array(values, dtype=np.float16),
    ):
        out = as_numpy(x)
        assert out.dtype == np.float32 and out.shape == (2, 2)
        assert out[0, 1] == out[1, 0]  # equal values stay equal (ties kept)
    assert as_numpy(torch.tensor(values, dtype=torch.float64)).dtype == np.float64
    assert as_numpy(np.array(values)).dtype == np.float64
    assert as_numpy(torch.ones(2, requires_grad=True)).dtype == np.float32  # detached
    np.testing.assert_array_equal(as_numpy([1, 2, 3]), [1, 2, 3])
    assert as_numpy(torch.tensor([1, 2])).dtype == np.int64
    x = np.zeros(3, np.float32)
    assert as_numpy(x) is x  # numpy in: no copy


# --- rank -----------------------------------------------------------------------------------


def test_rank_breaks_ties_by_lower_index():
    scores = np.array([[0.1, 0.5, 0.5, 0.2, 0.5], [1.0, 1.0, 1.0, 1.0, 1.0]])
    ranking = rank(scores, 2)
    np.testing.assert_array_equal(ranking.indices, [[1, 2], [0, 1]])
    assert ranking.indices.dtype == np.int64
    np.testing.assert_array_equal(ranking.scores, np.float32([[0.5, 0.5], [1.0, 1.0]]))
    np.testing.assert_array_equal(rank(scores, 4).indices, [[1, 2, 4, 3], [0, 1, 2, 3]])


def test_rank_with_k_larger_than_gallery_ranks_everything():
    ranking = rank(np.array([[0.1, 0.5, 0.5, 0.2]]), 10)
    np.testing.assert_array_equal(ranking.indices, [[1, 2, 3, 0]])
    assert ranking.k == ranking.num_gallery == 4
    np.testing.assert_array_equal(ranking.top(10), [[1, 2, 3, 0]])


def test_rank_numpy_and_torch_dtypes_agree():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 4, (6, 30)).astype(np.float64)  # many ties
    expected = rank(scores, 7).indices
    for tensor in (torch.from_numpy(scores), torch.from_numpy(scores).half()):
        np.testing.assert_array_equal(rank(tensor, 7).indices, expected)
    np.testing.assert_array_equal(rank(scores.astype(np.float16), 7).indices, expected)
    reference = np.stack([np.lexsort((np.arange(30), -row))[:7] for row in scores])
    np.testing.assert_array_equal(expected, reference)


def test_rank_rejects_nan_and_bad_shapes():
    with pytest.raises(ValueError, match="NaN"):
        rank(np.array([[0.1, np.nan]]), 1)
    with pytest.raises(ValueError, match=r"\[Q, G\]"):
        rank(np.zeros(3), 1)
    with pytest.raises(ValueError, match="k must be"):
        rank(np.zeros((1, 3)), 0)


def test_partial_ranking_refuses_deeper_cutoffs():
    ranking = rank(by_index(2, 20), 5)
    with pytest.raises(ValueError, match="only the top 5 of 20"):
        recall_at_k(ranking, [{0}, {1}], ks=(1, 10))
    with pytest.raises(ValueError, match="only the top 5"):
        map_at_k(ranking, np.ones((2, 20), dtype=bool), 6)
    with pytest.raises(ValueError, match="int64"):
        Ranking(np.zeros((2, 3), dtype=np.int32), 5)
    with pytest.raises(ValueError, match="num_gallery"):
        Ranking(np.zeros((2, 3), dtype=np.int64), 2)


# --- recall_at_k ----------------------------------------------------------------------------


def test_recall_at_k_hand_computed():
    scores = np.array(
        [
            [0.9, 0.1, 0.5],  # ranks 0, 2, 1 -> positive 0 at rank 1
            [0.2, 0.8, 0.8],  # ranks 1, 2, 0 (tie -> 1 first) -> positive 2 at rank 2
            [0.3, 0.3, 0.3],  # ranks 0, 1, 2 -> positive 2 at rank 3
            [0.3, 0.2, 0.1],  # no positive: never a hit
        ]
    )
    positives = [{0}, {2}, {2}, set()]
    expected = {1: 1 / 4, 2: 2 / 4, 3: 3 / 4, 10: 3 / 4}
    assert recall_at_k(scores, positives, ks=(1, 2, 3, 10)) == pytest.approx(expected)
    assert recall_at_k(torch.tensor(scores), positives, ks=(1, 2, 3, 10)) == pytest.approx(expected)
    assert recall_at_k(rank(scores, 3), positives, ks=(1, 2, 3, 10)) == pytest.approx(expected)


def test_recall_at_k_validates_inputs():
    with pytest.raises(ValueError, match="2 positive sets for 1 queries"):
        recall_at_k(by_index(1, 3), [{0}, {1}])
    with pytest.raises(ValueError, match="ks must be"):
        recall_at_k(by_index(1, 3), [{0}], ks=())
    with pytest.raises(ValueError, match="no queries"):
        recall_at_k(np.zeros((0, 3)), [])


# --- map_at_k -------------------------------------------------------------------------------

# Ranked in index order. Query 0: relevant at ranks 1, 3, 5 and 6 (R = 4). Query 1: only rank 6.
RELEVANCE = np.array([[1, 0, 1, 0, 1, 1], [0, 0, 0, 0, 0, 1]], dtype=bool)


def test_map_at_k_worked_example():
    # Query 0, k = 5: P(1) = 1/1, P(3) = 2/3, P(5) = 3/5 at the relevant ranks.
    ap0 = (1 / 1 + 2 / 3 + 3 / 5) / 3  # "retrieved": divide by the 3 relevant retrieved
    assert ap0 == pytest.approx(34 / 45)
    # Query 1 has nothing relevant in its top 5: AP@5 = 0.
    assert map_at_k(by_index(2, 6), RELEVANCE, 5) == pytest.approx((ap0 + 0) / 2)
    # "min_k_relevant" divides by min(k, R) = min(5, 4) = 4 instead.
    assert map_at_k(by_index(2, 6), RELEVANCE, 5, normalization="min_k_relevant") == pytest.approx(
        ((1 + 2 / 3 + 3 / 5) / 4 + 0) / 2
    )
    # k = 1: query 0 hits at rank 1 (AP 1), query 1 misses (AP 0).
    assert map_at_k(by_index(2, 6), RELEVANCE, 1) == pytest.approx(0.5)


def test_map_at_k_larger_than_gallery_uses_whole_ranking():
    ap0 = (1 + 2 / 3 + 3 / 5 + 4 / 6) / 4
    ap1 = (1 / 6) / 1
    assert map_at_k(by_index(2, 6), RELEVANCE, 10) == pytest.approx((ap0 + ap1) / 2)
    # With R <= k both normalisations coincide.
    assert map_at_k(by_index(2, 6), RELEVANCE, 10, normalization="min_k_relevant") == pytest.approx(
        (ap0 + ap1) / 2
    )


def test_map_at_k_ties_and_input_kinds():
    scores = np.array([[1.0, 1.0, 0.0]])
    relevance = np.array([[False, True, False]])
    assert map_at_k(scores, relevance, 1) == 0.0  # the tie ranks index 0 first
    assert map_at_k(scores, relevance, 2) == pytest.approx(1 / 2)
    assert map_at_k(torch.tensor(scores).half(), torch.tensor(relevance), 2) == pytest.approx(0.5)
    assert map_at_k(rank(scores, 2), relevance, 2) == pytest.approx(0.5)


def test_map_at_k_validates_inputs():
    with pytest.raises(ValueError, match="boolean"):
        map_at_k(by_index(2, 6), RELEVANCE.astype(int), 5)
    with pytest.raises(ValueError, match=r"expected \[Q, G\]"):
        map_at_k(by_index(2, 6), RELEVANCE[:, :5], 5)
    with pytest.raises(ValueError, match="normalization"):
        map_at_k(by_index(2, 6), RELEVANCE, 5, normalization="r")


def test_average_precision_is_per_query():
    ranked = np.array([[True, False, True], [False, False, False], [False, True, True]])
    expected = [(1 + 2 / 3) / 2, 0.0, (1 / 2 + 2 / 3) / 2]
    np.testing.assert_allclose(average_precision_at_k(ranked), expected)
    np.testing.assert_allclose(
        average_precision_at_k(ranked, np.array([5, 0, 2])), [(1 + 2 / 3) / 3, 0.0, expected[2]]
    )


# --- odmap_at_k -----------------------------------------------------------------------------


def test_odmap_figure_2_example():
    # Query image: the person is inpainted away, the horse and the hurdle remain.
    removed, present = [{"person"}], [{"horse", "hurdle"}]
    gallery_mentions = [
        {"person", "horse", "hurdle"},  # "An equestrian jumps a hurdle": mentions a person, wrong
        {"horse"},  # "A horse in a field": right
        {"dog"},  # no present class: wrong
        {"horse", "hurdle"},  # right
        {"person"},  # "A woman standing": wrong
    ]
    scores = np.array([[0.9, 0.8, 0.7, 0.6, 0.5]])  # ranked relevance: 0 1 0 1 0
    result = odmap_at_k(scores, gallery_mentions, removed, present, ks=(1, 2, 4, 10))
    assert result == pytest.approx({1: 0.0, 2: 1 / 2, 4: (1 / 2 + 2 / 4) / 2, 10: 0.5})


def test_odmap_equals_map_on_dense_relevance():
    rng = np.random.default_rng(1)
    classes = ["person", "horse", "dog", "car", "cup"]
    gallery_mentions = [set(rng.choice(classes, rng.integers(0, 3))) for _ in range(40)]
    removed = [set(rng.choice(classes, 1)) for _ in range(8)]
    present = [set(rng.choice(classes, 2)) - r for r in removed]
    scores = rng.integers(0, 5, (8, 40)).astype(np.float32)  # with ties
    relevance = np.array(
        [
            [not (m & r) and bool(m & p) for m in gallery_mentions]
            for r, p in zip(removed, present, strict=True)
        ]
    )
    result = odmap_at_k(torch.tensor(scores), gallery_mentions, removed, present)
    assert result == pytest.approx({k: map_at_k(scores, relevance, k) for k in (1, 5, 10)})


def test_odmap_from_a_ranking_over_a_600k_gallery():
    num_gallery = 600_000
    gallery_mentions: list[frozenset[str]] = [frozenset()] * num_gallery
    gallery_mentions[599_999] = frozenset({"horse"})
    gallery_mentions[123] = frozenset({"person", "horse"})
    ranking = Ranking(np.array([[599_999, 123, 7]], dtype=np.int64), num_gallery)
    result = odmap_at_k(ranking, gallery_mentions, [{"person"}], [{"horse"}], ks=(1, 3))
    assert result == {1: 1.0, 3: 1.0}
    with pytest.raises(ValueError, match="gallery mention sets"):
        odmap_at_k(ranking, gallery_mentions[:10], [{"person"}], [{"horse"}], ks=(1,))
    with pytest.raises(ValueError, match="removed and"):
        odmap_at_k(ranking, gallery_mentions, [], [{"horse"}], ks=(1,))


# --- bias_at_k ------------------------------------------------------------------------------

GENDERS = ["male"] * 7 + ["female"] * 3 + ["neutral"] * 10


def test_bias_at_k_paper_logic():
    scores = np.stack(
        [
            -np.arange(20, dtype=np.float32),  # images 0..9 first: 7 male, 3 female
            np.arange(20, dtype=np.float32),  # images 19..10 first: all neutral
        ]
    )
    result = bias_at_k(scores, GENDERS, ks=(1, 8, 10, 25))
    # K=10: Δ = (7 - 3) / 10 = 0.4 and 0 (none gendered); K=8: (7 - 1) / 8 = 0.75;
    # K=25 > N: the whole gallery, (7 - 3) / 10 for both queries.
    assert result == pytest.approx({1: (1 + 0) / 2, 8: 0.75 / 2, 10: 0.4 / 2, 25: 0.4})
    assert bias_at_k(torch.tensor(scores), GENDERS, ks=(10,)) == pytest.approx({10: 0.2})
    assert set(bias_at_k(scores, GENDERS)) == set(range(1, 11))


def test_bias_at_k_is_signed_and_breaks_ties_by_index():
    genders = ["female"] * 7 + ["male"] * 3
    tied = np.zeros((1, 10))  # every image ties: ranked 0..9
    assert bias_at_k(tied, genders, ks=(10,)) == pytest.approx({10: -0.4})
    assert bias_at_k(rank(tied, 10), genders, ks=(1,)) == pytest.approx({1: -1.0})


def test_the_shares_count_the_top_k_by_hand():
    """Gallery of 6: images 0, 1 male, 2 female, 3..5 neutral. Query 0 ranks 0 1 2 3 4 5, query 1
    ranks 5 4 3 2 1 0 (only neutral images in its top 3), query 2 ties everywhere (index order,
    like query 0)."""
    genders = ["male", "male", "female", "neutral", "neutral", "neutral"]
    scores = np.stack([-np.arange(6.0), np.arange(6.0), np.zeros(6)])
    ks = (1, 2, 3, 4, 6, 9)
    # N_male, N_female of each query's top K: q0 and q2 (1,0) (2,0) (2,1) (2,1) (2,1) (2,1);
    # q1 (0,0) (0,0) (0,0) (0,1) (2,1) (2,1).
    gendered = {
        1: [1, 0, 1],
        2: [1, 0, 1],
        3: [1, 0, 1],
        4: [3 / 4, 1 / 4, 3 / 4],
        6: [1 / 2] * 3,
        9: [1 / 2] * 3,
    }  # fmt: skip  K = 9 > N: the whole gallery, 3 / 6
    assert gendered_share_at_k(scores, genders, ks) == pytest.approx(
        {k: np.mean(v) for k, v in gendered.items()}
    )
    # pooled over the queries: K=1..2 only men were seen; K=3: 4 of 4 + 2 = 4/6; K=4: 4 / 7
    assert male_share_at_k(scores, genders, ks) == pytest.approx(
        {1: 1.0, 2: 1.0, 3: 4 / 6, 4: 4 / 7, 6: 6 / 9, 9: 6 / 9}
    )
    # Bias@K is the mean of 2·(male share) − 1 over the queries that see a gendered image, 0
    # elsewhere: query 1's zeros dilute it while the male share does not move.
    assert bias_at_k(scores, genders, (1, 3)) == pytest.approx({1: 2 / 3, 3: (1 / 3 + 1 / 3) / 3})
    counts = top_k_genders(scores, genders, (3, 9))
    assert counts[9].depth == 6 and counts[3].depth == 3
    np.testing.assert_array_equal(counts[3].male_shares(), [2 / 3, np.nan, 2 / 3])
    np.testing.assert_array_equal(counts[3].gendered_shares(), [1.0, 0.0, 1.0])
    # the pooled share is the mean of the queries' shares weighted by their gendered shares
    for k, c in top_k_genders(scores, genders, ks).items():
        by_weight = weighted_mean(c.male_shares(), c.gendered_shares())
        assert by_weight == pytest.approx(male_share_at_k(scores, genders, (k,))[k])
    assert weight_metric("val/male_share_at_3") == "val/gendered_share_at_3"
    assert weight_metric("val/gendered_share_at_3") is None


def test_a_gallery_without_a_gendered_image_has_no_male_share():
    genders = ["neutral"] * 4
    assert np.isnan(male_share_at_k(by_index(2, 4), genders, (2,))[2])
    assert gendered_share_at_k(by_index(2, 4), genders, (2,)) == {2: 0.0}
    assert bias_at_k(by_index(2, 4), genders, (2,)) == {2: 0.0}
    assert np.isnan(weighted_mean(np.array([np.nan, 0.5]), np.array([0.0, 0.0])))
    with pytest.raises(ValueError, match=r"\(2,\) values for \(3,\) weights"):
        weighted_mean(np.zeros(2), np.zeros(3))


def test_gender_codes_are_one_numbering_for_labels_and_codes():
    codes = gender_bias.GENDER_CODES
    assert codes == {"male": 1, "female": -1, "neutral": 0}
    assert gender_bias.GENDERS == ("male", "female", "neutral") == get_args(Gender)
    assert set(TOYWORLD_PERSON_GENDERS) < set(codes)  # what ToyWorld draws is labelled
    assert all(gender_bias.GENDER_OF_CODE[code] == label for label, code in codes.items())
    gender_codes = gender_bias.gender_codes
    np.testing.assert_array_equal(gender_codes(["male", "female", "neutral"]), [1, -1, 0])
    assert gender_codes(np.array(["female", "male"])).dtype == np.int64
    np.testing.assert_array_equal(gender_codes(np.array([1, 0, -1])), [1, 0, -1])
    np.testing.assert_array_equal(gender_codes(torch.tensor([0, 1])), [0, 1])
    np.testing.assert_array_equal(gender_codes([np.int8(-1), 0]), [-1, 0])
    with pytest.raises(ValueError, match=r"^image_gender\[2\] = 'man' is not one of"):
        gender_codes(["male", "female", "man", "woman"])
    with pytest.raises(ValueError, match=r"^gender\[1\] = 2 is not one of"):
        gender_codes([1, 2], "gender")
    with pytest.raises(ValueError, match=r"image_gender\[0\] = True"):
        gender_codes([True])


def test_bias_at_k_validates_labels():
    with pytest.raises(ValueError, match=r"image_gender\[3\] = 'man'"):
        bias_at_k(by_index(1, 4), ["male", "female", "neutral", "man"])
    with pytest.raises(ValueError, match="3 gender labels for a gallery of 4"):
        bias_at_k(by_index(1, 4), ["male", "female", "neutral"])


# --- similarity_bias ------------------------------------------------------------------------


def test_similarity_bias_eq_9():
    images = np.array([[3.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0]])
    genders = ["male", "male", "female", "neutral"]
    # cos to [1, 0]: male 1 and 0 (mean 0.5), female 1/sqrt(2); the neutral image is ignored.
    expected = 0.5 - 1 / np.sqrt(2)
    assert similarity_bias(images, np.array([2.0, 0.0]), genders) == pytest.approx(expected)
    assert similarity_bias(
        torch.tensor(images, dtype=torch.float32), torch.tensor([[1.0, 0.0]]), genders
    ) == pytest.approx(expected)


def test_similarity_bias_validates_inputs():
    images = np.eye(3)
    with pytest.raises(ValueError, match="no female image"):
        similarity_bias(images, np.ones(3), ["male", "male", "neutral"])
    with pytest.raises(ValueError, match="no male image"):
        similarity_bias(images, np.ones(3), ["female", "neutral", "neutral"])
    with pytest.raises(ValueError, match=r"text_features \[D\] or \[1, D\]"):
        similarity_bias(images, np.ones((2, 3)), ["male", "female", "neutral"])
    with pytest.raises(ValueError, match="zero feature vector"):
        similarity_bias(images, np.zeros(3), ["male", "female", "neutral"])
    with pytest.raises(ValueError, match=r"image_gender\[0\] = 'M'"):
        similarity_bias(images, np.ones(3), ["M", "female", "neutral"])


def test_summed_recall_is_the_papers_sumr_in_percent():
    from xmr.metrics import summed_recall

    # EI-CLIP Table 1: R@1, 5, 10 image->text then text->image; SumR 302 (of rounded values).
    i2t, t2i = {1: 0.257, 5: 0.545, 10: 0.668}, {1: 0.284, 5: 0.571, 10: 0.694}
    assert summed_recall([i2t, t2i]) == pytest.approx(301.9)
    assert summed_recall([{1: 1.0, 5: 1.0, 10: 1.0}] * 2) == 600.0  # the top of its range
    assert summed_recall([]) == 0.0
    # One mapping of MLflow names (training's val metrics) or one per direction: the same sum.
    flat = {f"val/recall_{d}_at_{k}": r[k] for d, r in (("i2t", i2t), ("t2i", t2i)) for k in r}
    assert summed_recall([flat]) == pytest.approx(summed_recall([i2t, t2i]))
    # Computed from recall_at_k, as product retrieval does.
    scores = np.array([[0.9, 0.1, 0.0], [0.2, 0.1, 0.8]])
    i2t = recall_at_k(scores, [{0}, {1}], (1, 2))
    assert i2t == {1: 0.5, 2: 0.5} and summed_recall([i2t]) == 100.0
