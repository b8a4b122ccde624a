"""CLIP-clip (gender paper §3.2): per-dimension MI estimators, dimension selection, clipping."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import integrate, stats
from scipy.ndimage import gaussian_filter
from scipy.special import digamma

from xmr.debias import (
    MI_ESTIMATORS,
    apply_clip,
    clip_dims,
    clip_scores,
    histogram_mi,
    ksg_mi,
    mutual_information,
)
from xmr.metrics.gender_bias import gender_codes

EPS = np.finfo(float).eps
PLANTED = (3, 17, 42)


def planted(n: int = 2000, dims: int = 64, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``[n, dims]`` noise whose dims 3, 17, 42 (those below ``dims``) are shifted by
    the gender code."""
    rng = np.random.default_rng(seed)
    gender = rng.choice(["male", "female", "neutral"], n)
    x = rng.standard_normal((n, dims)).astype(np.float32)
    x[:, [d for d in PLANTED if d < dims]] += gender_codes(gender)[:, None]
    return x, gender


def reference_histogram_mi(x: np.ndarray, y: np.ndarray, bins: int, sigma: float) -> np.ndarray:
    """The reference code's loop: one np.histogram2d + gaussian_filter per dimension."""
    out = []
    for column in x.T:
        joint = np.histogram2d(column, y, bins=(bins, bins))[0]
        joint = gaussian_filter(joint, sigma=sigma, mode="constant") + EPS
        joint /= joint.sum()
        px, py = joint.sum(axis=1), joint.sum(axis=0)
        out.append(
            np.sum(joint * np.log(joint)) - np.sum(px * np.log(px)) - np.sum(py * np.log(py))
        )
    return np.array(out)


def brute_force_ksg(x: np.ndarray, y: np.ndarray, k: int) -> float:
    """Mixed KSG of one column ``x`` with categorical ``y``, sample by sample, O(N²)."""
    sizes = {c: np.sum(y == c) for c in np.unique(y)}
    keep = np.array([sizes[c] > 1 for c in y])
    x, y = x[keep], y[keep]
    n = len(x)
    total = 0.0
    for i in range(n):
        same = y == y[i]
        others = same.copy()
        others[i] = False
        rho = np.sort(np.abs(x[others] - x[i]))[min(k, others.sum()) - 1]
        if rho == 0:
            k_i, n_x = np.sum(same & (x == x[i])), np.sum(x == x[i])
        else:
            k_i, n_x = min(k, others.sum()), np.sum(np.abs(x - x[i]) < rho)
        total += digamma(k_i) + np.log(n) - digamma(n_x) - digamma(same.sum())
    return total / n


# ---- both estimators ----


@pytest.mark.parametrize("estimator", MI_ESTIMATORS)
def test_planted_dims_rank_first(estimator):
    x, gender = planted()
    scores = clip_scores(x, gender, estimator)
    assert scores.shape == (64,) and scores.dtype == np.float64
    assert set(clip_dims(x, gender, 3, estimator).tolist()) == set(PLANTED)
    noise = np.delete(scores, PLANTED)
    assert scores[list(PLANTED)].min() > 4 * noise.max()


@pytest.mark.parametrize("estimator", MI_ESTIMATORS)
def test_deterministic_and_torch_input(estimator):
    x, gender = planted(n=500, dims=8)
    labels = gender_codes(gender)
    first = mutual_information(x, labels, estimator)
    np.testing.assert_array_equal(first, mutual_information(x, labels, estimator))
    tensor = torch.from_numpy(x).requires_grad_(True)
    np.testing.assert_array_equal(
        first, mutual_information(tensor, torch.from_numpy(labels), estimator)
    )


def test_mutual_information_dispatch_and_errors():
    x, gender = planted(n=300, dims=4)
    y = gender_codes(gender)
    np.testing.assert_array_equal(
        mutual_information(x, y, "histogram", bins=8, sigma=0.5),
        histogram_mi(x, y, bins=8, sigma=0.5),
    )
    np.testing.assert_array_equal(
        mutual_information(x, y, "ksg", neighbors=5), ksg_mi(x, y, neighbors=5)
    )
    with pytest.raises(ValueError, match=r"'kde'.*\('histogram', 'ksg'\)"):
        mutual_information(x, y, "kde")
    with pytest.raises(ValueError, match=r"'neighbors'.*'histogram'.*bins, label_bins, sigma"):
        mutual_information(x, y, "histogram", neighbors=3)
    with pytest.raises(ValueError, match=r"'bins'.*'ksg'.*neighbors"):
        mutual_information(x, y, "ksg", bins=3)
    with pytest.raises(ValueError, match="3 labels for 300"):
        mutual_information(x, y[:3])
    with pytest.raises(ValueError, match="NaN"):
        mutual_information(np.full((300, 4), np.nan), y)
    with pytest.raises(ValueError, match="integers"):
        mutual_information(x, y.astype(float))


# ---- histogram ----


def test_histogram_matches_reference_loop():
    rng = np.random.default_rng(0)
    y = rng.integers(-1, 2, 700)
    x = rng.standard_normal((700, 5)).astype(np.float32)
    x[:, 1] = 3.0  # constant column: numpy bins it over [2.5, 3.5]
    x[:, 2] = rng.integers(0, 65, 700)  # values on the bin edges, the maximum included
    x[:, 3] = np.round(x[:, 3], 1)  # decimal grid: edges that round
    for bins, sigma in ((64, 1.0), (10, 0.0), (7, 2.5)):
        np.testing.assert_allclose(
            histogram_mi(x, y, bins=bins, sigma=sigma),
            reference_histogram_mi(x, y, bins, sigma),
            rtol=0,
            atol=1e-13,
        )


def test_histogram_binary_copy_is_ln2():
    y = np.repeat([0, 1], 50)
    mi = histogram_mi(y[:, None], y, bins=2, label_bins=2, sigma=0)
    np.testing.assert_allclose(mi, [np.log(2)], rtol=0, atol=1e-9)


def test_histogram_balanced_independent_table_is_zero():
    x = np.repeat([0, 1, 0, 1], 25)  # every (x, y) cell holds 25 samples
    y = np.repeat([0, 0, 1, 1], 25)
    np.testing.assert_allclose(
        histogram_mi(x[:, None], y, bins=2, label_bins=2, sigma=0), [0], atol=1e-9
    )


def test_histogram_asymmetric_table_by_hand():
    # counts (x, y): (0,0) 30, (0,1) 10, (1,0) 20, (1,1) 40 of 100
    x = np.repeat([0, 0, 1, 1], [30, 10, 20, 40])
    y = np.repeat([0, 1, 0, 1], [30, 10, 20, 40])
    # p(x=0) = .4, p(x=1) = .6, p(y=0) = p(y=1) = .5
    by_hand = (
        0.3 * np.log(0.3 / (0.4 * 0.5))
        + 0.1 * np.log(0.1 / (0.4 * 0.5))
        + 0.2 * np.log(0.2 / (0.6 * 0.5))
        + 0.4 * np.log(0.4 / (0.6 * 0.5))
    )
    mi = histogram_mi(x[:, None], y, bins=2, label_bins=2, sigma=0)
    np.testing.assert_allclose(mi, [by_hand], rtol=0, atol=1e-9)


def test_histogram_smoothing_changes_the_estimate():
    y = np.repeat([0, 1], 50)
    sharp = histogram_mi(y[:, None], y, bins=2, label_bins=2, sigma=0)[0]
    smooth = histogram_mi(y[:, None], y, bins=2, label_bins=2, sigma=1)[0]
    assert smooth < sharp - 0.1  # blurring a 2×2 table mixes the cells
    table = gaussian_filter(np.diag([50.0, 50.0]), sigma=1, mode="constant") + EPS
    p = table / table.sum()
    by_hand = np.sum(p * np.log(p / np.outer(p.sum(axis=1), p.sum(axis=0))))
    np.testing.assert_allclose(smooth, by_hand, rtol=0, atol=1e-12)


def test_histogram_rejects_bad_params():
    x, y = np.zeros((4, 1)), np.array([0, 0, 1, 1])
    with pytest.raises(ValueError, match="bins"):
        histogram_mi(x, y, bins=0)
    with pytest.raises(ValueError, match="label_bins"):
        histogram_mi(x, y, label_bins=2.5)
    with pytest.raises(ValueError, match="sigma"):
        histogram_mi(x, y, sigma=-1)


# ---- ksg ----


def test_ksg_discrete_copy_gives_the_tie_formula():
    n = 2000
    y = np.repeat([0, 1], n // 2)
    # every sample ties with its class: k̃ = n_x = n_y = n/2, so Î = ψ(n/2) + log n − 2ψ(n/2)
    expected = np.log(n) - digamma(n // 2)
    mi = ksg_mi(y[:, None].astype(np.float32), y)
    np.testing.assert_allclose(mi, [expected], rtol=1e-12)
    assert abs(mi[0] - np.log(2)) < 1e-3


def test_ksg_independent_is_near_zero_and_not_clipped():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 2000)
    mi = ksg_mi(rng.standard_normal((2000, 16)), y)
    assert abs(mi.mean()) < 0.01
    assert np.abs(mi).max() < 0.05  # the k=3 estimate's spread is about 0.01 here
    assert (mi < 0).any()  # raw estimates: no clipping at 0


def test_ksg_gaussian_mixture_matches_integrated_mi():
    mu = 1.0  # x | y ~ N(±mu, 1), y a fair coin: I = h(x) − h(x | y)
    density = lambda t: 0.5 * (stats.norm.pdf(t, mu) + stats.norm.pdf(t, -mu))  # noqa: E731
    h_x = integrate.quad(lambda t: -density(t) * np.log(density(t)), -15, 15)[0]
    true = h_x - 0.5 * np.log(2 * np.pi * np.e)
    rng = np.random.default_rng(11)
    y = rng.integers(0, 2, 4000)
    x = rng.standard_normal(4000) + np.where(y == 1, mu, -mu)
    assert abs(ksg_mi(x[:, None], y)[0] - true) < 0.03


def test_ksg_matches_brute_force_with_ties_and_small_classes():
    rng = np.random.default_rng(5)
    n = 160
    y = rng.integers(-1, 2, n)
    y[:3], y[3:5], y[5] = 5, 6, 7  # a class of 3 (k becomes 2), of 2 (k = 1), a singleton
    z = rng.standard_normal(n) + 0.5 * y
    x = np.stack(
        [
            z,  # continuous
            np.round(z * 2) / 4,  # quantised on a binary grid: many ties
            np.round(z, 1),  # decimal grid: distances that round
            np.where(rng.random(n) < 0.5, 0.0, z),  # discrete-continuous mixture
            np.zeros(n),  # constant: every ρ is 0
        ],
        axis=1,
    )
    for k in (1, 3):
        expected = [brute_force_ksg(column, y, k) for column in x.T]
        np.testing.assert_allclose(ksg_mi(x, y, neighbors=k), expected, rtol=0, atol=1e-12)


def test_ksg_rejects_bad_input():
    with pytest.raises(ValueError, match="at least twice"):
        ksg_mi(np.zeros((3, 2)), np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="neighbors"):
        ksg_mi(np.zeros((4, 2)), np.array([0, 0, 1, 1]), neighbors=0)


# ---- clip_dims, apply_clip ----


def test_clip_dims_order_and_ties():
    x, gender = planted(n=1000, dims=64)
    signal, weak = x[:, 3], 0.3 * x[:, 17] + x[:, 5]
    features = np.stack([weak, signal, x[:, 8], signal, weak], axis=1)
    # dims 1 and 3 (and 0 and 4) are copies: equal MI, lower index first
    np.testing.assert_array_equal(clip_dims(features, gender, 4), [1, 3, 0, 4])
    assert clip_dims(features, gender, 4).dtype == np.int64
    np.testing.assert_array_equal(
        clip_dims(features, gender, 4, "ksg", neighbors=5),
        np.argsort(-clip_scores(features, gender, "ksg", neighbors=5), kind="stable")[:4],
    )


def test_clip_dims_validates():
    x, gender = planted(n=200, dims=64)
    empty = clip_dims(x, gender, 0)
    assert empty.shape == (0,) and empty.dtype == np.int64
    with pytest.raises(ValueError, match="m=64 but the features have 64 dims"):
        clip_dims(x, gender, 64)
    with pytest.raises(ValueError, match="m=-1 but the features have 64 dims"):
        clip_dims(x, gender, -1)
    with pytest.raises(ValueError, match="199 gender labels for 200"):
        clip_dims(x, gender[:199], 3)
    with pytest.raises(ValueError, match=r"two distinct gender labels.*'male'"):
        clip_dims(x, ["male"] * 200, 3)
    with pytest.raises(ValueError, match=r"gender\[4\] = 'x'"):
        clip_dims(x, [*gender[:4], "x", *gender[5:]], 3)
    with pytest.raises(ValueError, match="unknown MI estimator"):
        clip_dims(x, gender, 0, "mine")
    with pytest.raises(ValueError, match="'bins'"):
        clip_dims(x, gender, 0, "ksg", bins=4)


def test_clip_scores_match_mutual_information():
    x, gender = planted(n=400, dims=6)
    np.testing.assert_array_equal(
        clip_scores(x, gender, "histogram", bins=16),
        mutual_information(x, gender_codes(gender), "histogram", bins=16),
    )


def test_apply_clip_removes_columns_in_order():
    x = np.arange(24, dtype=np.float32).reshape(3, 8)
    out = apply_clip(x, np.array([6, 1, 2]))
    assert out.dtype == np.float32 and out.shape == (3, 5)
    np.testing.assert_array_equal(out, x[:, [0, 3, 4, 5, 7]])
    np.testing.assert_array_equal(apply_clip(x, np.empty(0, np.int64)), x)
    np.testing.assert_array_equal(apply_clip(x[0], [0]), x[0, 1:])  # one [D] vector
    with pytest.raises(ValueError, match=r"\[0, 8\)"):
        apply_clip(x, [8])
    with pytest.raises(ValueError, match="repeated"):
        apply_clip(x, [2, 2])


def test_apply_clip_dot_products_and_renormalize():
    rng = np.random.default_rng(2)
    v = rng.standard_normal((5, 16)).astype(np.float32)
    c = rng.standard_normal((3, 16)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    z = np.array([4, 0, 9])
    # without renormalising: the original similarity minus the clipped dimensions' part
    np.testing.assert_allclose(
        apply_clip(v, z) @ apply_clip(c, z).T, v @ c.T - v[:, z] @ c[:, z].T, atol=1e-6
    )
    unit = apply_clip(v, z, renormalize=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1, atol=1e-6)
    kept = np.delete(v, z, axis=1)
    cosine = kept @ np.delete(c, z, axis=1).T
    cosine /= np.outer(
        np.linalg.norm(kept, axis=1), np.linalg.norm(np.delete(c, z, axis=1), axis=1)
    )
    np.testing.assert_allclose(unit @ apply_clip(c, z, renormalize=True).T, cosine, atol=1e-6)
    zero_row = np.array([[1.0, 0.0, 0.0], [0.0, 3.0, 4.0]])
    np.testing.assert_array_equal(
        apply_clip(zero_row, [0], renormalize=True), [[0.0, 0.0], [0.6, 0.8]]
    )


def test_apply_clip_torch_input():
    x = torch.arange(12, dtype=torch.float32).reshape(2, 6).requires_grad_(True)
    out = apply_clip(x, torch.tensor([5, 0]))
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, [[1, 2, 3, 4], [7, 8, 9, 10]])
    assert apply_clip(x.to(torch.bfloat16), [0]).dtype == np.float32


def test_clip_pipeline_torch_features():
    x, gender = planted(n=600, dims=64)
    dims = clip_dims(torch.from_numpy(x), gender, 3)
    np.testing.assert_array_equal(dims, clip_dims(x, gender, 3))
    assert apply_clip(torch.from_numpy(x), dims).shape == (600, 61)
