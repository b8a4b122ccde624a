"""The global batch of a data-parallel step: every worker's rows, gathered with gradients.

In-batch negatives are what a contrastive objective learns from, so W workers × ``B/W`` pairs
must see the ``B`` candidates of one worker × ``B`` pairs (odmap §4.1 and the EI-CLIP and
BLIP recipes train with the global batch). Each objective encodes its worker's rows, gathers
the embeddings and labels of all workers with :func:`gather_rows` (rank order: the
concatenation of the workers' batches), and computes the loss over the gathered batch on every
worker, as open_clip does with ``gather_with_grad`` and no ``local_loss``.

Gradients: a gathered tensor sends back to each worker's own rows the *sum over workers* of
their losses' gradients. With DDP averaging the parameter gradients over the W workers, a loss
that every worker computes in full over the gathered batch (InfoNCE, FairSample, the hinge
triplet) gets exactly the gradient of one worker on the concatenated batch; a loss over this
worker's rows only (BLIP's ITM pairs) is written as a sum over them times ``W / N`` (``N``
terms in the global batch), :func:`local_share`. Workers may hold different numbers of rows
(BiAug's whole-group batches): rows are padded to the largest for the exchange and cut after.

Outside a process group (one worker, evaluation, tests) everything here is the identity. Plain
``torch.distributed``: the Ray Train worker sets the group up, nothing here imports Ray.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.distributed as dist


def world_size() -> int:
    """Workers in the default process group (1 outside one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class _GatherRows(torch.autograd.Function):
    """``[B_r, ...]`` on each rank -> ``[sum B_r, ...]``; backward: the gradient summed over
    ranks, this rank's rows."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, sizes: list[int], rank: int) -> torch.Tensor:  # type: ignore[override]
        padded = tensor.new_zeros((max(sizes), *tensor.shape[1:]))
        padded[: len(tensor)] = tensor
        parts = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(parts, padded)
        ctx.sizes, ctx.rank = sizes, rank
        return torch.cat([part[:n] for part, n in zip(parts, sizes, strict=True)])

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)  # sum over ranks of d(loss_r) / d(gathered rows)
        start = sum(ctx.sizes[: ctx.rank])
        return grad[start : start + ctx.sizes[ctx.rank]], None, None


def gather_rows(*tensors: torch.Tensor) -> tuple[list[torch.Tensor], slice]:
    """Gather tensors of this worker's ``B_r`` rows (dim 0) from every worker.

    Args:
        tensors: each ``[B_r, ...]``, the same ``B_r`` and, across ranks, the same trailing
            shape and dtype; float tensors keep their gradient (to this rank's rows, summed
            over ranks), others (ids, labels, bool masks) are plain copies.

    Returns:
        ``([sum_r B_r, ...] per tensor, in rank order, identical on every rank)`` and the
        slice of this worker's rows in them. Without a process group: the tensors themselves
        and ``slice(0, B_r)``.
    """
    count = len(tensors[0]) if tensors else 0
    if any(len(t) != count for t in tensors):
        raise ValueError(f"gather_rows: tensors of {[len(t) for t in tensors]} rows, not one count")
    if world_size() == 1:
        return list(tensors), slice(0, count)
    rank, device = dist.get_rank(), tensors[0].device
    sizes_tensor = torch.zeros(world_size(), dtype=torch.int64, device=device)
    sizes_tensor[rank] = count
    dist.all_reduce(sizes_tensor)
    sizes = [int(n) for n in sizes_tensor.tolist()]
    gathered = []
    for tensor in tensors:
        if tensor.dtype == torch.bool:  # not every backend moves bools
            gathered.append(_GatherRows.apply(tensor.to(torch.uint8), sizes, rank).bool())
        else:
            gathered.append(_GatherRows.apply(tensor, sizes, rank))
    start = sum(sizes[:rank])
    return gathered, slice(start, start + count)


def gather_features(features: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], slice]:
    """:func:`gather_rows` over a dict of row-aligned tensors (an objective's features)."""
    gathered, local = gather_rows(*features.values())
    return dict(zip(features, gathered, strict=True)), local


def local_share(local_sum: torch.Tensor, global_count: int | float) -> torch.Tensor:
    """A mean over the global batch, of terms this worker computes only for its own rows.

    ``local_sum``: this worker's sum of the terms; ``global_count``: the number of terms over
    all workers. Returns ``local_sum · W / global_count``: its average over the W workers (and
    so DDP's averaged gradient) is the global mean; with one worker, the plain mean.
    """
    return local_sum * world_size() / max(float(global_count), 1.0)


def mean_over_workers(values: Sequence[float], device: torch.device) -> list[float]:
    """The average of each value over the workers (for logging a loss that :func:`local_share`
    split); the values themselves outside a process group."""
    if world_size() == 1:
        return list(values)
    tensor = torch.tensor(list(values), dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return (tensor / world_size()).tolist()
