"""What a training run leaves: its record file in the run folder, and what
:func:`~xmr.train.run.train` returns (no Ray: other modules read a run's record without it)."""

from __future__ import annotations

from dataclasses import dataclass

from xmr.storage import StoragePath
from xmr.train.data import TrainingData

RUN_FILE = "xmr_run.json"
RUN_ID_KEY = "mlflow_run_id"  # the MLflow run's id in RUN_FILE
FINAL_METRICS_KEY = "final_metrics"  # in RUN_FILE once training has finished


@dataclass
class TrainResult:
    """The outcome of :func:`train`: final metrics (MLflow names), where the weights are."""

    metrics: dict[str, float]
    run_dir: StoragePath
    last_checkpoint: StoragePath
    best_checkpoint: StoragePath | None
    mlflow_run_id: str
    data: TrainingData
    experiment: str  # the MLflow experiment of the run
