"""The training loader: every epoch's batches decoded ahead of the workers by Ray Data actors.

The dataset handed to Ray Train holds one row per micro-batch *slot* of the whole run
(:mod:`xmr.train.plan`). :class:`~xmr.train.plan.DecodeSlots`, the loader's pipeline stage, runs
in Ray Data actors (:func:`~xmr.pipeline.ray_executor.map_stage`) and turns each slot into the
decoded micro-batch the run's plan gives it, one row of tensor columns. So every epoch is a
fresh global shuffle, the same for the same seed whatever the number of loader actors;
decoding runs in processes of its own (on a cluster, wherever Ray places the actors), never in
a training worker's threads; and the run is one Ray Data execution, so the actors start once
and the next epoch's batches are decoded while this one's last steps run. The same stage runs
in-process for a training without Ray (:func:`~xmr.train.plan.local_batches`).

A worker (re)starting at epoch ``s`` (a resumed run, a restarted worker group) sets the run's
:class:`StartClock` to ``s`` before it starts iterating; the stage reads it when it is set up
and passes over the slots of earlier epochs without decoding them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import partial

import pyarrow as pa
import ray
import ray.data

from xmr.models.base import Corpus
from xmr.models.batch import TrainBatch
from xmr.pipeline.ray_executor import map_stage
from xmr.pipeline.ray_idle import pause_when_idle
from xmr.train.config import TrainConfig
from xmr.train.plan import SLOT_COLUMN, DecodeSlots, PairCounts, slot_batches, slots_of_steps

SLOTS_PER_BLOCK = 4  # slots in each input block: an actor's unit of work


@ray.remote(num_cpus=0)
class StartClock:
    """The epoch (0-based) the training workers start from, for the loader's stage to read."""

    def __init__(self) -> None:
        self._epoch = 0

    def set(self, epoch: int) -> None:
        self._epoch = epoch

    def get(self) -> int:
        return self._epoch


def clock_epoch(clock: ray.actor.ActorHandle) -> int:
    """The epoch a :class:`StartClock` holds now (what a loader actor asks at setup)."""
    return int(ray.get(clock.get.remote()))


def spare_loaders(
    node_cpus: Sequence[float], workers: int, cpus_per_worker: int
) -> tuple[int, str]:
    """How many loader actors the nodes can spare beside the training workers: each node's CPUs
    less one (its raylet, a driver, Ray Data's coordinator), summed over the nodes, less the
    workers' CPUs; at least 1. Returns the count and the sum that gave it, for the run's plan.

    >>> spare_loaders([16.0], workers=1, cpus_per_worker=8)
    (7, '16 CPUs − 1 − 1 worker × 8 CPUs')
    >>> spare_loaders([2.0], workers=1, cpus_per_worker=1)
    (1, '2 CPUs − 1 − 1 worker × 1 CPU, at least 1')
    """
    nodes = [cpus for cpus in node_cpus if cpus > 0]
    spare = int(sum(cpus - 1 for cpus in nodes)) - workers * cpus_per_worker
    total = (
        f"{sum(nodes):g} CPUs − 1"
        if len(nodes) == 1
        else (f"{len(nodes)} nodes' {sum(nodes):g} CPUs − 1 each")
    )
    why = (f"{total} − {workers} worker{'s' * (workers > 1)} × {cpus_per_worker} "
           f"CPU{'s' * (cpus_per_worker > 1)}")  # fmt: skip
    return (spare, why) if spare >= 1 else (1, f"{why}, at least 1")


def loader_count(config: TrainConfig) -> tuple[int, str]:
    """How many loader actors ``config`` runs and why: ``config.loaders`` when set, else
    :func:`spare_loaders` of the live Ray nodes' CPUs."""
    if config.loaders:
        return config.loaders, f"--loaders {config.loaders}"
    nodes = [node["Resources"].get("CPU", 0.0) for node in ray.nodes() if node["Alive"]]
    count, why = spare_loaders(nodes, config.workers, config.cpus_per_worker)
    return count, f"as many as the nodes spare: {why}"


def training_dataset(
    table: pa.Table,
    config: TrainConfig,
    corpus: Corpus,
    clock: ray.actor.ActorHandle,
    steps_per_epoch: int,
    grouped: bool = False,
) -> ray.data.Dataset:
    """Ray Train's ``train`` dataset: the run's slots (as many as its
    :meth:`~xmr.train.config.TrainConfig.total_steps` need: a last epoch that ``--steps`` cuts
    short has fewer) mapped by :func:`loader_count` :class:`~xmr.train.plan.DecodeSlots` actors of
    ``config.loader_cpus`` CPUs each (``grouped``: the table's BiAug groups stay whole in a
    micro-batch). Its execution pauses while the loader is ahead of the workers
    (:func:`~xmr.pipeline.ray_idle.pause_when_idle`)."""
    per_epoch = slots_of_steps(config, steps_per_epoch)
    slots = slots_of_steps(config, config.total_steps(steps_per_epoch))
    # Blocks made here: no read task, which would need a CPU that the workers may all hold.
    items = [{SLOT_COLUMN: slot} for slot in range(slots)]
    dataset = ray.data.from_items(items, override_num_blocks=-(-slots // SLOTS_PER_BLOCK))
    inputs = partial(ray.get, [ray.put(table), ray.put(corpus)])  # one copy for every actor
    stage = DecodeSlots(config, inputs, per_epoch, grouped, partial(clock_epoch, clock),
                        cpus=config.loader_cpus, torch_threads=1)  # fmt: skip
    return map_stage(pause_when_idle(dataset), stage, actors=loader_count(config)[0])


def batches_of(
    shard: ray.data.DataIterator, prefetch: int
) -> Iterator[tuple[TrainBatch, PairCounts]]:
    """The worker's side: its slots' batches, all epochs from the start epoch on, as
    :class:`~xmr.models.batch.TrainBatch` on the CPU with the batch's
    :func:`~xmr.train.batching.pairs_together` counts, ``prefetch`` batches fetched ahead."""
    for row in shard.iter_batches(batch_size=1, batch_format="numpy", prefetch_batches=prefetch):
        yield from slot_batches(row)
