"""``xmr train``: build the training table, run :func:`~xmr.train.loop.train_loop` on a
``TorchTrainer``, and log the run to MLflow.

Layout of a run under ``storage/name``::

    epoch_NNNN/          Ray Train checkpoints (model.pt + train_state.pt), the latest two kept
    last.pt              the final weights (``xmr eval --checkpoint``)
    best.pt              the weights with the best validation RSUM (when --eval-every is set)
    xmr_run.json         the config and the MLflow run id (a rerun continues the same run)

Rerunning the same name (same ``storage``) resumes from the latest checkpoint; a finished run
only re-reports its final metrics. Worker failures restart the worker group from the latest
checkpoint up to ``max_failures`` times.
"""

from __future__ import annotations

import json
import math
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
import ray
import ray.train
from mlflow.entities import Metric
from ray.train.torch import TorchTrainer

from xmr.data import read_dataset
from xmr.data.default_world import default_toyworld
from xmr.models import check_spec
from xmr.pipeline.ray_executor import init_ray
from xmr.tracking import resolve_tracking_uri, start_run
from xmr.train.config import TrainConfig
from xmr.train.data import TrainingData, data_digest, training_data
from xmr.train.loop import MODEL_FILE, train_loop

RUN_FILE = "xmr_run.json"


@dataclass
class TrainResult:
    """The outcome of :func:`train`: final metrics (MLflow names), where the weights are."""

    metrics: dict[str, float]
    run_dir: Path
    last_checkpoint: Path
    best_checkpoint: Path | None
    mlflow_run_id: str
    data: TrainingData


class MlflowReporter(ray.train.UserCallback):
    """Logs every epoch's metrics to the run's MLflow run and exports ``last.pt`` / ``best.pt``.

    Runs in the Ray Train controller (the driver's side), so workers never touch the tracking
    store.
    """

    def __init__(self, tracking_uri: str, run_id: str, run_dir: Path) -> None:
        self.tracking_uri = tracking_uri
        self.run_id = run_id
        self.run_dir = run_dir

    def after_report(self, run_context, metrics: list[dict[str, Any]], checkpoint) -> None:
        values = metrics[0]  # rank 0 reports the evaluation
        step = int(values["epoch"])
        client = mlflow.MlflowClient(self.tracking_uri)
        client.log_batch(
            self.run_id,
            metrics=[
                Metric(key, float(value), 0, step)
                for key, value in values.items()
                if isinstance(value, int | float) and key not in ("epoch", "improved")
            ],
        )
        if checkpoint is not None:
            with checkpoint.as_directory() as directory:
                _copy_atomic(Path(directory) / MODEL_FILE, self.run_dir / "last.pt")
                if values.get("improved"):
                    _copy_atomic(Path(directory) / MODEL_FILE, self.run_dir / "best.pt")


def _copy_atomic(source: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copyfile(source, tmp)
    tmp.replace(target)


def _mlflow_run(
    config: TrainConfig,
    run_dir: Path,
    tracking_uri: str,
    tags: dict[str, str],
    experiment: str,
    parent_run_id: str | None,
) -> str:
    """The MLflow run of ``run_dir``: the one a previous attempt started, or a new one."""
    record = run_dir / RUN_FILE
    if record.is_file():
        saved = json.loads(record.read_text())
        if saved.get("tracking_uri") == tracking_uri:
            return saved["mlflow_run_id"]
    with start_run(
        experiment,
        run_name=config.name,
        tracking_uri=tracking_uri,
        tags={"xmr.command": "train", "xmr.run_dir": str(run_dir), **tags},
        parent_run_id=parent_run_id,
    ) as run:
        mlflow.log_params(config.params())
        run_id = run.info.run_id
    mlflow.MlflowClient(tracking_uri).set_terminated(run_id, "RUNNING")
    run_dir.mkdir(parents=True, exist_ok=True)
    record.write_text(
        json.dumps(
            {"config": config.to_dict(), "mlflow_run_id": run_id, "tracking_uri": tracking_uri},
            indent=2,
        )
    )
    return run_id


def _check_same_config(config: TrainConfig, run_dir: Path) -> None:
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


def _log_inputs(data: TrainingData, config: TrainConfig, root: Path) -> None:
    """D and the D′ sample as MLflow dataset inputs (metadata only, no pixels)."""
    table = data.table.select(["image_id", "caption", "source", "image_gender"]).to_pandas()
    table["image_id"] = table["image_id"].astype("float64")  # MLflow's schema hint otherwise
    parts = [(table[table.source == "D"], root, f"{config.dataset}/{config.split}")]
    if data.synthetic:
        parts.append((table[table.source != "D"], config.synth, "D′"))
    with warnings.catch_warnings():  # MLflow 3.17 registers the local source type twice
        warnings.filterwarnings("ignore", message="The specified dataset source")
        for frame, source, name in parts:
            dataset = mlflow.data.from_pandas(frame, source=str(source), name=name)
            mlflow.log_input(dataset, context="training")


def default_world(config: TrainConfig) -> Path:
    """The embedded ToyWorld for ``config``: the shop world (product entities) for EI-CLIP."""
    mode = "shop" if config.model.family == "eiclip" else "scene"
    return default_toyworld(config.seed, mode=mode)


def train(
    config: TrainConfig,
    *,
    address: str | None = None,
    tracking_uri: str | None = None,
    tags: dict[str, str] | None = None,
    experiment: str | None = None,
    parent_run_id: str | None = None,
    callbacks: list[ray.train.UserCallback] | None = None,
    progress: bool = True,
) -> TrainResult:
    """Train ``config`` on Ray Train and return the final metrics and checkpoint paths.

    ``tags`` are added to the MLflow run when it is created, in ``experiment`` (default
    ``xmr/train/<dataset>``), nested under ``parent_run_id`` when given (a sweep's trial).
    ``callbacks`` join the run's Ray Train callbacks (a Tune trial forwards reports to Tune).
    ``progress``: the workers' per-epoch progress bar (sweeps keep only the epoch lines).

    Raises:
        ValueError / FileNotFoundError: bad config or data, before any worker starts.
        ray.train.TrainingFailedError: the workers failed more than ``max_failures`` times.
    """
    check_spec(config.model)
    root = Path(config.data) if config.data else default_world(config)
    run_dir = config.storage / config.name
    _check_same_config(config, run_dir)
    records = read_dataset(config.dataset, root, config.split)
    if not records:
        raise ValueError(f"{root}: split {config.split!r} has no usable images")
    data = training_data(records, config.synth, config.synth_ratio, config.seed)
    steps_per_epoch = data.table.num_rows // config.workers // config.per_worker_batch
    if steps_per_epoch < 1:
        raise ValueError(
            f"{data.table.num_rows} training pairs give no full batch of "
            f"{config.per_worker_batch} per worker; lower --batch-size"
        )

    uri = resolve_tracking_uri(tracking_uri)
    experiment = experiment or f"xmr/train/{config.dataset}"
    run_id = _mlflow_run(config, run_dir, uri, dict(tags or {}), experiment, parent_run_id)
    client = mlflow.MlflowClient(uri)
    params = {
        "data.pairs_original": str(data.original),
        "data.pairs_synthetic": str(data.synthetic),
        "data.digest": data_digest(data.table),
        "data.dprime_digest": data.dprime_digest or "none",
    }
    existing = client.get_run(run_id).data.params
    for key, value in params.items():
        if key not in existing:
            client.log_param(run_id, key, value)

    init_ray(address, log_to_driver=True)  # the workers' progress bars and epoch lines
    corpus = data.corpus()
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={
            "config": config.to_dict(),
            "data_root": str(root),
            "steps_per_epoch": steps_per_epoch,
            "corpus": {"captions": list(corpus.captions), "entities": dict(corpus.entities)},
            "progress": progress,
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
            callbacks=[MlflowReporter(uri, run_id, run_dir), *(callbacks or [])],
        ),
        datasets={"train": ray.data.from_arrow(data.table)},
        dataset_config=ray.train.DataConfig(
            execution_options=ray.data.ExecutionOptions(preserve_order=True)
        ),
    )
    try:
        result = trainer.fit()
    except BaseException:
        client.set_terminated(run_id, "FAILED")
        raise
    metrics = {k: float(v) for k, v in (result.metrics or {}).items() if _is_number(v)}
    last = run_dir / "last.pt"
    best = run_dir / "best.pt"
    with start_run_resumed(uri, run_id):
        for key, value in metrics.items():
            if key.startswith(f"{config.test_split}/"):
                mlflow.log_metric(f"final/{key}", value)
        mlflow.set_tag("xmr.checkpoint", str(last))
        if best.is_file():
            mlflow.set_tag("xmr.best_checkpoint", str(best))
        if not client.get_run(run_id).inputs.dataset_inputs:
            _log_inputs(data, config, root)
    client.set_terminated(run_id, "FINISHED")
    return TrainResult(metrics, run_dir, last, best if best.is_file() else None, run_id, data)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def start_run_resumed(tracking_uri: str, run_id: str) -> mlflow.ActiveRun:
    """Re-open an existing run (to log artifacts, inputs and tags with the fluent API)."""
    mlflow.set_tracking_uri(tracking_uri)
    return mlflow.start_run(run_id=run_id)
