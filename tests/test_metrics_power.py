"""The power calculation that sizes ToyWorld's gender split (:mod:`xmr.metrics.power`)."""

from __future__ import annotations

import numpy as np
import pytest

from xmr.compare.bootstrap import mean_intervals
from xmr.metrics import (
    TRAINED_DELTA_SD,
    delta_sd,
    detectable_effect,
    queries_for_power,
)
from xmr.toyworld import load_config


def test_the_sizes_give_the_stated_power_in_simulation() -> None:
    """Queries whose top 10 are men with probability (1 + 0.1) / 2: a Bias@10 of 0.1. With the
    calculated number of queries, the bootstrap interval excludes 0 in about 80 % of worlds."""
    k, effect = 10, 0.1
    n = queries_for_power(effect, delta_sd(k))
    assert n == 79
    assert detectable_effect(n, delta_sd(k)) == pytest.approx(effect, rel=0.01)
    rng = np.random.default_rng(0)
    worlds = 300
    excluded = 0
    for world in range(worlds):
        men = rng.binomial(k, (1 + effect) / 2, size=n)
        interval = mean_intervals({"bias": (2 * men - k) / k}, resamples=400, seed=world)["bias"]
        excluded += interval.low > 0
    assert 0.7 <= excluded / worlds <= 0.9  # 0.8 ± 3 standard errors (0.023)
    # Under no bias, the delta's spread is the one the sizes assume.
    null = (2 * rng.binomial(k, 0.5, size=200_000) - k) / k
    assert null.std() == pytest.approx(delta_sd(k), rel=0.01)


def test_the_default_gender_split_has_the_power_it_documents() -> None:
    """100 images a linked class, 4 of 5 captions naming it: 0.1 counting captions, 0.2
    counting each image's captions as one."""
    config = load_config()
    per_class = config.splits["gender_test"] // len(config.gender_classes)
    assert per_class == 100
    assert queries_for_power(0.1, TRAINED_DELTA_SD) <= per_class * 4
    assert detectable_effect(per_class, TRAINED_DELTA_SD) < 0.2


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: queries_for_power(0.0, 0.3), "effect must be non-zero"),
        (lambda: queries_for_power(0.1, 0.3, confidence=1.0), "confidence and power"),
        (lambda: detectable_effect(0, 0.3), "n must be >= 1"),
        (lambda: delta_sd(0), "K must be >= 1"),
    ],
)
def test_bad_arguments_are_refused(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
