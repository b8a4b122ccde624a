"""One training epoch as a plain PyTorch function: no Ray, no data loader of its own.

:func:`train_one_epoch` (in the spirit of open_clip's ``train_one_epoch``) steps an objective
over an iterator of micro-batches and times the epoch. The run (:func:`xmr.train.fit.fit`)
calls it with the batches Ray Data decodes ahead, or decoded in its own process; the plain
loop of ``bench/bench_train_throughput.py`` calls it with batches collated in its own process,
so the benchmark compares data paths and nothing else.

Throughput is measured where it is steady. Before the first step a loader may decode many
batches ahead (its actors start while the worker builds its model), and the steps that
consume that backlog run at the training step's pace, not the loader's: a rate over the whole
epoch flatters a loader-bound run. :attr:`EpochResult.steady_samples_per_s` is the rate over
the second half of the epoch's steps, by when a head start of up to half an epoch is spent;
:attr:`EpochResult.samples_per_s_incl_warmup` counts every pair over the whole epoch, the wait
for the first batch included.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import torch

from xmr.models.batch import TrainBatch
from xmr.train.accumulate import accumulated_backward, average_gradients
from xmr.train.precision import autocast

Item = TypeVar("Item")


@dataclass(frozen=True)
class EpochResult:
    """What one worker's epoch did and how fast.

    ``losses``: each loss part's mean over the steps (this worker's share of the global batch's
    loss; :func:`~xmr.models.gather.mean_over_workers` makes it the global one).
    ``seconds``: from the call to the end of the last step, the wait for the first batch
    included. ``first_step_s``: to the end of the first step. ``loader_wait_s``: time spent
    waiting for batches after the first step (the loader's shortfall; 0 when it keeps ahead).
    ``steady_samples_per_s``: pairs/s over the second half of the steps (:func:`steady_rate`).
    """

    steps: int
    samples: int
    losses: dict[str, float]
    seconds: float
    first_step_s: float
    loader_wait_s: float
    steady_samples_per_s: float

    @property
    def samples_per_s_incl_warmup(self) -> float:
        """Pairs/s over the whole epoch, the wait for the first batch included."""
        return self.samples / self.seconds if self.seconds > 0 else 0.0


def train_one_epoch(
    objective: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    scaler: torch.amp.GradScaler,
    batches: Iterable[TrainBatch],
    *,
    device: torch.device,
    precision: str = "fp32",
    accum_steps: int = 1,
    on_step: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> EpochResult:
    """Train ``objective`` for one epoch over ``batches``.

    Args:
        objective: the family's objective (``model.objective(...)``), already on ``device``; a
            DDP wrapper around it is fine (one micro-batch per step goes through it; with
            ``accum_steps`` > 1 the gradients are averaged over workers explicitly).
        optimizer, scheduler, scaler: stepped once per optimiser step (the scheduler per step).
        batches: this worker's micro-batches on the CPU, ``accum_steps`` per optimiser step; a
            last incomplete group is dropped.
        device, precision: where and in which precision (``fp32``, ``bf16``, ``fp16``) the
            steps run (:func:`~xmr.train.precision.autocast`).
        on_step: called after every optimiser step (a progress bar's update).
        clock: seconds, monotonic (tests pass a fake one).

    Returns:
        :class:`EpochResult`. The loss parts stay on the device until the epoch ends, so no
        step waits for the GPU to finish the one before (the step times taken meanwhile are
        when each step was queued; the epoch's end waits for all of them).
    """
    inner = getattr(objective, "module", objective)  # the objective inside a DDP wrapper
    totals: dict[str, torch.Tensor] = {}
    samples: list[int] = []  # pairs of each step
    ends: list[float] = []  # clock at the end of each step
    start = clock()
    wait = 0.0
    groups = _in_groups(batches, accum_steps)
    while True:
        asked = clock()
        group = next(groups, None)
        if group is None:
            break
        if ends:  # the first batch's wait is the warm-up, counted in first_step_s
            wait += clock() - asked
        micro = [batch.to(device, non_blocking=True) for batch in group]
        optimizer.zero_grad(set_to_none=True)
        if len(micro) == 1:  # through DDP, which averages the gradients
            with autocast(precision, device):
                out = objective(micro[0])
            scaler.scale(out["loss"]).backward()
        else:  # the global batch of k micro-batches (xmr.train.accumulate)
            out = accumulated_backward(
                inner, micro, scale=scaler.scale, autocast=partial(autocast, precision, device)
            )
            average_gradients(inner)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        for key, value in out.items():
            part = value.detach().double()
            totals[key] = totals[key] + part if key in totals else part
        samples.append(sum(len(batch) for batch in micro))
        ends.append(clock())
        if on_step is not None:
            on_step()
    steps = len(samples)
    losses = {key: float(total) / steps for key, total in totals.items()}  # waits for the GPU
    seconds = (clock() if steps else start) - start
    return EpochResult(
        steps=steps,
        samples=sum(samples),
        losses=losses,
        seconds=seconds,
        first_step_s=ends[0] - start if steps else 0.0,
        loader_wait_s=wait,
        steady_samples_per_s=steady_rate(samples, ends, last_end=start + seconds),
    )


def steady_rate(samples: list[int], ends: list[float], *, last_end: float | None = None) -> float:
    """Pairs/s over the second half of an epoch: the pairs of its last ``n // 2`` steps over
    the time from the end of the step before them to the last step's end (``last_end`` when
    later: the epoch's end, once the GPU finished); 0 for fewer than 2 steps.

    ``samples``, ``ends``: per step, its pairs and the clock at its end (seconds).

    >>> steady_rate([8, 8, 8, 8, 8], [10.0, 10.1, 10.2, 11.2, 12.2])
    8.0
    """
    n = len(samples)
    if n < 2:
        return 0.0
    opens = (n - 1) // 2  # the step whose end opens the window
    end = ends[-1] if last_end is None else max(last_end, ends[-1])
    seconds = end - ends[opens]
    return sum(samples[opens + 1 :]) / seconds if seconds > 0 else 0.0


def _in_groups(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    """``items`` in lists of ``size`` (an optimiser step's micro-batches); a shorter last
    list is dropped (every rank has as many items, so every rank drops it)."""
    group: list[Item] = []
    for item in items:
        group.append(item)
        if len(group) == size:
            yield group
            group = []
