"""A job: one of the papers' experiments as a sequence of xmr steps, run as one Ray job.

Each step calls xmr's own API (``synthesize``, ``train``, ``run_sweep``, ...) and writes its
outputs into the job's folder, ``<storage>/<name>/``::

    job.json            the job's options, its MLflow run and store
    steps/<step>.json   a finished step: its MLflow run, metrics, outputs and duration
    world/ dprime/ runs/ sweeps/ ...   the steps' outputs

Submitting the same command again resumes the job: a finished step (its record written and
its outputs still there) is skipped; an interrupted one runs again and resumes through its own
mechanism (D′ shards, Ray Train checkpoints, Tune's state). Other options under the same name
are refused: a job's outputs come from one set of options.

MLflow: the job is one run in experiment ``xmr/jobs/<kind>``; each step's own run (a D′ build,
a training run, a sweep) is its child in the same experiment, so the MLflow UI shows the job as
one tree, and the job's run holds the comparison its last step makes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rich.console import Console, RenderableType

from xmr.progress import print_heading, summary_line
from xmr.storage import StoragePath, check_bucket, storage_path, write_atomic
from xmr.tracking import (
    TrackedRun,
    experiment_name,
    recorded_run,
    resolve_tracking_uri,
    run_link,
    start_run,
    write_run_record,
)

JOB_FILE = "job.json"
STEPS_DIR = "steps"
JOB_RUN_KEY = "job_run_id"


@dataclass(frozen=True)
class StepOutcome:
    """What a finished step leaves behind.

    Attributes:
        run_id: the MLflow run the step logged (a child of the job's run); None if it made none.
        metrics: the step's headline numbers (a training run's final test metrics, a build's
            row counts), by MLflow metric name.
        outputs: the files and folders later steps read, by name (absolute paths).
        seconds: how long the step ran, in seconds (the attempt that finished it).
        notes: what the job's report should say about the outcome, one line each (e.g. why a
            comparison has no interval for some metrics).
    """

    run_id: str | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    outputs: Mapping[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "metrics": dict(self.metrics),
            "outputs": dict(self.outputs),
            "seconds": self.seconds,
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, saved: Mapping[str, Any]) -> StepOutcome:
        return cls(
            saved.get("run_id"),
            {k: float(v) for k, v in saved.get("metrics", {}).items()},
            {k: str(v) for k, v in saved.get("outputs", {}).items()},
            float(saved.get("seconds", 0.0)),
            tuple(str(note) for note in saved.get("notes", ())),
        )


@dataclass(frozen=True)
class StepContext:
    """What a step runs with: where its outputs and its MLflow run go.

    Attributes:
        folder: the job's folder (absolute); a step writes its outputs under it.
        experiment: the job's MLflow experiment; the step's own run goes there ...
        parent_run_id: ... nested under the job's run.
        tracking_uri: the resolved MLflow store.
        address: the Ray cluster (None: ``RAY_ADDRESS``, which a Ray job sets, or local Ray).
        outcomes: the outcomes of the steps before this one, by step name.
    """

    folder: StoragePath
    experiment: str
    parent_run_id: str
    tracking_uri: str
    address: str | None
    outcomes: Mapping[str, StepOutcome]

    @property
    def job_run(self) -> TrackedRun:
        """The job's own run (a comparison step logs its table there)."""
        return TrackedRun(self.parent_run_id, self.tracking_uri)


@dataclass(frozen=True)
class Step:
    """One step of a job.

    Attributes:
        name: its name in the plan, the MLflow run names and ``steps/<name>.json``.
        summary: what it does, in one line.
        command: the xmr command line that does the same by hand (shown by ``--dry-run``).
        run: does the work and returns its outcome; raises on failure (the job stops there).
    """

    name: str
    summary: str
    command: str
    run: Callable[[StepContext], StepOutcome]


@dataclass(frozen=True)
class Job:
    """A job ready to run: its kind (``odmap``), name, folder, defining options and steps.

    ``params`` are the options that decide the outputs (not where it runs or logs); a job
    resubmitted under the same name must have the same ones. ``report`` renders the finished
    job's result for the console from the steps' outcomes (shown again when a resubmission
    finds every step done).
    """

    kind: str
    name: str
    folder: StoragePath
    params: Mapping[str, str]
    steps: Sequence[Step]
    report: Callable[[Mapping[str, StepOutcome]], RenderableType] | None = None

    @property
    def experiment(self) -> str:
        """The job's MLflow experiment, ``xmr/jobs/<kind>``."""
        return experiment_name("jobs", self.kind)


@dataclass(frozen=True)
class JobResult:
    """A finished job: its MLflow run (on ``tracking_uri``), every step's outcome (by name),
    the steps it skipped, and how long this submission ran (seconds)."""

    job: Job
    run_id: str
    outcomes: Mapping[str, StepOutcome]
    skipped: Sequence[str]
    tracking_uri: str
    seconds: float = 0.0

    def summary(self) -> str:
        """The line that closes the job: its name, time, steps run and skipped, folder and
        MLflow run."""
        numbers = {
            "steps run": len(self.job.steps) - len(self.skipped),
            "finished before": len(self.skipped),
        }
        run = run_link(self.run_id, tracking_uri=self.tracking_uri)
        where = f"{self.job.folder} ({run} in {self.job.experiment})"
        return summary_line(f"job {self.job.name}", self.seconds, numbers, where)


def step_record(folder: StoragePath, step: Step) -> StoragePath:
    """Where a finished step's outcome is recorded."""
    return folder / STEPS_DIR / f"{step.name}.json"


def finished_outcome(folder: StoragePath, step: Step) -> StepOutcome | None:
    """The recorded outcome of ``step`` when it finished before and its outputs are all still
    there; None when it has to run."""
    record = step_record(folder, step)
    if not record.is_file():
        return None
    outcome = StepOutcome.from_json(json.loads(record.read_text()))
    if not all(storage_path(path).exists() for path in outcome.outputs.values()):
        return None
    return outcome


def check_same_job(job: Job) -> None:
    """Refuse to resume ``job.folder`` with other options than it was started with.

    Raises:
        ValueError: names the options that differ.
    """
    record = job.folder / JOB_FILE
    if not record.is_file():
        return
    saved = json.loads(record.read_text()).get("params", {})
    differ = sorted(k for k in {*saved, *job.params} if saved.get(k) != job.params.get(k))
    if differ:
        shown = ", ".join(f"{k}: {saved.get(k)!r} -> {job.params.get(k)!r}" for k in differ)
        raise ValueError(
            f"{job.folder} holds job {job.name!r} started with other options ({shown}); start "
            "a new job in another folder (--name or --storage; xmr demo: --workdir), or give "
            "the same options to resume this one"
        )


def print_plan(job: Job, console: Console, *, commands: bool = True) -> None:
    """The job's steps, each marked done (finished before: it will be skipped) or to do, with
    the xmr command line that does the same by hand (``commands``)."""
    console.print(f"job [bold]{job.name}[/bold] in {job.folder}", soft_wrap=True)
    for number, step in enumerate(job.steps, start=1):
        done = finished_outcome(job.folder, step) is not None
        state = "[green]done [/green]" if done else "to do"
        console.print(
            f"  {number}. {state}  [bold]{step.name}[/bold]: {step.summary}", soft_wrap=True
        )
        if commands:
            console.print(f"       $ {step.command}", soft_wrap=True, markup=False, highlight=False)


HEADLINE = (
    "written", "errors", "trials", "trials_failed",
    "recall_i2t_at_10", "recall_t2i_at_10", "odmap_at_1", "bias_at_10", "binding/accuracy",
)  # fmt: skip
"""The numbers a step's summary line shows, when its outcome has them (after a split prefix:
``test/odmap_at_1``), in this order; a sweep's ``best/…`` follow."""


def headline(metrics: Mapping[str, float]) -> dict[str, float]:
    """The few numbers of ``metrics`` that say how a step went (:data:`HEADLINE`, then a
    sweep's best values), by their short names.

    >>> headline({"test/odmap_at_1": 0.5, "test/odmap_at_1_ci_low": 0.4, "planned": 9.0})
    {'odmap_at_1': 0.5}
    """
    short = {key.split("/", 1)[-1]: value for key, value in metrics.items()}
    chosen = {key: short[key] for key in HEADLINE if key in short}
    chosen.update({k: v for k, v in metrics.items() if k.startswith("best/")})
    return chosen


def print_step_summary(
    console: Console, step: Step, outcome: StepOutcome, tracking_uri: str
) -> None:
    """The line that closes a step: its name, time, headline numbers and where its output
    (the first of its outputs) and MLflow run are."""
    where = next(iter(outcome.outputs.values()), None)
    if outcome.run_id is not None:
        run = run_link(outcome.run_id, tracking_uri=tracking_uri)
        where = f"{where} ({run})" if where else run
    line = summary_line(step.name, outcome.seconds, headline(outcome.metrics), where)
    console.print(line, soft_wrap=True, markup=False, highlight=False)


def _job_run(job: Job, tracking_uri: str) -> TrackedRun:
    """The job's MLflow run (RUNNING): the one an earlier submission started, or a new one."""
    record = job.folder / JOB_FILE
    resumed = recorded_run(record, JOB_RUN_KEY, tracking_uri)
    if resumed is not None:
        return resumed
    with start_run(
        job.experiment,
        run_name=job.name,
        tracking_uri=tracking_uri,
        tags={"xmr.command": "job", "xmr.job": job.kind, "xmr.job_folder": str(job.folder)},
        keep_running=True,
    ) as run:
        run.log_params({f"job.{key}": value for key, value in job.params.items()})
    write_run_record(record, run, JOB_RUN_KEY, {"kind": job.kind, "params": dict(job.params)})
    return run


def _write_outcome(record: StoragePath, outcome: StepOutcome) -> None:
    # A record is whole or absent: it is what marks the step done.
    write_atomic(record, json.dumps(outcome.to_json(), indent=2) + "\n")


def run_job(
    job: Job,
    *,
    tracking_uri: str | None = None,
    address: str | None = None,
    console: Console | None = None,
) -> JobResult:
    """Run ``job``'s steps in order, skipping those that finished before (see the module).

    The job's MLflow run ends FINISHED when every step has, FAILED when a step raises (the
    exception propagates; submitting again resumes from that step).

    Raises:
        ValueError: the folder holds the same-named job with other options.
    """
    console = console or Console()
    check_bucket(job.folder, "--storage")
    check_same_job(job)
    uri = resolve_tracking_uri(tracking_uri)
    run = _job_run(job, uri)
    outcomes: dict[str, StepOutcome] = {}
    skipped: list[str] = []
    total = len(job.steps)
    job_started = time.perf_counter()
    with run.ending():
        for number, step in enumerate(job.steps, start=1):
            done = finished_outcome(job.folder, step)
            if done is not None:
                print_heading(console, f"{number}/{total} {step.name}: finished before, skipped")
                outcomes[step.name] = done
                skipped.append(step.name)
                continue
            print_heading(console, f"{number}/{total} {step.name}: {step.summary}")
            context = StepContext(job.folder, job.experiment, run.run_id, uri, address, outcomes)
            started = time.perf_counter()
            outcome = step.run(context)
            seconds = time.perf_counter() - started
            outcome = replace(outcome, seconds=seconds)
            _write_outcome(step_record(job.folder, step), outcome)
            run.log_metrics({f"time/{step.name}": seconds})
            outcomes[step.name] = outcome
            print_step_summary(console, step, outcome, uri)
    return JobResult(job, run.run_id, outcomes, skipped, uri, time.perf_counter() - job_started)
