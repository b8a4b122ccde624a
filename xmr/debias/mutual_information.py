"""Per-dimension mutual information between continuous features and a discrete label.

Both estimators take ``features`` ``[N, D]`` (numpy array or torch tensor, any real dtype; they
are read as float64) and integer ``labels`` ``[N]`` and return ``I(X_d; Y)`` for every dimension
``d`` as float64 ``[D]``, in nats. They only ever look at one feature column at a time: this is
the marginal MI of each dimension with the label (gender paper §3.2, eq. 7), not a joint one.

- ``histogram``: the plug-in estimate on a smoothed 2-D histogram of (feature value, label code),
  the estimator of the gender paper's reference code. It is biased (upwards by the finite-sample
  noise of the cells, downwards by the smoothing), so read its values as scores to rank
  dimensions by. The label *codes* are binned as numbers, so with smoothing their numeric
  spacing matters a little.
- ``ksg``: the mixed KSG estimator of Gao, Kannan, Oh & Viswanath (NeurIPS 2017) with the label
  treated as categorical. Consistent for continuous, discrete and mixed features; the raw
  estimate is returned, which can be slightly negative for (nearly) independent dimensions.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np
from scipy.ndimage import gaussian_filter
from scipy.special import digamma

from xmr.metrics.arrays import as_numpy

MI_ESTIMATORS = ("histogram", "ksg")

EPS = np.finfo(float).eps
"""Added to every smoothed histogram cell before normalising (as the reference code does)."""


def _check(features: object, labels: object) -> tuple[np.ndarray, np.ndarray]:
    """float64 ``[N, D]`` features and int64 ``[N]`` labels, or ``ValueError``."""
    x = as_numpy(features)
    if x.ndim != 2:
        raise ValueError(f"features must be [N, D], got shape {x.shape}")
    if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)):
        raise ValueError(f"features must be real numbers, got dtype {x.dtype}")
    x = x.astype(np.float64, copy=False)
    if x.shape[0] == 0:
        raise ValueError("features have no rows")
    if not np.isfinite(x).all():
        raise ValueError("features contain NaN or infinite values")
    y = as_numpy(labels)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"labels must be integers [N], got dtype {y.dtype} shape {y.shape}")
    if len(y) != len(x):
        raise ValueError(f"{len(y)} labels for {len(x)} feature rows")
    return x, y.astype(np.int64, copy=False)


def _bin_index(x: np.ndarray, bins: int) -> np.ndarray:
    """np.histogram's bin of every value, per column of ``x`` ``[N, C]``: int64 ``[N, C]``.

    Each column gets ``bins`` equal bins spanning its own [min, max] (±0.5 when constant), the
    last bin closed, exactly as ``np.histogram2d`` with an integer bin count: the arithmetic
    guess is corrected against the very edges ``np.linspace`` gives numpy.
    """
    lo, hi = x.min(axis=0), x.max(axis=0)
    flat = lo == hi
    lo, hi = np.where(flat, lo - 0.5, lo), np.where(flat, hi + 0.5, hi)
    edges = np.linspace(lo, hi, bins + 1, axis=1)  # [C, bins + 1]
    idx = np.floor((x - lo) / (hi - lo) * bins).astype(np.int64)
    np.clip(idx, 0, bins - 1, out=idx)
    cols = np.arange(x.shape[1])
    idx -= x < edges[cols, idx]  # one bin too far right
    idx += (x >= edges[cols, idx + 1]) & (idx < bins - 1)  # one bin too far left
    return idx


def histogram_mi(
    features: object,
    labels: object,
    *,
    bins: int = 64,
    label_bins: int | None = None,
    sigma: float = 1.0,
) -> np.ndarray:
    """Plug-in MI of each feature dimension with the label on a smoothed joint histogram.

    Per dimension: ``np.histogram2d(x, labels, bins=(bins, label_bins or bins))`` (each axis
    spans the observed [min, max]), ``scipy.ndimage.gaussian_filter(h, sigma, mode="constant")``
    (``sigma`` in bins; 0 = no smoothing), ``+ EPS`` in every cell, normalised to a joint ``p``;
    ``MI = Σ p log p − Σ p_x log p_x − Σ p_y log p_y``. This is the reference code's estimator,
    computed for all dimensions at once. ``features`` ``[N, D]``, ``labels`` int ``[N]``;
    returns float64 ``[D]`` in nats.
    """
    x, y = _check(features, labels)
    label_bins = bins if label_bins is None else label_bins
    for name, value in (("bins", bins), ("label_bins", label_bins)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not sigma >= 0:
        raise ValueError(f"sigma must be >= 0, got {sigma!r}")
    d = x.shape[1]
    xbin = _bin_index(x, bins)  # [N, D]
    ybin = _bin_index(y[:, None].astype(np.float64), label_bins)[:, 0]  # [N]
    cell = (np.arange(d) * bins + xbin) * label_bins + ybin[:, None]
    joint = np.bincount(cell.ravel(), minlength=d * bins * label_bins).astype(np.float64)
    joint = joint.reshape(d, bins, label_bins)
    if sigma > 0:
        joint = gaussian_filter(joint, sigma=(0, sigma, sigma), mode="constant")
    joint += EPS
    joint /= joint.sum(axis=(1, 2), keepdims=True)
    px, py = joint.sum(axis=2), joint.sum(axis=1)
    return (
        (joint * np.log(joint)).sum(axis=(1, 2))
        - (px * np.log(px)).sum(axis=1)
        - (py * np.log(py)).sum(axis=1)
    )


def _first_true(rows: np.ndarray, m: int, pred: Callable) -> np.ndarray:
    """Vectorised binary search with ``m`` queries per row of the sorted ``rows`` ``[D, n]``.

    ``pred`` takes one value of row ``d`` per query ``[d, q]`` (``[D, m]``) and says, per query,
    whether it holds there (bools ``[D, m]``); along each row it must go false→true. Returns,
    per query, the first position ``i`` in ``[0, n]`` where it holds (``n`` if none), int64
    ``[D, m]``.
    """
    d, n = rows.shape
    flat = rows.ravel()
    base = (np.arange(d) * n)[:, None]
    lo = np.zeros((d, m), np.int64)
    hi = np.full((d, m), n, np.int64)
    for _ in range(n.bit_length()):
        mid = (lo + hi) // 2
        hit = pred(flat[base + np.minimum(mid, n - 1)])
        open_ = lo < hi
        hi = np.where(open_ & hit, mid, hi)
        lo = np.where(open_ & ~hit, mid + 1, lo)
    return lo


def _count_equal(rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """int64 ``[D, M]``: how many entries of sorted row ``d`` of ``rows`` equal ``values[d, m]``."""
    out = np.empty(values.shape, np.int64)
    for d, (row, value) in enumerate(zip(rows, values, strict=True)):
        out[d] = np.searchsorted(row, value, "right") - np.searchsorted(row, value, "left")
    return out


def ksg_mi(features: object, labels: object, *, neighbors: int = 3) -> np.ndarray:
    """Mixed KSG estimate (Gao et al. 2017) of each feature dimension's MI with the label.

    The label is categorical: samples with different labels are infinitely far apart, so the
    joint ``k``-th nearest neighbour of sample ``i`` is its ``k``-th nearest neighbour in ``x``
    among the samples with its label, at distance ``ρ_i`` (``k = neighbors``). Then, as in Gao
    et al.'s reference algorithm,

    - ``ρ_i > 0``: ``k̃_i = k``, ``n_x,i`` = samples with ``|x_j − x_i| < ρ_i`` (``i`` included);
    - ``ρ_i = 0`` (ties, e.g. quantised features): ``k̃_i`` = samples of ``i``'s label with
      ``x_j = x_i``, ``n_x,i`` = samples with ``x_j = x_i`` (both including ``i``);

    ``n_y,i`` = the size of ``i``'s label class, and
    ``Î = mean_i [ψ(k̃_i) + log N − ψ(n_x,i) − ψ(n_y,i)]`` (ψ the digamma function).

    Distances are float differences (exact equality for ties, no tolerance). A class with
    ``k`` or fewer samples uses ``k = class size − 1`` for its samples (as scikit-learn's
    ``mutual_info_classif`` does); samples whose label occurs once are dropped before anything
    is computed (``N`` and ``n_x`` count the rest). The raw estimate is returned: it is not
    clipped at 0 and can be slightly negative for a dimension independent of the label.
    ``features`` ``[N, D]``, ``labels`` int ``[N]``; returns float64 ``[D]`` in nats.
    """
    x, y = _check(features, labels)
    if isinstance(neighbors, bool) or not isinstance(neighbors, int | np.integer) or neighbors < 1:
        raise ValueError(f"neighbors must be a positive integer, got {neighbors!r}")
    _, codes, sizes = np.unique(y, return_inverse=True, return_counts=True)
    keep = sizes[codes] > 1
    if not keep.any():
        raise ValueError("ksg needs a label that occurs at least twice")
    x, codes = np.ascontiguousarray(x[keep].T), codes[keep]  # [D, N]: a row per dimension
    d, n = x.shape
    rows = np.sort(x, axis=1)  # [D, N]: every kept sample, each dimension sorted
    total = np.zeros(d)
    for c in np.flatnonzero(sizes > 1):
        s = np.sort(x[:, codes == c], axis=1)  # [D, n_c]: this class's samples
        n_c = s.shape[1]
        k = min(int(neighbors), n_c - 1)
        # ρ = k-th smallest of L_j = s[p] − s[p−j], R_j = s[p+j] − s[p] (j = 1..k, +inf past
        # the ends) = min over i of max(L_i, R_{k−i}), L_0 = R_0 = 0.
        pad = np.concatenate([np.full((d, k), -np.inf), s, np.full((d, k), np.inf)], axis=1)
        rho = np.full((d, n_c), np.inf)
        for i in range(k + 1):
            left = s - pad[:, k - i : k - i + n_c]
            right = pad[:, 2 * k - i : 2 * k - i + n_c] - s
            np.minimum(rho, np.maximum(left, right), out=rho)
        # ρ > 0: the samples with |x_j − x_i| < ρ are the sorted row's index range
        # [first with x_i − x_j < ρ, first with x_j − x_i ≥ ρ) (both monotone along the row).
        ties = rho == 0
        r = np.where(ties, 1.0, rho)
        start = _first_true(rows, n_c, lambda v, s=s, r=r: s - v < r)
        stop = _first_true(rows, n_c, lambda v, s=s, r=r: v - s >= r)
        n_x = (stop - start).astype(np.float64)
        k_tilde = np.full((d, n_c), float(k))
        if ties.any():
            n_x[ties] = _count_equal(rows, s)[ties]
            k_tilde[ties] = _count_equal(s, s)[ties]
        total += (digamma(k_tilde) - digamma(n_x)).sum(axis=1) - n_c * digamma(n_c)
    return total / n + np.log(n)


_ESTIMATORS: dict[str, Callable[..., np.ndarray]] = {"histogram": histogram_mi, "ksg": ksg_mi}


def estimator_function(estimator: str, params: dict) -> Callable[..., np.ndarray]:
    """The function of ``estimator`` after checking ``params`` are among its keywords.

    ``ValueError`` for an unknown estimator (listing :data:`MI_ESTIMATORS`) or an unknown
    parameter (naming it and the ones that estimator accepts).
    """
    if estimator not in _ESTIMATORS:
        raise ValueError(f"unknown MI estimator {estimator!r}; choose one of {MI_ESTIMATORS}")
    function = _ESTIMATORS[estimator]
    accepted = [
        p.name
        for p in inspect.signature(function).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    for name in params:
        if name not in accepted:
            raise ValueError(
                f"unknown parameter {name!r} for the {estimator!r} MI estimator; "
                f"it accepts {', '.join(accepted)}"
            )
    return function


def mutual_information(
    features: object, labels: object, estimator: str = "histogram", **params: object
) -> np.ndarray:
    """MI of every feature dimension with the label, float64 ``[D]`` in nats.

    ``features`` ``[N, D]`` (numpy or torch), ``labels`` int ``[N]``; ``estimator`` one of
    :data:`MI_ESTIMATORS` (``"histogram"``: :func:`histogram_mi`, ``"ksg"``: :func:`ksg_mi`),
    ``params`` that estimator's keyword arguments.
    """
    return estimator_function(estimator, params)(features, labels, **params)
