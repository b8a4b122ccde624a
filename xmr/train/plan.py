"""What a training run will do, before anything runs: its data, its length, its micro-batches.

:func:`plan_run` reads the training data of a :class:`~xmr.train.config.TrainConfig` (D, and
the D′ sample), checks it and sets the run's length (:func:`run_length`), all before any
worker starts. The run's micro-batches are *slots*: slot ``g`` is micro-batch ``k = g mod S``
of epoch ``e = g div S`` (``S`` slots per epoch over all workers, :func:`slots_of_steps`), and
:class:`SlotDecoder` turns a slot into the decoded batch the run's
:class:`~xmr.train.batching.EpochPlan` gives it. Ray's loader (:mod:`xmr.train.loader`) maps
:class:`DecodeSlots`, the decoder as a pipeline stage, over the slots with Ray's executor, in
actors of their own; :func:`local_batches` runs the same stage with the local executor, for a
training without Ray (:func:`xmr.train.fit.fit` with local hooks).

No Ray here: a plan is plain data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from xmr.data import read_dataset
from xmr.models import create_model
from xmr.models.base import Corpus
from xmr.models.batch import TrainBatch
from xmr.pipeline import LocalExecutor, Resources, Stage
from xmr.pipeline.stage import Batch
from xmr.storage import StoragePath
from xmr.text import require_tagger
from xmr.toyworld.default_world import default_toyworld
from xmr.train.batching import GROUP_COLUMN, EpochPlan, pairs_together
from xmr.train.config import TrainConfig
from xmr.train.data import TrainingData, collate, ratio_shortfall, training_data

PairCounts = tuple[int, int]
"""A batch's hard-negative pair counts: rows of a pair, rows batched beside their partner."""
SLOT_COLUMN = "slot"  # the slot's number in the run
PAIRS_COLUMN = "pairs_together"  # the batch's (rows of a pair, rows beside their partner)


@dataclass(frozen=True)
class RunPlan:
    """A run's inputs, checked: ``config`` with its ``epochs`` resolved (``--steps``: the
    epochs they need), the dataset folder ``root``, the training ``data`` and its ``corpus``
    (captions and entities, for the models' vocabularies), ``grouped`` (a BiAug D′: batches
    keep its groups whole) and ``steps_per_epoch`` (optimiser steps in a full epoch, ≥ 1)."""

    config: TrainConfig
    root: StoragePath
    data: TrainingData
    corpus: Corpus
    grouped: bool
    steps_per_epoch: int

    @property
    def total_steps(self) -> int:
        return self.config.total_steps(self.steps_per_epoch)


def default_world(config: TrainConfig) -> Path:
    """The embedded ToyWorld for ``config``: the shop world (product entities) for EI-CLIP."""
    mode = "shop" if config.model.family == "eiclip" else "scene"
    return default_toyworld(config.seed, mode=mode)


def plan_run(config: TrainConfig) -> RunPlan:
    """Read and check ``config``'s training data and size the run; prints a line when D′ had
    fewer pairs than the ratio asked for.

    Raises:
        ValueError / FileNotFoundError: bad data or flags, in one line naming them.
    """
    root = config.data if config.data else default_world(config)
    records = read_dataset(config.dataset, root, config.split)
    if not records:
        raise ValueError(f"{root}: split {config.split!r} has no usable images")
    data = training_data(
        records, config.synth, config.synth_ratio, config.seed, synth_only=config.synth_only
    )
    if not config.hard_negatives and data.synth_mode != "biaug":
        raise ValueError(
            f"--no-hard-negatives applies to a BiAug D′ (`xmr synth --mode biaug`); {config.synth} "
            f"was built by the {data.synth_mode} mode"
        )
    if shortfall := ratio_shortfall(data, config.synth_ratio):
        print(shortfall)
    corpus = data.corpus()
    if not corpus.entities:  # the final ODmAP tags captions in the chief worker
        require_tagger()
    grouped = data.synth_mode == "biaug"  # batches built from whole groups
    steps_per_epoch, epochs = run_length(data.table, config, grouped)
    if steps_per_epoch < 1:
        raise ValueError(
            f"{data.table.num_rows} training pairs give no full batch of "
            f"{config.per_worker_batch} per worker; lower --batch-size"
        )
    return RunPlan(replace(config, epochs=epochs), root, data, corpus, grouped, steps_per_epoch)


def training_plan(table: pa.Table, config: TrainConfig, grouped: bool) -> EpochPlan:
    """The run's :class:`~xmr.train.batching.EpochPlan` of micro-batches: by whole BiAug groups
    when ``grouped`` (and ``config.hard_negatives``), by rows otherwise."""
    return EpochPlan.for_table(
        table, config.micro_batch, config.seed, grouped, config.hard_negatives
    )


def slots_of_steps(config: TrainConfig, steps: int) -> int:
    """Micro-batches of ``steps`` optimiser steps over all workers: steps × workers ×
    accumulation steps."""
    return steps * config.workers * config.accum_steps


def run_length(table: pa.Table, config: TrainConfig, grouped: bool) -> tuple[int, int]:
    """``(steps per epoch, epochs)`` of the run.

    Steps per epoch: the micro-batches of the run's epoch that has fewest (whole groups fill
    some a row short or leave rows over, :func:`~xmr.train.batching.batch_groups`; by rows,
    every epoch has as many) over workers × accumulation steps; 0 when the data fill no step.
    Epochs: ``config.epochs``, or with ``config.steps``, ``ceil(steps / steps per epoch)``
    (grouped, the fewest over those epochs: looked for until the epochs needed are all seen).
    """
    plan = training_plan(table, config, grouped)
    per_step = config.workers * config.accum_steps
    fewest, seen = len(plan.batches(0)) // per_step, 1  # over the first `seen` epochs
    while True:
        by_steps = config.steps is not None and fewest > 0
        epochs = -(-config.steps // fewest) if by_steps else config.epochs
        if not grouped or fewest == 0 or seen >= epochs:
            return fewest, epochs
        fewest = min(fewest, len(plan.batches(seen)) // per_step)
        seen += 1


class SlotDecoder:
    """Slot numbers of a run to decoded micro-batches.

    Built once per process: the family's transform and tokenizer (the model, on the CPU), the
    training ``table`` and the run's :func:`training_plan`. :meth:`batch` reads slot ``g``'s
    pairs, decodes the images, applies the train transform (seeded per pair,
    :func:`~xmr.train.data.augment_seeds`) and tokenises; the same slot gives the same batch in
    any process.
    """

    def __init__(
        self,
        config: TrainConfig,
        table: pa.Table,
        corpus: Corpus,
        slots_per_epoch: int,
        grouped: bool,
    ) -> None:
        self.config = config
        self.table = table
        self.model = create_model(config.model, seed=config.seed, corpus=corpus)
        self.slots_per_epoch = slots_per_epoch
        self.grouped = grouped
        self.plan = training_plan(table, config, grouped)

    def epoch_of(self, slot: int) -> int:
        return slot // self.slots_per_epoch

    def batch(self, slot: int) -> tuple[TrainBatch, PairCounts]:
        """Slot ``slot``'s micro-batch and its :data:`PairCounts`
        (:func:`~xmr.train.batching.pairs_together` of a grouped table's batch, else 0, 0)."""
        epoch, k = divmod(slot, self.slots_per_epoch)
        take = self.plan.batches(epoch)[k]
        rows = self.table.take(pa.array(take, pa.int64())).to_pydict()
        batch = collate(rows, self.model, seed=self.config.seed, epoch=epoch)
        pairs = pairs_together(rows[GROUP_COLUMN]) if self.grouped else (0, 0)
        return batch, pairs


class DecodeSlots(Stage):
    """The training loader's stage: slot numbers in, one decoded micro-batch per slot out
    (:class:`SlotDecoder`, built in :meth:`setup`).

    Input column ``slot`` (int slot numbers of the run); output: one row per slot of the start
    epoch or later, none for an earlier slot (``{}`` when the batch has none). Its columns are
    the batch's :meth:`~xmr.models.batch.TrainBatch.to_columns` (``pixels``
    ``[n, B, 3, H, W]`` float32, ``text`` ``[n, B, L]``, labels ``[n, B]``, ...) and
    ``pairs_together`` ``[n, 2]`` int64 (:data:`PairCounts`). ``inputs`` (the training table
    and corpus) and ``start_epoch`` are asked once, at setup: on Ray, from the object store (put
    there once for every loader actor) and the run's start clock, which a resumed worker sets
    before it iterates.
    ``torch_threads``: set torch's threads at setup (1 in a loader actor; None in a process
    that trains too).
    """

    name = "decode-slots"

    def __init__(
        self,
        config: TrainConfig,
        inputs: Callable[[], Sequence[Any]],
        slots_per_epoch: int,
        grouped: bool,
        start_epoch: Callable[[], int],
        *,
        cpus: float = 0.0,
        torch_threads: int | None = None,
    ) -> None:
        super().__init__(Resources(cpus=cpus), batch_size=1)
        self.config, self.inputs, self.start_epoch = config, inputs, start_epoch
        self.slots_per_epoch, self.grouped, self.torch_threads = (
            slots_per_epoch,
            grouped,
            torch_threads,
        )

    def setup(self) -> None:
        if self.torch_threads:
            torch.set_num_threads(self.torch_threads)
        table, corpus = self.inputs()
        self.decoder = SlotDecoder(self.config, table, corpus, self.slots_per_epoch, self.grouped)
        self.start = int(self.start_epoch())

    def process(self, batch: Batch) -> Batch:
        rows = []
        for slot in batch[SLOT_COLUMN]:
            if self.decoder.epoch_of(int(slot)) < self.start:
                continue
            decoded, pairs = self.decoder.batch(int(slot))
            rows.append({**decoded.to_columns(), PAIRS_COLUMN: np.array(pairs, np.int64)})
        return {name: np.stack([row[name] for row in rows]) for name in rows[0]} if rows else {}


def slot_batches(columns: Batch) -> Iterator[tuple[TrainBatch, PairCounts]]:
    """The micro-batches in one output batch of :class:`DecodeSlots`, in order."""
    for i in range(len(columns[PAIRS_COLUMN]) if columns else 0):
        row = {name: value[i] for name, value in columns.items()}
        grouped, together = (int(n) for n in row.pop(PAIRS_COLUMN))
        yield TrainBatch.from_columns(row), (grouped, together)


def local_batches(plan: RunPlan, start_epoch: int) -> Iterator[tuple[TrainBatch, PairCounts]]:
    """Every slot's batch from epoch ``start_epoch`` on, decoded in this process by
    :class:`DecodeSlots` on the local executor, in order: the batches of one worker that trains
    alone."""
    per_epoch = slots_of_steps(plan.config, plan.steps_per_epoch)
    stage = DecodeSlots(plan.config, partial(tuple, (plan.data.table, plan.corpus)), per_epoch,
                        plan.grouped, partial(int, start_epoch))  # fmt: skip
    slots = range(start_epoch * per_epoch, slots_of_steps(plan.config, plan.total_steps))
    for columns in LocalExecutor().stream([{SLOT_COLUMN: slot} for slot in slots], [(stage, 1)]):
        yield from slot_batches(columns)
