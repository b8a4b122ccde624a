"""Ray Train's worker loop: the run (:func:`xmr.train.fit.fit`) with Ray's hooks.

Each worker trains on its shard of the loader's batches (:mod:`xmr.train.loader`), DDP across
workers; the chief (rank 0) evaluates and writes each epoch's checkpoint, which
``ray.train.report`` persists in the run's storage. A restarted worker group, or a rerun with
the same run name, resumes from the latest checkpoint.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray.train
import ray.train.torch
import torch
from ray.experimental.tqdm_ray import tqdm

from xmr.logs import quiet_console
from xmr.models import Corpus
from xmr.models.batch import TrainBatch
from xmr.storage import StoragePath, storage_path
from xmr.train.config import TrainConfig
from xmr.train.fit import FitData, FitHooks, Progress, fit
from xmr.train.loader import batches_of
from xmr.train.plan import PairCounts

PREFETCH_BATCHES = 2  # decoded micro-batches each worker fetches ahead of its step


class RayHooks(FitHooks):
    """:func:`fit`'s hooks in a Ray Train worker: its rank and device, DDP, Ray's checkpoints
    and reports; ``best_checkpoint`` is the run's ``best.pt`` (the driver exports it),
    ``bar``: the chief's progress as a bar that the driver's terminal draws (else lines)."""

    def __init__(self, best_checkpoint: str, bar: bool) -> None:
        context = ray.train.get_context()
        self.rank, self.world_size = context.get_world_rank(), context.get_world_size()
        self.device = ray.train.torch.get_device()
        self._best, self._bar = best_checkpoint, bar

    def prepare(self, objective: torch.nn.Module) -> torch.nn.Module:
        return ray.train.torch.prepare_model(
            objective, parallel_strategy_kwargs={"find_unused_parameters": True}
        )

    @contextlib.contextmanager
    def latest_checkpoint(self) -> Iterator[Path | None]:
        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            yield None
            return
        with checkpoint.as_directory() as directory:
            yield Path(directory)

    def report(self, metrics: dict[str, float], checkpoint: Path | None, name: str) -> None:
        saved = None if checkpoint is None else ray.train.Checkpoint.from_directory(checkpoint)
        ray.train.report(metrics, checkpoint=saved, checkpoint_dir_name=name)

    def best_weights(self) -> StoragePath:
        return storage_path(self._best)

    def progress(self, steps: int, desc: str) -> Progress:
        return tqdm(total=steps, desc=desc) if self._bar else super().progress(steps, desc)


def train_loop(loop_config: dict[str, Any]) -> None:
    """Ray Train's ``train_loop_per_worker``.

    ``loop_config``: ``config`` (:meth:`TrainConfig.to_dict`, its ``epochs`` resolved),
    ``data_root``, ``steps_per_epoch``, ``corpus`` (``captions`` and ``entities``) and
    ``grouped`` (:class:`~xmr.train.fit.FitData`), ``progress`` (``"bar"`` or ``"lines"``),
    ``clock`` (the loader's :class:`~xmr.train.loader.StartClock`), ``best_checkpoint`` (the
    run's ``best.pt``).
    """
    quiet_console()  # after Ray Train configured this worker's logging
    config = TrainConfig.from_dict(loop_config["config"])
    hooks = RayHooks(loop_config["best_checkpoint"], loop_config["progress"] == "bar")
    if hooks.device.type == "cpu":
        torch.set_num_threads(max(1, config.cpus_per_worker))
    clock = loop_config["clock"]

    def batches(start_epoch: int) -> Iterator[tuple[TrainBatch, PairCounts]]:
        # Every rank, before it first asks for a batch: the loader skips the epochs done.
        ray.get(clock.set.remote(start_epoch))
        return batches_of(ray.train.get_dataset_shard("train"), PREFETCH_BATCHES)

    data = FitData(
        root=storage_path(loop_config["data_root"]),
        corpus=Corpus(**loop_config["corpus"]),
        steps_per_epoch=int(loop_config["steps_per_epoch"]),
        grouped=bool(loop_config["grouped"]),
        batches=batches,
    )
    fit(config, data, hooks)
