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

import json
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs
import ray
import ray.train
from ray.train.torch import TorchTrainer

from xmr.compare.per_query import PER_QUERY_FILE
from xmr.data import read_dataset
from xmr.models import check_spec
from xmr.pipeline.ray_executor import init_ray
from xmr.progress import stdout_is_terminal
from xmr.storage import ObjectPath, StoragePath, check_bucket
from xmr.text import require_tagger
from xmr.toyworld.default_world import default_toyworld
from xmr.tracking import (
    TrackedRun,
    experiment_name,
    is_finite_number,
    recorded_run,
    resolve_tracking_uri,
    start_run,
    write_run_record,
)
from xmr.train.config import TrainConfig
from xmr.train.convergence import BEST_EPOCH, PLATEAUED, STOPPED_EPOCH, stop_reason
from xmr.train.data import TrainingData, data_digest, ratio_shortfall, training_data
from xmr.train.loader import StartClock, loader_count, training_dataset, training_plan
from xmr.train.loop import MODEL_FILE, train_loop
from xmr.train.optim import LR_STEP_PERIOD, step_period
from xmr.train.result import FINAL_METRICS_KEY, RUN_FILE, RUN_ID_KEY, TrainResult

STOP_REASON_TAG = "xmr.stop_reason"  # why a run trained with --epochs auto stopped where it did
TRAIN_PRINT_PATCH = "RAY_TRAIN_ENABLE_PRINT_PATCH"  # Ray Train passes it on to the workers


class MlflowReporter(ray.train.UserCallback):
    """Logs every epoch's metrics to the run's MLflow run and exports ``last.pt`` / ``best.pt``.

    Runs in the Ray Train controller (the driver's side), so workers never touch the tracking
    store.
    """

    def __init__(self, run: TrackedRun, run_dir: StoragePath) -> None:
        self.run = run
        self.run_dir = run_dir

    def after_report(self, run_context, metrics: list[dict[str, Any]], checkpoint) -> None:
        values = metrics[0]  # rank 0 reports the evaluation
        self.run.log_metrics(
            {
                key: float(value)
                for key, value in values.items()
                if isinstance(value, int | float) and key not in ("epoch", "improved")
            },
            step=int(values["epoch"]),
            timestamp_ms=0,
        )
        if checkpoint is not None:
            targets = [self.run_dir / "last.pt"]
            if values.get("improved"):
                targets.append(self.run_dir / "best.pt")
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


def _mlflow_run(
    config: TrainConfig,
    run_dir: StoragePath,
    tracking_uri: str,
    tags: dict[str, str],
    experiment: str,
    parent_run_id: str | None,
    run_name: str,
) -> TrackedRun:
    """The MLflow run of ``run_dir`` (RUNNING): the one a previous attempt started, or a new
    one named ``run_name``."""
    record = run_dir / RUN_FILE
    resumed = recorded_run(record, RUN_ID_KEY, tracking_uri)
    if resumed is not None:
        return resumed
    with start_run(
        experiment,
        run_name=run_name,
        tracking_uri=tracking_uri,
        tags={"xmr.command": "train", "xmr.run_dir": str(run_dir), **tags},
        parent_run_id=parent_run_id,
        keep_running=True,
    ) as run:
        run.log_params(config.params())
    write_run_record(record, run, RUN_ID_KEY, {"config": config.to_dict()})
    return run


def _check_same_config(config: TrainConfig, run_dir: StoragePath) -> None:
    record = run_dir / RUN_FILE
    if not record.is_file():
        return
    saved = TrainConfig.from_dict(json.loads(record.read_text())["config"])
    if saved.fingerprint() != config.fingerprint():
        raise ValueError(
            f"{run_dir} holds run {config.name!r} with another config "
            f"({saved.fingerprint()} vs {config.fingerprint()}); use another --name to start "
            "a new run, or the same flags to resume it"
        )


def _finished_run(run_dir: StoragePath, tracking_uri: str) -> tuple[dict[str, float], str] | None:
    """``(final metrics, MLflow run id)`` of the run that finished training in ``run_dir`` and
    logged to ``tracking_uri``; None when it did not finish (or logged elsewhere)."""
    record = run_dir / RUN_FILE
    if not record.is_file() or not (run_dir / "last.pt").is_file():
        return None
    metrics = json.loads(record.read_text()).get(FINAL_METRICS_KEY)
    run = recorded_run(record, RUN_ID_KEY, tracking_uri, reopen=False) if metrics else None
    return None if run is None else ({k: float(v) for k, v in metrics.items()}, run.run_id)


def _log_inputs(
    run: TrackedRun, data: TrainingData, config: TrainConfig, root: StoragePath
) -> None:
    """D and the D′ sample as MLflow dataset inputs (metadata only, no pixels)."""
    table = data.table.select(["image_id", "caption", "source", "image_gender"]).to_pandas()
    table["image_id"] = table["image_id"].astype("float64")  # MLflow's schema hint otherwise
    parts = []
    if data.original:  # none with --synth-only
        parts.append((table[table.source == "D"], root, f"{config.dataset}/{config.split}"))
    if data.synthetic:
        parts.append((table[table.source != "D"], config.synth, "D′"))
    for frame, source, name in parts:
        run.log_dataset(frame, source=str(source), name=name, context="training")


def _run_length(table: pa.Table, config: TrainConfig, grouped: bool) -> tuple[int, int]:
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


def default_world(config: TrainConfig) -> Path:
    """The embedded ToyWorld for ``config``: the shop world (product entities) for EI-CLIP."""
    mode = "shop" if config.model.family == "eiclip" else "scene"
    return default_toyworld(config.seed, mode=mode)


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
    from the data (:func:`_run_length`); every run logs its total as the param
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
    root = config.data if config.data else default_world(config)
    run_dir = config.storage / config.name
    _check_same_config(config, run_dir)
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
    if not corpus.entities:  # the final ODmAP tags captions in the rank-0 worker
        require_tagger()
    grouped = data.synth_mode == "biaug"  # batches built from whole groups
    steps_per_epoch, epochs = _run_length(data.table, config, grouped)
    if steps_per_epoch < 1:
        raise ValueError(
            f"{data.table.num_rows} training pairs give no full batch of "
            f"{config.per_worker_batch} per worker; lower --batch-size"
        )
    config = replace(config, epochs=epochs)  # --steps: the epochs they need

    uri = resolve_tracking_uri(tracking_uri)
    experiment = experiment or experiment_name("train", config.dataset)
    finished = None if callbacks else _finished_run(run_dir, uri)
    if finished is not None:
        metrics, run_id = finished
        print(
            f"{config.name}: trained to epoch {int(metrics.get('epoch', config.epochs))} before; "
            f"its results are reused (remove {run_dir} to train it again)"
        )
        best = run_dir / "best.pt"
        return TrainResult(
            metrics, run_dir, run_dir / "last.pt", best if best.is_file() else None, run_id, data,
            experiment,
        )  # fmt: skip
    run = _mlflow_run(
        config, run_dir, uri, dict(tags or {}), experiment, parent_run_id, run_name or config.name
    )
    params = {
        "data.pairs_original": str(data.original),
        "data.pairs_synthetic": str(data.synthetic),
        "data.digest": data_digest(data.table),
        "data.dprime_digest": data.dprime_digest or "none",
        "data.synth_mode": data.synth_mode or "none",
        "train.total_steps": str(config.total_steps(steps_per_epoch)),
        "train.lr_step_period": str(step_period(config.optim, steps_per_epoch)),
        # data.synth_ratio is the ratio asked for; D′ may have had fewer pairs
        **({"data.synth_ratio_used": f"{data.synth_ratio:.6g}"} if config.synth else {}),
    }
    existing = run.params()
    missing = {key: value for key, value in params.items() if key not in existing}
    if missing:
        run.log_params(missing)

    init_ray(address)
    config = _sized_loaders(config)
    terminal = stdout_is_terminal()
    if not terminal:  # Ray Data's bars for the training split, drawn through the workers
        ray.data.DataContext.get_current().enable_progress_bars = False
    # Ray Train sends the workers' prints through a logger and also prints them, so each
    # epoch line came twice and pycocotools' swallowed prints came through.
    os.environ.setdefault(TRAIN_PRINT_PATCH, "0")
    clock = StartClock.remote()
    dataset = training_dataset(data.table, config, corpus, clock, steps_per_epoch, grouped)
    trainer = _Trainer(
        train_loop,
        train_loop_config={
            "config": config.to_dict(),
            "data_root": str(root),
            "steps_per_epoch": steps_per_epoch,
            "corpus": {"captions": list(corpus.captions), "entities": dict(corpus.entities)},
            "progress": "bar" if terminal else "lines",
            "best_checkpoint": str(run_dir / "best.pt"),
            "grouped": grouped,
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
            callbacks=[MlflowReporter(run, run_dir), *(callbacks or [])],
            # Ray Train's own INFO (worker groups, checkpoints, reports) in its log files only
            logging_config=ray.LoggingConfig(log_level="WARNING"),
        ),
        datasets={"train": dataset},
        dataset_config=ray.train.DataConfig(
            execution_options=ray.data.ExecutionOptions(preserve_order=True)
        ),
    )
    with run.ending():  # FINISHED, or FAILED when training or logging raises
        result = trainer.fit()
        metrics = {k: float(v) for k, v in (result.metrics or {}).items() if is_finite_number(v)}
        metrics[LR_STEP_PERIOD] = float(step_period(config.optim, steps_per_epoch))
        last = run_dir / "last.pt"
        best = run_dir / "best.pt"
        run.log_metrics(
            {f"final/{k}": v for k, v in metrics.items() if k.startswith(f"{config.test_split}/")}
        )
        run.set_tag("xmr.checkpoint", str(last))
        if best.is_file():
            run.set_tag("xmr.best_checkpoint", str(best))
        if config.convergence is not None and BEST_EPOCH in metrics:
            reason = stop_reason(
                config.convergence,
                split=config.eval_split,
                best_epoch=int(metrics[BEST_EPOCH]),
                stopped_epoch=int(metrics[STOPPED_EPOCH]),
                plateaued=bool(metrics[PLATEAUED]),
            )
            print(f"{config.name}: {reason}")
            run.set_tag(STOP_REASON_TAG, reason)
        if not run.has_dataset_inputs():
            _log_inputs(run, data, config, root)
    record = {"config": config.to_dict(), FINAL_METRICS_KEY: metrics}
    write_run_record(run_dir / RUN_FILE, run, RUN_ID_KEY, record)  # finished: a rerun reuses it
    best_checkpoint = best if best.is_file() else None
    return TrainResult(metrics, run_dir, last, best_checkpoint, run.run_id, data, experiment)
