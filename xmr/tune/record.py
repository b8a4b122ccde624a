"""A sweep's record: the file in its folder and its MLflow parent run (no Ray).

``xmr_sweep.json`` in the sweep's folder holds the space's digest and its parent run's id, so a
rerun of the same space resumes the same run; another space under the same name is refused.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml

from xmr.storage import StoragePath
from xmr.tracking import (
    PARENT_TAG,
    TrackedRun,
    find_runs,
    recorded_run,
    start_run,
    write_run_record,
)
from xmr.tune.space import SearchSpace, SpaceError

SWEEP_FILE = "xmr_sweep.json"
PARENT_ID_KEY = "parent_run_id"  # the parent run's id in SWEEP_FILE


def space_digest(space: SearchSpace) -> str:
    """Hash of what decides the trials (fixed options, domains, search, metrics)."""
    keep = {
        "command": space.command,
        "fixed": space.fixed,
        "params": {k: [d.kind, list(d.values)] for k, d in space.params.items()},
        "search": space.search,
        "scheduler": space.scheduler.__dict__,
        "num_samples": space.num_samples,
        "base_model": space.base_model,
        "metrics": [m.__dict__ for m in space.metrics],
    }
    return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()[:8]


def default_sweep_name(space: SearchSpace) -> str:
    return f"{space.name}-{space_digest(space)}"


def space_yaml(space: SearchSpace) -> str:
    """The space as it runs (command-line overrides applied), as YAML."""
    data = {
        "description": space.description,
        "command": space.command,
        "fixed": {k: str(v) if isinstance(v, Path) else v for k, v in space.fixed.items()},
        "params": {k: {d.kind: list(d.values)} for k, d in space.params.items()},
        "search": space.search,
        "scheduler": "none" if space.scheduler.name == "none" else space.scheduler.__dict__,
        "metrics": [m.__dict__ for m in space.metrics],
        "pareto": [list(p) for p in space.pareto],
        **({"diagnostics": list(space.diagnostics)} if space.diagnostics else {}),
        "resources": {"cpus": space.cpus, "gpus": space.gpus},
        "num_samples": space.num_samples,
        "max_concurrent": space.max_concurrent,
        "base_model": space.base_model,
    }
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def parent_run(
    space: SearchSpace,
    name: str,
    sweep_dir: StoragePath,
    uri: str,
    experiment: str,
    job_run_id: str | None,
) -> TrackedRun:
    """The sweep's MLflow parent run (RUNNING): the one a previous attempt started, or a new
    one (nested under ``job_run_id`` when the sweep is a job's step)."""
    record = sweep_dir / SWEEP_FILE
    digest = space_digest(space)
    if record.is_file():
        saved = json.loads(record.read_text())
        if saved["space_digest"] != digest:
            raise SpaceError(
                f"{sweep_dir} holds sweep {name!r} of another space ({saved['space_digest']} "
                f"vs {digest}); use another --name, or the same space to resume it"
            )
    resumed = recorded_run(record, PARENT_ID_KEY, uri)
    if resumed is not None:
        return resumed
    with start_run(
        experiment,
        run_name=name,
        tracking_uri=uri,
        tags={
            "xmr.command": "tune",
            "xmr.sweep_id": name,
            "xmr.space": space.name,
            "xmr.metrics": ",".join(space.recorded),  # the diagnostics too: `xmr compare --sweep`
            "mlflow.note.content": space.description,
        },
        parent_run_id=job_run_id,
        keep_running=True,
    ) as run:
        run.log_params(
            {
                "sweep.command": space.command,
                "sweep.search": space.search,
                "sweep.scheduler": space.scheduler.name,
                "sweep.swept": ",".join(space.params),
                "sweep.objective": space.objective.label,
                "sweep.objective_mode": space.objective.mode,
                "sweep.num_samples": str(space.num_samples),
                "sweep.cpus_per_trial": str(space.cpus),
                "sweep.gpus_per_trial": str(space.gpus),
                **{f"sweep.fixed.{k}": str(v) for k, v in space.fixed.items()},
            }
        )
        run.log_text(space_yaml(space), "space.yaml")
    write_run_record(
        record, run, PARENT_ID_KEY, {"space_digest": digest, "space": space_yaml(space)}
    )
    return run


def end_sweep_runs(parent: TrackedRun, experiment: str, status: str) -> None:
    """End the parent run with ``status`` and the child runs still RUNNING (the trials that a
    stop or a failure of the sweep cut short) KILLED: no run of the sweep stays RUNNING."""
    parent.end(status)
    children = find_runs(experiment, {PARENT_TAG: parent.run_id}, tracking_uri=parent.tracking_uri)
    for child in children:
        if child.info.status == "RUNNING":
            TrackedRun(child.info.run_id, parent.tracking_uri).end("KILLED")
