"""A training run's record: its folder's ``xmr_run.json`` and its MLflow run.

:class:`RunRecord` is everything :func:`~xmr.train.run.train` writes about a run besides its
checkpoints: the check that a rerun has the same config, the finished run's results (a rerun
reuses them), the MLflow run with its params and dataset inputs, each epoch's metrics, and
the final metrics, tags and stop reason. No Ray: Ray Train's callback hands each report here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from xmr.storage import StoragePath
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
from xmr.train.data import data_digest
from xmr.train.optim import LR_STEP_PERIOD, step_period
from xmr.train.plan import RunPlan
from xmr.train.result import FINAL_METRICS_KEY, RUN_FILE, RUN_ID_KEY, TrainResult

STOP_REASON_TAG = "xmr.stop_reason"  # why a run trained with --epochs auto stopped where it did
UNLOGGED = ("epoch", "improved")  # report keys that are not metrics (the step; a flag)


class RunRecord:
    """The record of the run ``config`` names (its folder ``storage/name``), logged to
    ``tracking_uri`` (resolved, :func:`~xmr.tracking.resolve_tracking_uri`) in
    ``experiment`` (default ``xmr/train/<dataset>``)."""

    def __init__(
        self, config: TrainConfig, tracking_uri: str | None, experiment: str | None
    ) -> None:
        self.run_dir: StoragePath = config.storage / config.name
        self.uri = resolve_tracking_uri(tracking_uri)
        self.experiment = experiment or experiment_name("train", config.dataset)
        self.last = self.run_dir / "last.pt"
        self.best = self.run_dir / "best.pt"

    def check_same_config(self, config: TrainConfig) -> None:
        """Refuse ``config`` when the folder holds a run of another config."""
        record = self.run_dir / RUN_FILE
        if not record.is_file():
            return
        saved = TrainConfig.from_dict(json.loads(record.read_text())["config"])
        if saved.fingerprint() != config.fingerprint():
            raise ValueError(
                f"{self.run_dir} holds run {config.name!r} with another config "
                f"({saved.fingerprint()} vs {config.fingerprint()}); use another --name to "
                "start a new run, or the same flags to resume it"
            )

    def finished(self, plan: RunPlan) -> TrainResult | None:
        """The result of the run that finished training here and logged to this store, after
        a line saying it is reused; None when it did not finish (or logged elsewhere)."""
        record = self.run_dir / RUN_FILE
        if not record.is_file() or not self.last.is_file():
            return None
        saved = json.loads(record.read_text()).get(FINAL_METRICS_KEY)
        run = recorded_run(record, RUN_ID_KEY, self.uri, reopen=False) if saved else None
        if run is None:
            return None
        metrics = {key: float(value) for key, value in saved.items()}
        config = plan.config
        print(
            f"{config.name}: trained to epoch {int(metrics.get('epoch', config.epochs))} before; "
            f"its results are reused (remove {self.run_dir} to train it again)"
        )
        return self._result(metrics, run.run_id, plan)

    def open(
        self, plan: RunPlan, tags: Mapping[str, str], parent_run_id: str | None, run_name: str
    ) -> TrackedRun:
        """The MLflow run (RUNNING): the one a previous attempt started, or a new one named
        ``run_name`` with the config's params, nested under ``parent_run_id``; the data's and
        the run length's params are added where missing."""
        record = self.run_dir / RUN_FILE
        run = recorded_run(record, RUN_ID_KEY, self.uri)
        if run is None:
            with start_run(
                self.experiment,
                run_name=run_name,
                tracking_uri=self.uri,
                tags={"xmr.command": "train", "xmr.run_dir": str(self.run_dir), **tags},
                parent_run_id=parent_run_id,
                keep_running=True,
            ) as run:
                run.log_params(plan.config.params())
            write_run_record(record, run, RUN_ID_KEY, {"config": plan.config.to_dict()})
        existing = run.params()
        missing = {k: v for k, v in _plan_params(plan).items() if k not in existing}
        if missing:
            run.log_params(missing)
        return run

    def log_epoch(self, run: TrackedRun, report: Mapping[str, Any]) -> None:
        """One epoch's report as metrics at step ``epoch``."""
        run.log_metrics(
            {
                key: float(value)
                for key, value in report.items()
                if isinstance(value, int | float) and key not in UNLOGGED
            },
            step=int(report["epoch"]),
            timestamp_ms=0,
        )

    def close(
        self, run: TrackedRun, plan: RunPlan, config: TrainConfig, final: Mapping[str, Any]
    ) -> dict[str, float]:
        """Log the run's end from the last report ``final``: the test metrics as ``final/...``,
        the checkpoints' tags, the stop reason and the dataset inputs. Returns the final
        metrics (with the learning rate's step period)."""
        metrics = {k: float(v) for k, v in final.items() if is_finite_number(v)}
        metrics[LR_STEP_PERIOD] = float(step_period(config.optim, plan.steps_per_epoch))
        test = f"{config.test_split}/"
        run.log_metrics({f"final/{k}": v for k, v in metrics.items() if k.startswith(test)})
        run.set_tag("xmr.checkpoint", str(self.last))
        if self.best.is_file():
            run.set_tag("xmr.best_checkpoint", str(self.best))
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
            _log_inputs(run, plan)
        return metrics

    def finish(
        self, run: TrackedRun, plan: RunPlan, config: TrainConfig, metrics: dict[str, float]
    ) -> TrainResult:
        """Write the finished run's record (a rerun reuses it) and its result."""
        fields = {"config": config.to_dict(), FINAL_METRICS_KEY: metrics}
        write_run_record(self.run_dir / RUN_FILE, run, RUN_ID_KEY, fields)
        return self._result(metrics, run.run_id, plan)

    def _result(self, metrics: dict[str, float], run_id: str, plan: RunPlan) -> TrainResult:
        best = self.best if self.best.is_file() else None
        return TrainResult(
            metrics, self.run_dir, self.last, best, run_id, plan.data, self.experiment
        )


def _plan_params(plan: RunPlan) -> dict[str, str]:
    """The params the data and the run's length decide."""
    config, data = plan.config, plan.data
    return {
        "data.pairs_original": str(data.original),
        "data.pairs_synthetic": str(data.synthetic),
        "data.digest": data_digest(data.table),
        "data.dprime_digest": data.dprime_digest or "none",
        "data.synth_mode": data.synth_mode or "none",
        "train.total_steps": str(plan.total_steps),
        "train.lr_step_period": str(step_period(config.optim, plan.steps_per_epoch)),
        # data.synth_ratio is the ratio asked for; D′ may have had fewer pairs
        **({"data.synth_ratio_used": f"{data.synth_ratio:.6g}"} if config.synth else {}),
    }


def _log_inputs(run: TrackedRun, plan: RunPlan) -> None:
    """D and the D′ sample as MLflow dataset inputs (metadata only, no pixels)."""
    config, data = plan.config, plan.data
    table = data.table.select(["image_id", "caption", "source", "image_gender"]).to_pandas()
    table["image_id"] = table["image_id"].astype("float64")  # MLflow's schema hint otherwise
    parts = []
    if data.original:  # none with --synth-only
        parts.append((table[table.source == "D"], plan.root, f"{config.dataset}/{config.split}"))
    if data.synthetic:
        parts.append((table[table.source != "D"], config.synth, "D′"))
    for frame, source, name in parts:
        run.log_dataset(frame, source=str(source), name=name, context="training")
