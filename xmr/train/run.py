"""``xmr train``: build the training table, run :func:`~xmr.train.loop.train_loop` on a
``TorchTrainer``, and log the run to MLflow.

Layout of a run under ``storage/name`` (a local or shared folder, or an object store's
``s3://bucket/prefix``: Ray Train writes its checkpoints there through pyarrow, the exports and
the record are written beside them)::

    epoch_NNNN/          Ray Train checkpoints (model.pt + train_state.pt), the latest two kept
    last.pt              the final weights (``xmr eval --checkpoint``)
    best.pt              the weights with the best validation RSUM (when --eval-every is set)
    xmr_run.json         the config and the MLflow run id (a rerun continues the same run)

Rerunning the same name (same ``storage``) resumes from the latest checkpoint; a finished run
only re-reports its final metrics. Worker failures restart the worker group from the latest
checkpoint up to ``max_failures`` times.

A BiAug D′ trains from micro-batches filled with whole groups
(:class:`~xmr.train.batching.EpochPlan`), so each positive shares a batch with its hard negative
(``--no-hard-negatives``: every row a group of its own, the same path otherwise).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.fs
import ray
import ray.train
from ray.train.torch import TorchTrainer

from xmr.compare.per_query import PER_QUERY_FILE
from xmr.models import check_spec
from xmr.pipeline.ray_executor import init_ray
from xmr.progress import stdout_is_terminal
from xmr.storage import ObjectPath, StoragePath, check_bucket
from xmr.tracking import TrackedRun
from xmr.train.config import TrainConfig
from xmr.train.fit import MODEL_FILE
from xmr.train.loader import StartClock, loader_count, training_dataset
from xmr.train.loop import train_loop
from xmr.train.plan import RunPlan, plan_run
from xmr.train.record import RunRecord
from xmr.train.result import TrainResult

TRAIN_PRINT_PATCH = "RAY_TRAIN_ENABLE_PRINT_PATCH"  # Ray Train passes it on to the workers


class MlflowReporter(ray.train.UserCallback):
    """Logs every epoch's report to the run's record and exports ``last.pt`` / ``best.pt``.

    Runs in the Ray Train controller (the driver's side), so workers never touch the tracking
    store.
    """

    def __init__(self, record: RunRecord, run: TrackedRun) -> None:
        self.record, self.run = record, run

    def after_report(self, run_context, metrics: list[dict[str, Any]], checkpoint) -> None:
        values = metrics[0]  # rank 0 reports the evaluation
        self.record.log_epoch(self.run, values)
        if checkpoint is not None:
            targets = [self.record.last]
            if values.get("improved"):
                targets.append(self.record.best)
            _export(checkpoint, targets)
            _log_per_query(checkpoint, self.run)


def _log_per_query(checkpoint: ray.train.Checkpoint, run: TrackedRun) -> None:
    """Log the final evaluation's per-query values (in the last epoch's checkpoint) as the
    run's ``per_query.parquet``, which ``xmr compare RUN_A RUN_B`` pairs; no file, nothing."""
    source = f"{checkpoint.path}/{PER_QUERY_FILE}"
    if checkpoint.filesystem.get_file_info(source).type == pyarrow.fs.FileType.NotFound:
        return
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / PER_QUERY_FILE
        with checkpoint.filesystem.open_input_stream(source) as stream:
            local.write_bytes(stream.read())
        run.log_artifact(local)


def _export(checkpoint: ray.train.Checkpoint, targets: list[StoragePath]) -> None:
    """Copy the weights of ``checkpoint`` (persisted in the run's storage) to each of
    ``targets`` so that readers never see half a file: a local copy is written beside the
    target and renamed; in an object store the copy is made by the store (the run folder and
    its checkpoints share a bucket) and appears whole when it completes."""
    if isinstance(targets[0], ObjectPath):
        source = f"{checkpoint.path}/{MODEL_FILE}"
        for target in targets:
            checkpoint.filesystem.copy_file(source, target.path)
        return
    with checkpoint.as_directory() as directory:
        for target in targets:
            tmp = target.with_name(f".{target.name}.tmp")
            shutil.copyfile(Path(directory) / MODEL_FILE, tmp)
            tmp.replace(target)


class _Trainer(TorchTrainer):
    """A TorchTrainer that leaves Ctrl-C to :mod:`xmr.stops`: Ray Train's own handler (set
    when ``fit`` runs in the main thread) aborts the workers and exits with status 0, which
    would hide the stop. The driver's exit ends its controller and workers instead; the
    latest checkpoint resumes the run."""

    def _register_sigint_handler(self, controller: Any) -> None:
        return None


def _sized_loaders(config: TrainConfig) -> TrainConfig:
    """``config`` with its loader count (:func:`loader_count`), after a line that says how
    many and why."""
    count, why = loader_count(config)
    print(f"{config.name}: {count} loader actor(s) ({why})")
    return replace(config, loaders=count)


def train(
    config: TrainConfig,
    *,
    address: str | None = None,
    tracking_uri: str | None = None,
    tags: dict[str, str] | None = None,
    experiment: str | None = None,
    parent_run_id: str | None = None,
    callbacks: list[ray.train.UserCallback] | None = None,
    run_name: str | None = None,
) -> TrainResult:
    """Train ``config`` on Ray Train and return the final metrics and checkpoint paths.

    ``tags`` are added to the MLflow run when it is created, in ``experiment`` (default
    ``xmr/train/<dataset>``, :func:`~xmr.tracking.experiment_name`), nested under
    ``parent_run_id`` when given (a sweep's trial), named ``run_name`` (default: the run's
    ``config.name``; a sweep's trial: its swept values).
    ``callbacks`` join the run's Ray Train callbacks (a Tune trial forwards reports to Tune).
    Rank 0 shows its progress through each epoch: a bar when standard output is a terminal,
    else a line per tenth of the epoch (a sweep's trial, whose process has no terminal, prints
    lines: concurrent bars would overwrite each other).

    With ``config.steps`` the run stops after that many optimiser steps, its epochs set here
    from the data (:func:`~xmr.train.plan.run_length`); every run logs its total as the param
    ``train.total_steps`` (with ``config.convergence``, the cap's) and, per epoch,
    ``train/global_step``. With ``config.convergence`` (``--epochs auto``) it stops when the
    validation score levels off and is tested with its best epoch's weights; the final
    metrics hold ``train/best_epoch``, ``train/stopped_epoch`` and ``train/plateaued``, and
    the tag ``xmr.stop_reason`` says why in words.

    The same config again (same ``name`` and storage, same store) resumes an unfinished run
    from its last checkpoint; a finished one comes back at once with its recorded final
    metrics, without Ray (except a sweep's trial, whose ``callbacks`` must hear its reports).

    Raises:
        ValueError / FileNotFoundError: bad config or data, before any worker starts.
        ray.train.TrainingFailedError: the workers failed more than ``max_failures`` times.
    """
    check_spec(config.model)
    check_bucket(config.storage, "--storage")
    record = RunRecord(config, tracking_uri, experiment)
    record.check_same_config(config)
    plan = plan_run(config)
    finished = None if callbacks else record.finished(plan)
    if finished is not None:
        return finished
    run = record.open(plan, tags or {}, parent_run_id, run_name or config.name)
    init_ray(address)
    config = _sized_loaders(plan.config)
    trainer = _trainer(plan, config, [MlflowReporter(record, run), *(callbacks or [])])
    with run.ending():  # FINISHED, or FAILED when training or logging raises
        metrics = record.close(run, plan, config, trainer.fit().metrics or {})
    return record.finish(run, plan, config, metrics)


def _trainer(
    plan: RunPlan, config: TrainConfig, callbacks: list[ray.train.UserCallback]
) -> _Trainer:
    """The ``TorchTrainer`` of ``plan`` (``config``: its config with the loaders sized):
    ``config.workers`` workers running :func:`~xmr.train.loop.train_loop` over the loader's
    dataset."""
    terminal = stdout_is_terminal()
    if not terminal:  # Ray Data's bars for the training split, drawn through the workers
        ray.data.DataContext.get_current().enable_progress_bars = False
    # Ray Train sends the workers' prints through a logger and also prints them, so each
    # epoch line came twice and pycocotools' swallowed prints came through.
    os.environ.setdefault(TRAIN_PRINT_PATCH, "0")
    clock = StartClock.remote()
    corpus = plan.corpus
    dataset = training_dataset(
        plan.data.table, config, corpus, clock, plan.steps_per_epoch, plan.grouped
    )
    return _Trainer(
        train_loop,
        train_loop_config={
            "config": config.to_dict(),
            "data_root": str(plan.root),
            "steps_per_epoch": plan.steps_per_epoch,
            "corpus": {"captions": list(corpus.captions), "entities": dict(corpus.entities)},
            "progress": "bar" if terminal else "lines",
            "best_checkpoint": str(config.storage / config.name / "best.pt"),
            "grouped": plan.grouped,
            "clock": clock,
        },
        scaling_config=ray.train.ScalingConfig(
            num_workers=config.workers,
            use_gpu=config.gpus_per_worker > 0,
            resources_per_worker={
                "CPU": config.cpus_per_worker,
                **({"GPU": config.gpus_per_worker} if config.gpus_per_worker else {}),
            },
        ),
        run_config=ray.train.RunConfig(
            name=config.name,
            storage_path=str(config.storage),
            failure_config=ray.train.FailureConfig(max_failures=config.max_failures),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2),
            callbacks=callbacks,
            # Ray Train's own INFO (worker groups, checkpoints, reports) in its log files only
            logging_config=ray.LoggingConfig(log_level="WARNING"),
        ),
        datasets={"train": dataset},
        dataset_config=ray.train.DataConfig(
            execution_options=ray.data.ExecutionOptions(preserve_order=True)
        ),
    )
