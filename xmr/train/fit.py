"""A training run as plain code: epochs, evaluations, convergence, checkpoints and the test.

:func:`fit` is the run, in the spirit of open_clip's ``main`` around ``train_one_epoch``. It
builds the model and its optimiser, takes back the latest checkpoint, steps the epochs
(:func:`~xmr.train.epoch.train_one_epoch`), evaluates the validation split when due, keeps
the plateau and the best weights (:mod:`xmr.train.convergence`), reports each epoch's metrics
with a checkpoint, and tests the best weights at the end.

It reaches the world outside only through a :class:`FitHooks`: the worker's rank and device,
the model's wrapping (DDP), the latest checkpoint, where each epoch's report goes, the best
epoch's weights after a restart, and averages over workers. :class:`LocalHooks` runs a whole
training in this process with checkpoints in a local folder (no Ray; the fast tests);
Ray Train's worker loop (:mod:`xmr.train.loop`) gives hooks over its context, so the same run
goes data-parallel with Ray's checkpoints and restarts.

A converging run (``--epochs auto``) keeps the count of evaluations without a gain in its
checkpoints. Once it stops, the chief takes back the weights of the best evaluation (kept in
memory, or after a restart read from :meth:`FitHooks.best_weights`) before the test
evaluation, and the run's last checkpoint holds them.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed

from xmr.compare.per_query import PER_QUERY_FILE, QueryValues, write_per_query
from xmr.models import Corpus, RetrievalModel, create_model, save_checkpoint
from xmr.models.batch import TrainBatch
from xmr.models.gather import mean_over_workers
from xmr.progress import ProgressLines
from xmr.storage import StoragePath
from xmr.toyworld.scene.binding import ITEMS_FILE as BINDING_ITEMS
from xmr.train.config import TrainConfig
from xmr.train.convergence import BEST_EPOCH, PLATEAUED, STOPPED_EPOCH, Plateau
from xmr.train.epoch import EpochResult, train_one_epoch
from xmr.train.evaluation import run_binding, run_eval, selection_score
from xmr.train.gpu_utilisation import GpuUtilisation
from xmr.train.optim import make_optimizer, make_scheduler
from xmr.train.plan import PairCounts, slots_of_steps
from xmr.train.precision import check_precision, grad_scaler

MODEL_FILE = "model.pt"  # weights + spec + vocabularies: what `xmr eval --checkpoint` reads
STATE_FILE = "train_state.pt"  # optimiser, scheduler, scaler, epoch, the plateau


class Progress(Protocol):
    """A progress display through one epoch's steps."""

    def update(self, n: int = 1) -> Any: ...

    def close(self) -> Any: ...


class FitHooks:
    """What :func:`fit` needs from the world around it. The defaults are one worker's on the
    CPU; averages and broadcasts go through ``torch.distributed`` when ``world_size`` > 1."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_chief(self) -> bool:
        """The worker that evaluates, decides when to stop and writes checkpoints."""
        return self.rank == 0

    def prepare(self, objective: torch.nn.Module) -> torch.nn.Module:
        """The objective ready to train on ``device`` (with several workers: wrapped in DDP)."""
        return objective.to(self.device)

    def latest_checkpoint(self) -> contextlib.AbstractContextManager[Path | None]:
        """A context giving the folder of the run's latest checkpoint (``MODEL_FILE`` and
        ``STATE_FILE``), or None for a fresh run."""
        return contextlib.nullcontext(None)

    def report(self, metrics: dict[str, float], checkpoint: Path | None, name: str) -> None:
        """Hand over one epoch's ``metrics`` and (from the chief) the ``checkpoint`` folder
        named ``name``, which is removed once this returns: keep a copy."""
        raise NotImplementedError

    def best_weights(self) -> StoragePath:
        """The file with the best epoch's weights, for a run restarted after its best epoch."""
        raise NotImplementedError

    def progress(self, steps: int, desc: str) -> Progress:
        """The chief's display through an epoch of ``steps`` steps headed ``desc``."""
        return ProgressLines(steps, desc, unit="steps")

    def mean(self, values: list[float]) -> list[float]:
        """Each value's mean over the workers."""
        return mean_over_workers(values, self.device)

    def total(self, counts: list[int]) -> list[int]:
        """Each count's sum over the workers."""
        summed = torch.tensor(counts, dtype=torch.int64, device=self.device)
        if self.world_size > 1:
            torch.distributed.all_reduce(summed)
        return [int(n) for n in summed.tolist()]

    def broadcast(self, flag: bool) -> bool:
        """The chief's ``flag``, on every worker."""
        if self.world_size == 1:
            return flag
        value = torch.tensor([int(flag)], device=self.device)
        torch.distributed.broadcast(value, src=0)
        return bool(value.item())


class LocalHooks(FitHooks):
    """One worker in this process, its checkpoints in ``folder``: ``epoch_NNNN/`` (the latest
    ``keep``), ``last.pt`` and ``best.pt`` (the weights of the last report and of the best
    evaluation, as ``xmr train`` exports them). ``reports`` holds every report's metrics."""

    def __init__(self, folder: Path, device: torch.device | None = None, keep: int = 2) -> None:
        self.folder = Path(folder)
        self.device = device or torch.device("cpu")
        self.keep = keep
        self.reports: list[dict[str, float]] = []
        self.folder.mkdir(parents=True, exist_ok=True)

    def _checkpoints(self) -> list[Path]:
        return sorted(p for p in self.folder.glob("epoch_*") if (p / STATE_FILE).is_file())

    def latest_checkpoint(self) -> contextlib.AbstractContextManager[Path | None]:
        checkpoints = self._checkpoints()
        return contextlib.nullcontext(checkpoints[-1] if checkpoints else None)

    def report(self, metrics: dict[str, float], checkpoint: Path | None, name: str) -> None:
        self.reports.append(dict(metrics))
        if checkpoint is None:
            return
        target = self.folder / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(checkpoint, target)
        for old in self._checkpoints()[: -self.keep]:
            shutil.rmtree(old)
        exports = [self.folder / "last.pt"]
        if metrics.get("improved"):
            exports.append(self.best_weights())
        for export in exports:
            tmp = export.with_name(f".{export.name}.tmp")
            shutil.copyfile(target / MODEL_FILE, tmp)
            tmp.replace(export)

    def best_weights(self) -> Path:
        return self.folder / "best.pt"


@dataclass(frozen=True)
class FitData:
    """What :func:`fit` trains on: the dataset folder ``root`` (its splits are evaluated), the
    ``corpus`` (the models' vocabularies), ``steps_per_epoch`` (of a full epoch), ``grouped``
    (BiAug groups stay whole: report ``train/pairs_together``), and ``batches``: from a start
    epoch, this worker's decoded micro-batches of every later epoch, in order, each with its
    :data:`~xmr.train.plan.PairCounts`."""

    root: StoragePath
    corpus: Corpus
    steps_per_epoch: int
    grouped: bool
    batches: Callable[[int], Iterable[tuple[TrainBatch, PairCounts]]]


@dataclass
class _Run:
    """The training state that checkpoints carry."""

    model: RetrievalModel
    objective: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    epoch: int = 0  # epochs done
    plateau: Plateau = field(default_factory=Plateau)

    def state(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "plateau": self.plateau.to_state(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
        }


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def fit(config: TrainConfig, data: FitData, hooks: FitHooks) -> dict[str, float]:
    """Train ``config`` (its ``epochs`` resolved) on ``data`` through ``hooks``; returns the
    metrics of the last epoch reported (empty when a restarted run had already stopped).

    Every worker calls it with the same config; the chief (rank 0) evaluates, decides when a
    converging run stops, and writes the checkpoints.
    """
    check_precision(config.precision, hooks.device)
    run = _build(config, data, hooks)
    objective = hooks.prepare(run.objective)  # a loss may leave parts without gradient (DDP)
    convergence = config.convergence
    stopped = convergence is not None and run.plateau.plateaued(convergence.patience)
    decoded = iter(data.batches(run.epoch))
    best_weights: dict[str, torch.Tensor] | None = None  # chief, converging: the best epoch's
    metrics: dict[str, float] = {}
    for epoch in range(run.epoch, run.epoch if stopped else config.epochs):
        metrics = _train_epoch(config, data, hooks, run, objective, decoded, epoch)
        improved = False
        if hooks.is_chief:
            improved = _validate(config, data, run, metrics, epoch)
            if convergence is not None:
                if improved:  # a copy on the CPU: the device keeps only the training weights
                    best_weights = _cpu_copy(run.model.state_dict())
                stopped = run.plateau.plateaued(convergence.patience)
        if convergence is not None:
            stopped = hooks.broadcast(stopped)
        last = stopped or epoch + 1 == config.epochs
        run.epoch = epoch + 1
        per_query: dict[str, QueryValues] = {}  # the test evaluation's, for xmr compare
        if hooks.is_chief and last:
            if convergence is not None:
                _restore_best(run, best_weights, hooks, stopped, metrics)
            validated = selection_score(metrics, config.eval_split) is not None
            per_query = _test(config, data, run, metrics)
            if convergence is None and not validated:  # the selection split tested last
                improved = _observe(run, metrics, config.eval_split, min_delta=0.0)
        metrics["improved"] = float(improved)
        if hooks.is_chief:
            print(_epoch_line(metrics, config), flush=True)
        _report(hooks, run, metrics, per_query)
        if stopped:
            break
    return metrics


def _build(config: TrainConfig, data: FitData, hooks: FitHooks) -> _Run:
    """The model (the same on every worker), its objective, optimiser, scheduler and scaler,
    from the latest checkpoint when there is one."""
    model = create_model(config.model, seed=config.seed, corpus=data.corpus)
    # The same seed on every rank: each draws the global batch's BLIP negatives alike.
    objective = model.objective(config.loss, seed=config.seed * 1_009)
    optimizer = make_optimizer(objective.parameters(), config.optim)
    total_steps = config.total_steps(data.steps_per_epoch)
    scheduler = make_scheduler(optimizer, config.optim, data.steps_per_epoch, total_steps)
    run = _Run(model, objective, optimizer, scheduler, grad_scaler(config.precision, hooks.device))
    with hooks.latest_checkpoint() as directory:
        if directory is None:
            return run
        model.load_checkpoint(Path(directory) / MODEL_FILE)
        state = torch.load(Path(directory) / STATE_FILE, weights_only=True)
    objective.load_state_dict({**objective.state_dict(), **state["objective_extra"]})
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    run.scaler.load_state_dict(state.get("scaler", {}))
    run.epoch, run.plateau = int(state["epoch"]), Plateau.from_state(state)
    return run


def _train_epoch(
    config: TrainConfig,
    data: FitData,
    hooks: FitHooks,
    run: _Run,
    objective: torch.nn.Module,
    decoded: Iterator[tuple[TrainBatch, PairCounts]],
    epoch: int,
) -> dict[str, float]:
    """Train epoch ``epoch`` (0-based) on this worker's share of its batches; the epoch's
    training metrics, averaged over the workers."""
    epoch_steps = config.steps_in_epoch(epoch, data.steps_per_epoch)
    # this worker's share of the epoch's slots (every worker gets as many)
    per_worker = slots_of_steps(config, epoch_steps) // hooks.world_size
    seed_everything(config.seed * 100_003 + epoch * 1_009 + hooks.rank)  # dropout, sampling
    _unwrap(objective).loss = config.loss.for_epoch(epoch)  # VSE++: summed, then hardest
    objective.train()
    pair_rows = [0, 0]  # rows of a hard-negative pair, those batched with their partner
    bar = hooks.progress(epoch_steps, _epoch_label(epoch, config)) if hooks.is_chief else None
    gpu = GpuUtilisation.for_device(hooks.device)
    with gpu or contextlib.nullcontext():
        done = train_one_epoch(
            objective,
            run.optimizer,
            run.scheduler,
            run.scaler,
            _counting_pairs(islice(decoded, per_worker), pair_rows),
            device=hooks.device,
            precision=config.precision,
            accum_steps=config.accum_steps,
            on_step=partial(bar.update, 1) if bar is not None else None,
        )
    if bar is not None:
        bar.close()
    metrics = _epoch_metrics(epoch, run, done, hooks)
    if gpu is not None:
        metrics["train/gpu_util_pct"] = gpu.mean()
    if data.grouped:  # over all ranks: 1.0 with hard negatives, chance without
        grouped, together = hooks.total(pair_rows)
        if grouped > 0:
            metrics["train/pairs_together"] = together / grouped
    return metrics


def _epoch_metrics(epoch: int, run: _Run, done: EpochResult, hooks: FitHooks) -> dict[str, float]:
    # A loss over this rank's rows is its share of the global mean: average over ranks.
    losses = dict(zip(done.losses, hooks.mean(list(done.losses.values())), strict=True))
    return {
        "epoch": epoch + 1,
        "lr": run.scheduler.get_last_lr()[0],
        # steady pairs/s: the epoch's second half, past the loader's head start
        "train/samples_per_s": done.steady_samples_per_s,
        "train/samples_per_s_incl_warmup": done.samples_per_s_incl_warmup,
        "train/first_step_s": done.first_step_s,
        "train/loader_wait_s": done.loader_wait_s,
        "train/epoch_s": done.seconds,
        "train/steps": done.steps,
        # optimiser steps since the run began (the scheduler's count, kept in checkpoints)
        "train/global_step": run.scheduler.last_epoch,
        **{f"train/{key}": value for key, value in losses.items()},
    }


def _validate(
    config: TrainConfig, data: FitData, run: _Run, metrics: dict[str, float], epoch: int
) -> bool:
    """The chief's validation of epoch ``epoch`` (0-based) when due, added to ``metrics``;
    True when its weights are the best so far."""
    if config.eval_every and (epoch + 1) % config.eval_every == 0:
        scores, _ = run_eval(
            run.model, config, data.root, config.eval_split, ("recall", "bias"), _products(data)
        )
        metrics.update(scores)
    convergence = config.convergence
    return _observe(run, metrics, config.eval_split, convergence.min_delta if convergence else 0.0)


def _observe(run: _Run, metrics: dict[str, float], split: str, min_delta: float) -> bool:
    """Count ``split``'s selection score in ``metrics`` (if measured) for the epoch ``metrics``
    report; True when it is the best so far."""
    score = selection_score(metrics, split)
    if score is None:
        return False
    return run.plateau.observe(score, int(metrics["epoch"]), min_delta=min_delta)


def _test(
    config: TrainConfig, data: FitData, run: _Run, metrics: dict[str, float]
) -> dict[str, QueryValues]:
    """The chief's test evaluation (and the world's binding test), added to ``metrics``; the
    per-query values."""
    scores, per_query = run_eval(
        run.model, config, data.root, config.test_split, ("recall", "odmap", "bias"),
        _products(data),
    )  # fmt: skip
    metrics.update(scores)
    if config.dataset == "toyworld" and (data.root / BINDING_ITEMS).is_file():
        scores, items = run_binding(run.model, config, data.root)
        metrics.update(scores)
        per_query.update(items)
    return per_query


def _restore_best(
    run: _Run,
    weights: dict[str, torch.Tensor] | None,
    hooks: FitHooks,
    stopped: bool,
    metrics: dict[str, float],
) -> None:
    """Take back the weights of the best evaluated epoch (``weights``, or when a restart lost
    them :meth:`FitHooks.best_weights`); no change when the last epoch's are the best, or
    nothing was evaluated. Adds the convergence metrics."""
    best, epoch = run.plateau.best_epoch, run.epoch
    if best not in (0, epoch):
        if weights is not None:
            run.model.module.load_state_dict(weights)
        else:
            run.model.load_checkpoint(hooks.best_weights())
        print(f"epoch {epoch}: back to epoch {best}'s weights, the best evaluated")
    metrics.update({BEST_EPOCH: best or epoch, STOPPED_EPOCH: epoch, PLATEAUED: float(stopped)})


def _report(
    hooks: FitHooks, run: _Run, metrics: dict[str, float], per_query: dict[str, QueryValues]
) -> None:
    """Report the epoch: the chief's checkpoint is written in a scratch folder that goes with
    the epoch (one kept per epoch fills the node's disk on a long run)."""
    with tempfile.TemporaryDirectory(prefix="xmr-ckpt-") as scratch:
        checkpoint = None
        if hooks.is_chief:
            checkpoint = Path(scratch)
            save_checkpoint(checkpoint / MODEL_FILE, run.model, {"epoch": run.epoch})
            objective = _unwrap(run.objective)
            extra = {k: v for k, v in objective.state_dict().items() if not k.startswith("model.")}
            torch.save({**run.state(), "objective_extra": extra}, checkpoint / STATE_FILE)
            if per_query:
                write_per_query(per_query, checkpoint / PER_QUERY_FILE)
        hooks.report(metrics, checkpoint, f"epoch_{run.epoch:04d}")


def _products(data: FitData) -> bool:
    return bool(data.corpus.entities)  # the training pairs carry product entities


def _cpu_copy(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key: value.detach().to("cpu", copy=True) for key, value in state.items()}


def _counting_pairs(
    decoded: Iterable[tuple[TrainBatch, PairCounts]], counts: list[int]
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
