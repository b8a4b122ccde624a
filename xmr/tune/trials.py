"""What one trial of a sweep runs: Ray Tune function trainables, one per swept command.

- :func:`train_trial` trains with ``xmr train``'s code (a ``TorchTrainer`` inside the trial)
  and forwards every epoch's report to Tune (for schedulers), then the final test metrics.
- :func:`eval_trial` scores a split that the sweep encoded once (:func:`xmr.eval.encode.
  encode`), e.g. under another CLIP-clip ``m``.

Each trial is one MLflow child run under the sweep's parent run, named after its swept values
and tagged ``xmr.sweep_id`` / ``xmr.trial_id``; its params and metrics are exactly those of
``xmr train`` / ``xmr eval``. A rerun trial (a resumed sweep) continues its own child run.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any

from ray import tune

from xmr.storage import StoragePath
from xmr.tracking import (
    TrackedRun,
    find_runs,
    is_finite_number,
    resume_run,
    start_run,
)

OBJECTIVE = "objective"
"""The key each trial reports for the search algorithm: the space's first metric (abs taken
when the space says so)."""


@dataclass(frozen=True)
class SweepContext:
    """What every trial of one sweep shares (sent to the trial actors)."""

    sweep_id: str
    experiment: str
    parent_run_id: str
    tracking_uri: str
    runs_dir: StoragePath  # training trials' run folders
    swept: tuple[str, ...]  # the swept option names (for run names)
    objective: str
    objective_abs: bool
    cpus_per_trial: float
    gpus_per_trial: float
    report_epochs: bool = False  # forward every epoch's metrics to Tune (for ASHA)

    def run_name(self, options: dict[str, Any]) -> str:
        """A trial's run name: its swept values (``fair_alpha=0.4``)."""
        return ", ".join(f"{k}={_short(options.get(k, '?'))}" for k in self.swept)

    def tags(self, trial_id: str) -> dict[str, str]:
        return {"xmr.sweep_id": self.sweep_id, "xmr.trial_id": trial_id}

    def objective_value(self, metrics: dict[str, Any]) -> dict[str, float]:
        """``{OBJECTIVE: value}`` when the trial has the objective metric."""
        value = metrics.get(self.objective)
        if not is_finite_number(value):
            return {}
        return {OBJECTIVE: abs(value) if self.objective_abs else float(value)}


DRIVER_MEMORY = 256 * 2**20
"""Bytes of Ray's ``memory`` resource a training trial's own process reserves: it only drives
its TorchTrainer, and Tune needs a non-empty request. Not CPU: a sliver of a CPU on a node
leaves that node a whole core short for a worker."""


@dataclass(frozen=True)
class TrialFootprint:
    """Every reservation one training trial makes on the cluster: its driver (Tune's trial
    process, :data:`DRIVER_MEMORY` bytes), its Ray Train workers and its loader actors (Ray
    Train's controller, Ray Data's split coordinator and the loader's clock reserve nothing).
    """

    workers: int
    cpus_per_worker: float
    gpus_per_worker: float
    loaders: int
    loader_cpus: float
    driver_memory: float = DRIVER_MEMORY

    @classmethod
    def of(cls, options: dict[str, Any], cpus: float, gpus: float) -> TrialFootprint:
        """The footprint of a trial of ``options`` (``xmr train`` options) given ``cpus`` and
        ``gpus`` per trial (split over its workers, at least one CPU each)."""
        from xmr.train.config import TrainConfig

        workers = int(options.get("workers", TrainConfig.workers))
        return cls(
            workers=workers,
            cpus_per_worker=float(max(1, int(cpus // workers))),
            gpus_per_worker=gpus / workers,
            # a trial's resources are reserved up front: "as many as the nodes spare" is 1
            loaders=int(options.get("loaders") or TrainConfig.loaders or 1),
            loader_cpus=float(options.get("loader_cpus", TrainConfig.loader_cpus)),
        )

    def bundles(self) -> list[dict[str, float]]:
        """The trial's reservations, one per process (resource -> amount), largest first."""
        worker = {"CPU": self.cpus_per_worker, "GPU": self.gpus_per_worker}
        loader = {"CPU": self.loader_cpus}
        bundles = (
            [worker] * self.workers + [loader] * self.loaders + [{"memory": self.driver_memory}]
        )
        bundles = [{k: v for k, v in b.items() if v > 0} for b in bundles]
        return [b for b in bundles if b]


def trials_that_fit(nodes: list[dict[str, float]], footprint: TrialFootprint) -> int:
    """How many trials of ``footprint`` the nodes (each's total resources) hold at once, every
    reservation of every trial on one node (first fit, largest first: a Ray Train worker
    group's bundles may spread over nodes, but each bundle stays on one).

    >>> one_cpu = {"CPU": 1.0, "memory": 2.0**33}
    >>> trials_that_fit([one_cpu, one_cpu], TrialFootprint(1, 1.0, 0.0, 1, 0.0))
    2
    >>> trials_that_fit([{"CPU": 2.0, "memory": 2.0**33}], TrialFootprint(1, 2.0, 0.0, 1, 0.5))
    0
    """
    free = [dict(node) for node in nodes]
    bundles = footprint.bundles()
    count = 0
    while _place(free, bundles):
        count += 1
    return count


def _place(free: list[dict[str, float]], bundles: list[dict[str, float]]) -> bool:
    """Take ``bundles`` out of ``free`` (each on the first node with room for it); False, and
    ``free`` unchanged, when one does not fit."""
    taken = [dict(node) for node in free]
    for bundle in bundles:
        for node in taken:
            if all(node.get(k, 0.0) >= v - 1e-9 for k, v in bundle.items()):
                for k, v in bundle.items():
                    node[k] = node.get(k, 0.0) - v
                break
        else:
            return False
    free[:] = taken
    return True


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _trial_id() -> str:
    return tune.get_context().get_trial_id()


def existing_child_run(context: SweepContext, trial_id: str) -> str | None:
    """The child run a previous attempt of this trial started, if any."""
    runs = find_runs(
        context.experiment,
        context.tags(trial_id),
        tracking_uri=context.tracking_uri,
        max_results=1,
    )
    return runs[0].info.run_id if runs else None


def _record_failure(context: SweepContext, trial_id: str, options: dict, exc: BaseException):
    """Mark the trial's child run FAILED with the reason (creating it when it never started);
    a run KILLED by its sweep's stop stays KILLED."""
    run_id = existing_child_run(context, trial_id)
    if run_id is not None and TrackedRun(run_id, context.tracking_uri).status() == "KILLED":
        return
    if run_id is None:
        with start_run(
            context.experiment,
            run_name=context.run_name(options),
            tracking_uri=context.tracking_uri,
            tags=context.tags(trial_id),
            parent_run_id=context.parent_run_id,
        ) as created:
            run_id = created.run_id
    run = TrackedRun(run_id, context.tracking_uri)
    reason = f"{type(exc).__name__}: {exc}"
    run.set_tag("xmr.error", reason[:4000])
    run.log_text("".join(traceback.format_exception(exc)), "error.txt")
    run.end("FAILED")


def train_trial(options: dict[str, Any], *, context: SweepContext) -> None:
    """Train one configuration of a training sweep (``options``: ``xmr train`` options)."""
    from ray.tune.integration.ray_train import TuneReportCallback

    from xmr.train.config import resolve_config
    from xmr.train.run import train

    trial_id = _trial_id()
    fields = dict(options)
    try:
        footprint = TrialFootprint.of(fields, context.cpus_per_trial, context.gpus_per_trial)
        fields.pop("workers", None)
        fields["loaders"] = footprint.loaders
        config = resolve_config(
            fields.pop("model", "clip"),
            workers=footprint.workers,
            cpus_per_worker=int(footprint.cpus_per_worker),
            gpus_per_worker=footprint.gpus_per_worker,
            name=f"trial-{trial_id}",
            storage=context.runs_dir,
            **fields,
        )
        result = train(
            config,
            tracking_uri=context.tracking_uri,
            tags=context.tags(trial_id),
            experiment=context.experiment,
            parent_run_id=context.parent_run_id,
            callbacks=[TuneReportCallback()] if context.report_epochs else [],
            run_name=context.run_name(options),
        )
    except Exception as exc:
        _record_failure(context, trial_id, options, exc)
        raise
    tune.report({**result.metrics, **context.objective_value(result.metrics)})


def eval_trial(options: dict[str, Any], *, context: SweepContext, encoded: Any) -> None:
    """Score one configuration of an eval sweep on the split the sweep encoded once."""
    from xmr.eval.config import eval_config
    from xmr.eval.report import log_result
    from xmr.eval.score import score

    trial_id = _trial_id()
    try:
        config = eval_config(**options)
        run_id = existing_child_run(context, trial_id)
        if run_id is None:
            opened = start_run(
                context.experiment,
                run_name=context.run_name(options),
                tracking_uri=context.tracking_uri,
                tags={"xmr.command": "eval", **context.tags(trial_id)},
                parent_run_id=context.parent_run_id,
            )
        else:
            opened = resume_run(run_id, tracking_uri=context.tracking_uri)
        with opened as run:
            # First, so that a trial that fails still shows what it ran.
            run.log_params({**config.params(), "data.root": str(encoded.root)})
            result = score(encoded, config)
            log_result(run, result, config, examples=False)
    except Exception as exc:
        _record_failure(context, trial_id, options, exc)
        raise
    tune.report({**result.metrics, **context.objective_value(result.metrics)})
