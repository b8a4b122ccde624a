"""Optimisers and learning-rate schedules of :class:`~xmr.train.config.OptimConfig`."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from xmr.train.config import OptimConfig


def make_optimizer(
    params: Iterable[torch.nn.Parameter], optim: OptimConfig
) -> torch.optim.Optimizer:
    """Adam or AdamW over the trainable ``params``."""
    trainable = [p for p in params if p.requires_grad]
    cls = torch.optim.AdamW if optim.name == "adamw" else torch.optim.Adam
    return cls(trainable, lr=optim.lr, weight_decay=optim.weight_decay)


LR_STEP_PERIOD = "train/lr_step_period"
"""A finished run's ``step`` schedule period in optimiser steps (:func:`step_period`), among its
final metrics: what a control matched to its steps takes (``--lr-step-period``)."""


def step_period(optim: OptimConfig, steps_per_epoch: int) -> int:
    """The ``step`` schedule's period in optimiser steps: ``optim.step_period`` when set, else
    ``step_epochs × steps_per_epoch`` rounded (at least 1).

    >>> step_period(OptimConfig(step_epochs=2), 195), step_period(OptimConfig(step_period=390), 156)
    (390, 390)
    """
    if optim.step_period is not None:
        return optim.step_period
    return max(1, round(optim.step_epochs * steps_per_epoch))


def lr_factor(step: int, optim: OptimConfig, steps_per_epoch: int, total_steps: int) -> float:
    """The multiplier of the base rate after ``step`` optimiser steps.

    Linear warm-up over ``warmup_steps``, then ``step``: ``gamma ** floor(step /``
    :func:`step_period` ``)``; ``cosine``: ``½(1 + cos(π·progress))`` over the remaining steps
    of ``total_steps``; ``constant``: 1.
    """
    if step < optim.warmup_steps:
        return (step + 1) / optim.warmup_steps
    if optim.schedule == "step":
        return optim.gamma ** (step // step_period(optim, steps_per_epoch))
    if optim.schedule == "cosine":
        span = max(1, total_steps - optim.warmup_steps)
        progress = min(1.0, (step - optim.warmup_steps) / span)
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0


def make_scheduler(
    optimizer: torch.optim.Optimizer, optim: OptimConfig, steps_per_epoch: int, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A per-step scheduler following :func:`lr_factor` over a run of ``total_steps``."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, optim, steps_per_epoch, total_steps)
    )
