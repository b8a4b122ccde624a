"""How many queries a mean needs before its confidence interval can tell an effect from 0.

The sizes of ToyWorld's gender split come from here (``default.yaml``'s ``gender_test``): a
linked object's Bias@K is the mean of its queries' Δ_K (:func:`~xmr.metrics.bias_deltas`), and
its interval (:mod:`xmr.compare.bootstrap`) should exclude 0 when the model's bias is at least
``effect``. For a mean of ``n`` independent values of standard deviation ``sd``, a two-sided
interval at ``confidence`` excludes 0 with probability ``power`` when

    n >= ((z[(1 + confidence) / 2] + z[power]) * sd / effect) ** 2

(the normal approximation, which the percentile bootstrap follows at these sizes).

What ``sd`` is for Δ_K: it is at most 1 (Δ_K lies in [-1, 1]). When a query's top K images
are men or women by fair coin flips (a balanced gallery, an unbiased model),
``Δ_K = (2M − K) / K`` with ``M ~ Binomial(K, 1/2)``, so ``sd = 1 / sqrt(K)``
(:func:`delta_sd`), the null model's spread. A trained model spreads its queries far more, as
a query's top K tends to be of one gender: on ToyWorld's gender split, 3-epoch ``xmr-tiny``
models gave Δ_10 a standard deviation of 0.51–0.75 per linked class
(``docs/results/gender.md``), the figure :data:`TRAINED_DELTA_SD` keeps for sizing. The
captions of one image are near-duplicates once made gender-neutral; counting images rather than
captions as ``n`` is the cautious bound.

ToyWorld's default gender split, 100 images a linked class (about 400 gender-neutral captions
that mention the class), detects a per-class Bias@10 of 0.1 counting captions, 0.2 counting
images:

>>> queries_for_power(0.1, TRAINED_DELTA_SD)
385
>>> [round(detectable_effect(n, TRAINED_DELTA_SD), 3) for n in (400, 100)]
[0.098, 0.196]
>>> queries_for_power(0.1, delta_sd(10))  # the coin-flip null would need far fewer
79
"""

from __future__ import annotations

import math
from statistics import NormalDist

TRAINED_DELTA_SD = 0.7
"""A query's Δ_10 standard deviation as trained ``xmr-tiny`` models showed it on ToyWorld's
gender split (0.51–0.75 per linked class, ``docs/results/gender.md``): what the split is sized
for."""


def _z_sum(confidence: float, power: float) -> float:
    if not 0 < confidence < 1 or not 0 < power < 1:
        raise ValueError(f"confidence and power must be in (0, 1), got {confidence}, {power}")
    normal = NormalDist()
    return normal.inv_cdf((1 + confidence) / 2) + normal.inv_cdf(power)


def delta_sd(k: int) -> float:
    """Standard deviation of one query's Δ_K when its top ``k`` images are gendered by fair
    coin flips: ``1 / sqrt(k)`` (the null model of a balanced gallery)."""
    if k < 1:
        raise ValueError(f"K must be >= 1, got {k}")
    return 1 / math.sqrt(k)


def queries_for_power(
    effect: float, sd: float, *, confidence: float = 0.95, power: float = 0.8
) -> int:
    """Independent queries a mean of values with standard deviation ``sd`` needs for its
    two-sided ``confidence`` interval to exclude 0 with probability ``power`` when the true mean
    is ``effect`` (same units as ``sd``; its sign does not matter)."""
    if effect == 0 or sd <= 0:
        raise ValueError(f"effect must be non-zero and sd positive, got {effect}, {sd}")
    return math.ceil((_z_sum(confidence, power) * sd / abs(effect)) ** 2)


def detectable_effect(n: int, sd: float, *, confidence: float = 0.95, power: float = 0.8) -> float:
    """The smallest true mean that ``n`` independent queries of standard deviation ``sd`` tell
    from 0 (two-sided ``confidence`` interval excluding 0) with probability ``power``: the inverse
    of :func:`queries_for_power`."""
    if n < 1 or sd <= 0:
        raise ValueError(f"n must be >= 1 and sd positive, got {n}, {sd}")
    return _z_sum(confidence, power) * sd / math.sqrt(n)
