"""The per-worker training loop that Ray Train runs on every data-parallel worker.

Each epoch: take this worker's share of the epoch's micro-batches, decoded ahead by the loader
(:mod:`xmr.train.loader`; with a BiAug D′ each keeps a positive with its hard negative), step
the family's objective over the global batch (:func:`xmr.train.epoch.train_one_epoch`, DDP
across workers), evaluate on rank 0 when
due, and report metrics with a checkpoint (rank 0 writes it). A restarted worker group, or a
rerun with the same run name, resumes from the latest checkpoint: weights, optimiser,
scheduler, epoch and best score.

A run trained to convergence (``--epochs auto``, :mod:`xmr.train.convergence`) keeps the
count of evaluations without a gain in its checkpoints; once it stops, rank 0 takes back the
weights of the best evaluation (kept in memory, or after a restart read from the run's
``best.pt``) before the test evaluation, and the run's last checkpoint holds them.
"""

from __future__ import annotations

import contextlib
import random
import re
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import replace
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import ray.train
import ray.train.torch
import torch
import torch.distributed
from ray.experimental.tqdm_ray import tqdm

from xmr.compare.per_query import PER_QUERY_FILE, QueryValues, write_per_query
from xmr.data import read_dataset
from xmr.data.fashiongen import read_product_ids
from xmr.eval.benchmark import run_benchmark
from xmr.eval.config import EvalConfig
from xmr.eval.encode import local_encoder
from xmr.eval.product_retrieval import product_retrieval
from xmr.eval.score import evaluate
from xmr.logs import quiet_console
from xmr.metrics import summed_recall
from xmr.models import Corpus, RetrievalModel, create_model, save_checkpoint
from xmr.models.batch import TrainBatch
from xmr.models.gather import mean_over_workers
from xmr.progress import ProgressLines
from xmr.storage import StoragePath, storage_path
from xmr.toyworld.scene.binding import ITEMS_FILE as BINDING_ITEMS
from xmr.toyworld.shop.brand_kinds import BRAND_GROUP, world_brand_kinds
from xmr.train.config import TrainConfig
from xmr.train.convergence import BEST_EPOCH, PLATEAUED, STOPPED_EPOCH, Plateau
from xmr.train.epoch import train_one_epoch
from xmr.train.gpu_utilisation import GpuUtilisation
from xmr.train.loader import batches_of, slots_of_steps
from xmr.train.optim import make_optimizer, make_scheduler
from xmr.train.precision import check_precision, grad_scaler

MODEL_FILE = "model.pt"  # weights + spec + vocabularies: what `xmr eval --checkpoint` reads
STATE_FILE = "train_state.pt"  # optimiser, scheduler, scaler, epoch, the plateau
PREFETCH_BATCHES = 2  # decoded micro-batches each worker fetches ahead of its step


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def selection_score(metrics: dict[str, float], split: str) -> float | None:
    """Model selection: the split's summed recall (RSUM, :func:`xmr.metrics.summed_recall`, in
    percentage points) over its ``{split}/recall_{i2t,t2i}_at_K`` metrics (not their intervals'
    ends); ``None`` if none was measured."""
    recall = re.compile(rf"{re.escape(split)}/recall_(i2t|t2i)_at_\d+")
    recalls = {k: v for k, v in metrics.items() if recall.fullmatch(k)}
    return summed_recall([recalls]) if recalls else None


def run_eval(
    model: RetrievalModel,
    config: TrainConfig,
    data_root: StoragePath,
    split: str,
    metrics: tuple,
    products: bool,
) -> tuple[dict[str, float], dict[str, QueryValues]]:
    """Evaluate ``model`` in this process (no Ray) on ``split``: ``{split}/...`` metrics, with
    their bootstrap intervals (``..._ci_low``, ``..._ci_high``), and the per-query values they
    are means of.

    Data with product entities (``products``: Fashion-Gen, the ToyWorld shop) is evaluated with
    the EI-CLIP paper's product protocols (full candidate set and same-sub-category "sample
    100", SumR); a ToyWorld shop's also on each kind of brand name's queries alone
    (:mod:`xmr.toyworld.shop.brand_kinds`: ``{split}/brand_scene_word/...``); everything else
    with ``metrics`` of :func:`xmr.eval.score.evaluate`.
    """
    if products:
        records = read_dataset(config.dataset, data_root, split)
        product_ids = read_product_ids(data_root, split) if config.dataset == "fashiongen" else None
        kinds = world_brand_kinds(data_root) if config.dataset == "toyworld" else None
        result = product_retrieval(
            model, records, split=split, product_ids=product_ids, ks=config.ks, seed=config.seed,
            split_by=None if kinds is None else (BRAND_GROUP, kinds),
        )  # fmt: skip
        return {**result.metrics, **result.interval_metrics()}, result.per_query
    eval_config = EvalConfig(
        model=config.model,
        dataset=config.dataset,
        data=data_root,
        split=split,
        metrics=metrics,
        ks=config.ks,
        seed=config.seed,
    )
    result = evaluate(eval_config, local_encoder(model), model=model)
    return {**result.metrics, **result.interval_metrics()}, result.per_query


def run_binding(
    model: RetrievalModel, config: TrainConfig, data_root: StoragePath
) -> tuple[dict[str, float], dict[str, QueryValues]]:
    """The world's binding test (:mod:`xmr.benchmarks.binding`), in this process: the metrics
    ``{test_split}/binding/swap_acc``, ``.../counter_acc``, ``.../stereotype_acc`` with their
    bootstrap intervals (``..._ci_low``/``_ci_high``), and the per-item values under the same
    names (query set ``binding``), which ``xmr compare`` pairs."""
    eval_config = EvalConfig(
        model=config.model, dataset=config.dataset, data=data_root, seed=config.seed
    )
    result = run_benchmark(eval_config, "toyworld-binding", encoder=local_encoder(model))
    prefix = f"{config.test_split}/"
    metrics = {**result.metrics, **result.interval_metrics()}
    per_item = {
        name: replace(values, values={prefix + m: v for m, v in values.values.items()})
        for name, values in result.per_query.items()
    }
    return {prefix + name: value for name, value in metrics.items()}, per_item


def _save(
    directory: Path, model: RetrievalModel, objective: torch.nn.Module, state: dict[str, Any]
) -> None:
    save_checkpoint(directory / MODEL_FILE, model, {"epoch": state["epoch"]})
    extra = {k: v for k, v in objective.state_dict().items() if not k.startswith("model.")}
    torch.save({**state, "objective_extra": extra}, directory / STATE_FILE)


def train_loop(loop_config: dict[str, Any]) -> None:
    """Ray Train's ``train_loop_per_worker``.

    ``loop_config``: ``config`` (:meth:`TrainConfig.to_dict`, its ``epochs`` resolved),
    ``data_root`` (resolved dataset folder), ``steps_per_epoch`` (of a full epoch: the run's
    total, :meth:`TrainConfig.total_steps`, may end within the last one), ``corpus`` (captions
    and entities, for vocabularies), ``progress`` (rank 0's progress through each epoch:
    ``"bar"`` or ``"lines"``; the epoch line follows), ``grouped`` (the
    batches keep BiAug groups whole: report ``train/pairs_together``), ``clock`` (the loader's
    :class:`~xmr.train.loader.StartClock`), ``best_checkpoint`` (the run's ``best.pt``, which a
    converging run restarted after its best epoch takes back at its end).
    """
    quiet_console()  # after Ray Train configured this worker's logging
    config = TrainConfig.from_dict(loop_config["config"])
    data_root = storage_path(loop_config["data_root"])
    steps_per_epoch = int(loop_config["steps_per_epoch"])
    context = ray.train.get_context()
    rank = context.get_world_rank()
    device = ray.train.torch.get_device()
    if device.type == "cpu":
        torch.set_num_threads(max(1, config.cpus_per_worker))
    check_precision(config.precision, device)

    corpus = Corpus(**loop_config["corpus"])
    products = bool(corpus.entities)  # the training pairs carry product entities
    model = create_model(config.model, seed=config.seed, corpus=corpus)  # same on every rank
    # The same seed on every rank: each draws the global batch's BLIP negatives alike.
    objective = model.objective(config.loss, seed=config.seed * 1_009)
    optimizer = make_optimizer(objective.parameters(), config.optim)
    total_steps = config.total_steps(steps_per_epoch)
    scheduler = make_scheduler(optimizer, config.optim, steps_per_epoch, total_steps)
    scaler = grad_scaler(config.precision, device)
    start_epoch, plateau = 0, Plateau()
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            model.load_checkpoint(Path(directory) / MODEL_FILE)
            state = torch.load(Path(directory) / STATE_FILE, weights_only=True)
        objective.load_state_dict({**objective.state_dict(), **state["objective_extra"]})
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state.get("scaler", {}))
        start_epoch = int(state["epoch"])
        plateau = Plateau.from_state(state)
    # To the device; DDP when there are several ranks. A loss may leave parts of the model
    # without gradient in a step (BLIP with itm_weight 0, EI-CLIP's absent entity groups).
    objective = ray.train.torch.prepare_model(
        objective, parallel_strategy_kwargs={"find_unused_parameters": True}
    )
    grouped = bool(loop_config["grouped"])
    # Every rank, before it first asks for a batch: the loader skips the epochs already done.
    ray.get(loop_config["clock"].set.remote(start_epoch))
    decoded = batches_of(ray.train.get_dataset_shard("train"), PREFETCH_BATCHES)
    convergence = config.convergence
    stopped = convergence is not None and plateau.plateaued(convergence.patience)
    best_weights: dict[str, torch.Tensor] | None = None  # rank 0, converging: the best epoch's
    for epoch in range(start_epoch, start_epoch if stopped else config.epochs):
        epoch_steps = config.steps_in_epoch(epoch, steps_per_epoch)
        # this worker's share of the epoch's slots (every worker gets as many)
        per_worker = slots_of_steps(config, epoch_steps) // context.get_world_size()
        seed_everything(config.seed * 100_003 + epoch * 1_009 + rank)  # dropout, sampling
        _unwrap(objective).loss = config.loss.for_epoch(epoch)  # VSE++: summed, then hardest
        objective.train()
        pair_rows = [0, 0]  # rows of a hard-negative pair, those batched with their partner
        bar = (
            _epoch_progress(loop_config["progress"], epoch_steps, _epoch_label(epoch, config))
            if rank == 0
            else None
        )
        gpu = GpuUtilisation.for_device(device)
        with gpu or contextlib.nullcontext():
            done = train_one_epoch(
                objective,
                optimizer,
                scheduler,
                scaler,
                _counting_pairs(islice(decoded, per_worker), pair_rows),
                device=device,
                precision=config.precision,
                accum_steps=config.accum_steps,
                on_step=partial(bar.update, 1) if bar is not None else None,
            )
        if bar is not None:
            bar.close()
        # A loss over this rank's rows is its share of the global mean: average over ranks.
        losses = done.losses
        if losses:
            means = mean_over_workers(list(losses.values()), device)
            losses = dict(zip(losses, means, strict=True))
        metrics: dict[str, float] = {
            "epoch": epoch + 1,
            "lr": scheduler.get_last_lr()[0],
            # steady pairs/s: the epoch's second half, past the loader's head start
            "train/samples_per_s": done.steady_samples_per_s,
            "train/samples_per_s_incl_warmup": done.samples_per_s_incl_warmup,
            "train/first_step_s": done.first_step_s,
            "train/loader_wait_s": done.loader_wait_s,
            "train/epoch_s": done.seconds,
            "train/steps": done.steps,
            # optimiser steps since the run began (the scheduler's count, kept in checkpoints)
            "train/global_step": scheduler.last_epoch,
            **{f"train/{key}": value for key, value in losses.items()},
        }
        if gpu is not None:
            metrics["train/gpu_util_pct"] = gpu.mean()
        if grouped:  # over all ranks: 1.0 with hard negatives, chance without
            pairs = torch.tensor(pair_rows, dtype=torch.int64, device=device)
            if context.get_world_size() > 1:
                torch.distributed.all_reduce(pairs)
            if pairs[0] > 0:
                metrics["train/pairs_together"] = float(pairs[1] / pairs[0])
        per_query: dict[str, QueryValues] = {}  # the final test evaluation's, for xmr compare
        improved = False
        if rank == 0:
            if config.eval_every and (epoch + 1) % config.eval_every == 0:
                scores, _ = run_eval(
                    model, config, data_root, config.eval_split, ("recall", "bias"), products
                )
                metrics.update(scores)
            score = selection_score(metrics, config.eval_split)
            if score is not None:
                improved = plateau.observe(
                    score, epoch + 1, min_delta=convergence.min_delta if convergence else 0.0
                )
            if convergence is not None:
                if improved:  # a copy on the CPU: the device keeps only the training weights
                    best_weights = _cpu_copy(model.state_dict())
                stopped = plateau.plateaued(convergence.patience)
        if convergence is not None and context.get_world_size() > 1:  # rank 0 decides
            flag = torch.tensor([int(stopped)], device=device)
            torch.distributed.broadcast(flag, src=0)
            stopped = bool(flag.item())
        last = stopped or epoch + 1 == config.epochs
        if rank == 0:
            if last and convergence is not None:
                best_file = storage_path(loop_config["best_checkpoint"])
                _restore_best(model, plateau.best_epoch, epoch + 1, best_weights, best_file)
                metrics.update({
                    BEST_EPOCH: plateau.best_epoch or epoch + 1,
                    STOPPED_EPOCH: epoch + 1,
                    PLATEAUED: float(stopped),
                })  # fmt: skip
            if last:
                scores, per_query = run_eval(
                    model, config, data_root, config.test_split, ("recall", "odmap", "bias"),
                    products,
                )  # fmt: skip
                metrics.update(scores)
                if config.dataset == "toyworld" and (data_root / BINDING_ITEMS).is_file():
                    scores, items = run_binding(model, config, data_root)
                    metrics.update(scores)
                    per_query.update(items)
                if convergence is None and score is None:  # the selection split tested last
                    score = selection_score(metrics, config.eval_split)
                    improved = score is not None and plateau.observe(score, epoch + 1, min_delta=0)
            metrics["improved"] = float(improved)
            print(_epoch_line(metrics, config), flush=True)
            state = {
                "epoch": epoch + 1,
                "plateau": plateau.to_state(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "scaler": scaler.state_dict(),
            }
        # report() copies the checkpoint into Ray Train's storage before it returns: the scratch
        # folder goes with the epoch (kept, one per epoch fills the node's disk on a long run).
        with tempfile.TemporaryDirectory(prefix="xmr-ckpt-") as scratch:
            checkpoint = None
            if rank == 0:
                _save(Path(scratch), model, _unwrap(objective), state)
                if per_query:
                    write_per_query(per_query, Path(scratch) / PER_QUERY_FILE)
                checkpoint = ray.train.Checkpoint.from_directory(scratch)
            ray.train.report(
                metrics, checkpoint=checkpoint, checkpoint_dir_name=f"epoch_{epoch + 1:04d}"
            )
        if stopped:
            break


def _cpu_copy(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key: value.detach().to("cpu", copy=True) for key, value in state.items()}


def _restore_best(
    model: RetrievalModel,
    best_epoch: int,
    epoch: int,
    weights: dict[str, torch.Tensor] | None,
    best_file: StoragePath,
) -> None:
    """Take back the weights of epoch ``best_epoch`` (``weights``, or when a restart lost
    them ``best_file``, the run's ``best.pt``, which the driver exported from that epoch's
    checkpoint); no change when ``epoch``'s weights are the best, or nothing was evaluated."""
    if best_epoch in (0, epoch):
        return
    if weights is not None:
        model.module.load_state_dict(weights)
    else:
        model.load_checkpoint(best_file)
    print(f"epoch {epoch}: back to epoch {best_epoch}'s weights, the best evaluated")


def _counting_pairs(
    decoded: Iterable[tuple[TrainBatch, tuple[int, int]]], counts: list[int]
) -> Iterator[TrainBatch]:
    """The batches of ``decoded``, adding each one's hard-negative pair counts (rows of a
    pair, rows batched beside their partner) to ``counts`` as it passes."""
    for batch, (grouped_rows, together_rows) in decoded:
        counts[0] += grouped_rows
        counts[1] += together_rows
        yield batch


def _epoch_label(epoch: int, config: TrainConfig) -> str:
    """``epoch 3/8``, or ``epoch 3/≤30`` for a run that stops when it converges; during a
    hardest-negative warm-up, ``epoch 1/8 (summed negatives: warm-up)``.

    >>> from xmr.train.config import resolve_config
    >>> _epoch_label(0, resolve_config("vsepp", max_violation_after=2, epochs=8))
    'epoch 1/8 (summed negatives: warm-up)'
    """
    cap = "≤" if config.convergence is not None else ""
    warm = " (summed negatives: warm-up)" if epoch < config.loss.max_violation_after else ""
    return f"epoch {epoch + 1}/{cap}{config.epochs}{warm}"


def _epoch_progress(style: str, steps: int, desc: str) -> tqdm | ProgressLines:
    """Rank 0's progress through an epoch of ``steps`` steps, headed ``desc``: ``style``
    ``"bar"`` (the driver's terminal draws it) or ``"lines"`` (a line per tenth, for a log)."""
    if style == "bar":
        return tqdm(total=steps, desc=desc)
    return ProgressLines(steps, desc, unit="steps")


def _epoch_line(metrics: dict[str, float], config: TrainConfig) -> str:
    """One line per epoch: loss, throughput, and the evaluation when there was one."""
    parts = [
        _epoch_label(int(metrics["epoch"]) - 1, config),
        f"loss {metrics.get('train/loss', float('nan')):.4f}",
        f"{metrics['train/samples_per_s']:.0f} pairs/s",
    ]
    for split in (config.eval_split, config.test_split):
        score = selection_score(metrics, split)
        if score is not None:
            parts.append(f"{split} RSUM {score:.1f}")
    odmap = metrics.get(f"{config.test_split}/odmap_at_1")
    if odmap is not None:
        parts.append(f"{config.test_split} ODmAP@1 {odmap:.3f}")
    return " | ".join(parts)


def _unwrap(objective: torch.nn.Module) -> torch.nn.Module:
    """The objective inside a DDP wrapper (checkpoints never hold ``module.`` prefixes)."""
    return getattr(objective, "module", objective)
