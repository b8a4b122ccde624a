"""Gradient accumulation that keeps in-batch negatives (``xmr train --accum-steps k``).

Plain accumulation (k backward passes of micro-batch losses) would give each micro-batch only
its own ``B / k`` candidates: for every family here that changes the objective. Instead, as
GradCache (Gao et al. 2021) and open_clip's ``accum_freq`` do, one step over ``k``
micro-batches of this worker:

1. computes the features of each micro-batch without gradients (activations freed at once);
2. gathers them, with every worker's (:mod:`xmr.models.gather`), and computes the loss of the
   whole global batch once, backpropagating into the loss's own parameters (temperature, BLIP's
   ITM head) and into the cached features;
3. runs each micro-batch forward again, with gradients and the same random draws as in 1
   (dropout), and backpropagates the cached features' gradients through it.

The gradients equal those of one step on the ``k``-times larger batch (tested against it), while
the encoders hold one micro-batch's activations at a time; the loss's own part (for BLIP the ITM
forward over the mined pairs) still runs over the global batch at once. Workers' gradients are
then averaged explicitly (:func:`average_gradients`): DDP's hooks run only when its wrapper is
called, which this path does not do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from xmr.models.batch import TrainBatch
from xmr.models.gather import gather_features, world_size
from xmr.models.objective import Objective


def accumulated_backward(
    objective: Objective,
    micro_batches: Sequence[TrainBatch],
    *,
    scale: Callable[[torch.Tensor], torch.Tensor] = lambda loss: loss,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> dict[str, torch.Tensor]:
    """Backpropagate the loss of ``micro_batches`` (this worker's ``k`` micro-batches, on the
    objective's device) as one batch; parameter gradients accumulate into ``.grad``.

    ``scale``: applied to the loss before backward (a gradient scaler's ``scale``);
    ``autocast``: the context each forward runs in. Returns the loss parts, as ``forward``.
    """
    states, cached = [], []
    with torch.no_grad():
        for batch in micro_batches:
            states.append(_rng_state())
            with autocast():
                cached.append(objective.features(batch))
    sizes = [len(batch) for batch in micro_batches]
    leaves = {
        key: torch.cat([c[key] for c in cached]).requires_grad_(cached[0][key].is_floating_point())
        for key in cached[0]
    }
    del cached
    rows, local = gather_features(leaves)
    with autocast():
        out = objective.loss_from(rows, local)
    scale(out["loss"]).backward()
    start = 0
    for batch, state, size in zip(micro_batches, states, sizes, strict=True):
        _set_rng_state(state)
        with autocast():
            features = objective.features(batch)
        pairs = [
            (features[key], leaf.grad[start : start + size])
            for key, leaf in leaves.items()
            if leaf.grad is not None
        ]
        torch.autograd.backward([f for f, _ in pairs], [g for _, g in pairs])
        start += size
    return out


def average_gradients(module: torch.nn.Module) -> None:
    """Average the parameters' gradients over the workers (one all-reduce); a parameter that no
    worker gave a gradient keeps none. Nothing outside a process group."""
    if world_size() == 1:
        return
    params = [p for p in module.parameters() if p.requires_grad]
    like = params[0]
    present = torch.tensor([float(p.grad is not None) for p in params]).to(like)
    grads = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
    flat = torch.cat([*grads, present])  # then which parameters have one: a single all-reduce
    dist.all_reduce(flat)
    has_grad = flat[-len(params) :].tolist()
    flat /= world_size()
    offset = 0
    for param, used in zip(params, has_grad, strict=True):
        numel = param.numel()
        param.grad = flat[offset : offset + numel].view_as(param).clone() if used else None
        offset += numel


def _rng_state() -> tuple[torch.Tensor, list[torch.Tensor]]:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple[torch.Tensor, list[torch.Tensor]]) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda:
        torch.cuda.set_rng_state_all(cuda)
