"""``xmr tune``: run a :class:`~xmr.tune.space.SearchSpace` on Ray Tune and log it to MLflow.

Layout of a sweep under ``storage/name`` (Ray Tune's experiment folder: a local or shared
folder, or an object store's ``s3://bucket/prefix``)::

    xmr_sweep.json    the space, the MLflow parent run id (a rerun resumes both)
    runs/             training trials' runs (checkpoints, last.pt), one per trial
    base/             eval sweeps: the model trained to be evaluated, when none was given
    dprime/           training sweeps with ``synth: default``: D′ of the embedded ToyWorld

MLflow: one parent run per sweep in experiment ``xmr/tune/<space>`` (tags ``xmr.sweep_id``,
the space YAML as ``space.yaml``) and one child run per trial. When the sweep ends the parent
holds ``best_config.json``, ``trials.csv`` and one ``pareto_<x>_vs_<y>.png`` per pair of
metrics in the space, plus the best trial's metrics as ``best/...``.

Each pair's Pareto front is checked against the test set's noise (:func:`pareto_ties`): two
front points next to each other along x whose trials' paired bootstrap intervals (over the
queries both scored, from their runs' ``per_query.parquet``) hold 0 on x and on y are not
distinguishable. ``trials.csv`` says so in a column per pair (``pareto_<x>_vs_<y>``:
``front``, ``front ≈ <neighbour's run name>`` or ``dominated``), the PNG joins them with a
dashed ``≈`` segment and the parent's ``xmr.pareto_front`` tag (the first pair's front in x
order) with `` ≈ ``. Trials without per-query values are left unmarked.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
import ray
import yaml
from ray import tune

from xmr.eval.per_query import QueryValues, logged_per_query, paired_differences, select_metrics
from xmr.pipeline.ray_executor import init_ray
from xmr.stops import Stopped, on_stop
from xmr.storage import StoragePath, as_path, check_bucket, storage_path
from xmr.text import require_tagger
from xmr.tracking import (
    PARENT_TAG,
    TrackedRun,
    ending_status,
    experiment_name,
    find_runs,
    is_finite_number,
    recorded_run,
    resolve_tracking_uri,
    start_run,
    write_run_record,
)
from xmr.tune.options import DEFAULT_STORAGE
from xmr.tune.pareto import (
    front_line,
    front_marks,
    front_neighbours,
    objective_values,
    pareto_front,
    plot_pareto,
)
from xmr.tune.space import DEFAULT_SYNTH, Domain, Objective, SearchSpace, SpaceError
from xmr.tune.trial_lines import TrialLines
from xmr.tune.trials import (
    DRIVER_MEMORY,
    OBJECTIVE,
    SweepContext,
    TrialFootprint,
    eval_trial,
    train_trial,
    trials_that_fit,
)

SWEEP_FILE = "xmr_sweep.json"
PARENT_ID_KEY = "parent_run_id"  # the parent run's id in SWEEP_FILE
PAIRED_RESAMPLES = 1000
PAIRED_CONFIDENCE = 0.95
PAIRED_SEED = 0
"""The bootstrap that compares neighbours on a front: fixed, so the marks are reproducible."""


class SweepInterrupted(Stopped):
    """The sweep stopped before every trial ran (Ctrl-C or SIGTERM); its state is saved to
    resume."""


@dataclass
class SweepResult:
    """One row per trial (``trials``), the best trial's row, the parent run and folder."""

    name: str
    parent_run_id: str
    experiment: str
    trials: pd.DataFrame
    best: dict[str, Any] | None
    path: StoragePath
    artifacts: list[str]

    @property
    def failed(self) -> pd.DataFrame:
        return self.trials[self.trials["status"] != "FINISHED"]


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
        "resources": {"cpus": space.cpus, "gpus": space.gpus},
        "num_samples": space.num_samples,
        "max_concurrent": space.max_concurrent,
        "base_model": space.base_model,
    }
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _check_dry(space: SearchSpace) -> None:
    """Build one trial's config so bad option values fail before anything starts."""
    options = dict(space.example_trial())
    try:
        if space.command == "train":
            from xmr.train.config import resolve_config

            if options.get("synth") == DEFAULT_SYNTH:
                options["synth"] = Path(".")  # stands in for the D′ built later
            options.pop("workers", None)
            family = options.pop("model", "clip")
            resolve_config(family, **options)
            if family != "eiclip":  # each trial ends with ODmAP, which tags captions
                require_tagger()
        else:
            from xmr.eval.config import eval_config

            checkpoint = options.get("checkpoint")
            if checkpoint is not None and not as_path(checkpoint).is_file():
                raise FileNotFoundError(f"checkpoint {checkpoint} does not exist")
            if "checkpoint" in options or "pretrained" in options:
                eval_config(**options)
    except (TypeError, ValueError, FileNotFoundError, LookupError) as exc:
        raise SpaceError(f"{space.origin}: a trial's options are invalid: {exc}") from exc


def _parent_run(
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
            "xmr.metrics": ",".join(m.name for m in space.metrics),
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


def _prepare_inputs(
    space: SearchSpace, sweep_dir: StoragePath, name: str, uri: str, address: str | None
) -> SearchSpace:
    """Build what the space leaves to xmr: D′ for ``synth: default``, the model an eval sweep
    evaluates when it names none (``base_model``, trained with ``xmr train``)."""
    fixed = dict(space.fixed)
    if space.command == "train" and fixed.get("synth") == DEFAULT_SYNTH:
        from xmr.data.default_world import default_toyworld
        from xmr.synth.methods import synthesize_defaults

        if fixed.get("dataset", "toyworld") != "toyworld" or fixed.get("data"):
            raise SpaceError(f"{space.origin}: synth: default is D′ of the embedded ToyWorld only")
        seed = int(fixed.get("seed", 0))
        dprime = sweep_dir / "dprime"
        synthesize_defaults(default_toyworld(seed), dprime, seed=seed, address=address)
        fixed["synth"] = str(dprime)
    if space.command == "eval" and "checkpoint" not in fixed and "pretrained" not in fixed:
        if not space.base_model:
            raise SpaceError(
                f"{space.origin}: an eval sweep needs a model: --set checkpoint=PATH, "
                "--set pretrained=TAG, or a base_model section to train one"
            )
        from xmr.train.config import resolve_config
        from xmr.train.run import train

        options = dict(space.base_model)
        for key in ("dataset", "data", "seed"):
            if key in fixed:
                options.setdefault(key, fixed[key])
        config = resolve_config(
            options.pop("model", "clip"), name="base", storage=sweep_dir / "base", **options
        )
        print(f"training the model this sweep evaluates ({config.name}, {config.epochs} epochs)")
        result = train(
            config,
            address=address,
            tracking_uri=uri,
            tags={"xmr.sweep_id": name, "xmr.role": "base_model"},
        )
        fixed["checkpoint"] = str(result.last_checkpoint)
    return space.with_overrides(fixed=fixed) if fixed != space.fixed else space


def _trainable(space: SearchSpace, context: SweepContext, address: str | None) -> Any:
    if space.command == "train":
        # The trial only drives a TorchTrainer, whose workers hold the CPUs and GPUs; Tune
        # needs a non-empty request, so the driver asks for memory, no CPU (TrialFootprint).
        trainable = partial(train_trial, context=context)
        return tune.with_resources(trainable, {"CPU": 0, "memory": DRIVER_MEMORY})
    from xmr.eval.config import eval_config
    from xmr.eval.encode import encode

    config = eval_config(**space.example_trial()).encoding()
    print(f"encoding {config.dataset}/{config.split} once for every trial")
    encoded = encode(config, address=address, mi_features=True)
    trainable = tune.with_parameters(eval_trial, context=context, encoded=encoded)
    return tune.with_resources(trainable, {"CPU": space.cpus, "GPU": space.gpus})


def _tune_domain(domain: Domain) -> Any:
    """The Ray Tune search-space object of a swept option's domain."""
    if domain.kind == "grid":
        return tune.grid_search(list(domain.values))
    if domain.kind == "choice":
        return tune.choice(list(domain.values))
    low, high = domain.values
    if domain.kind == "uniform":
        return tune.uniform(low, high)
    if domain.kind == "loguniform":
        return tune.loguniform(low, high)
    return tune.randint(low, high + 1)  # inclusive bounds in the YAML


def _tune_config(space: SearchSpace, max_concurrent: int | None) -> tune.TuneConfig:
    search_alg = None
    scheduler = None
    metric, mode = None, None  # grid and random need none: the sweep picks the best itself
    if space.search == "optuna":
        metric, mode = OBJECTIVE, space.objective.mode
    if space.scheduler.name == "asha":
        from ray.tune.schedulers import ASHAScheduler

        metric, mode = space.scheduler.metric, space.scheduler.mode
        scheduler = ASHAScheduler(
            grace_period=space.scheduler.grace_period,
            reduction_factor=space.scheduler.reduction_factor,
        )
    if space.search == "optuna":
        from ray.tune.search.optuna import OptunaSearch

        search_alg = OptunaSearch(seed=int(space.fixed.get("seed", 0)))
    return tune.TuneConfig(
        metric=metric,
        mode=mode,
        search_alg=search_alg,
        scheduler=scheduler,
        num_samples=space.num_samples,
        max_concurrent_trials=max_concurrent,
        # An eval trial only scores the split encoded once: a fresh process per trial would
        # cost more (imports, the encoded split fetched again) than the scoring itself.
        reuse_actors=space.command == "eval",
        trial_name_creator=lambda trial: f"trial_{trial.trial_id}",
        trial_dirname_creator=lambda trial: f"trial_{trial.trial_id}",
    )


def _default_concurrency(space: SearchSpace) -> int | None:
    """Training trials: as many as the cluster's nodes hold at once, every reservation of
    every trial counted (:func:`trial_concurrency`); eval trials: Tune's own."""
    if space.command != "train":
        return None
    nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    fits = trial_concurrency(space, nodes)
    if fits == 0:
        print(
            f"no node of this cluster holds a trial of {space.cpus:g} CPUs and {space.gpus:g} "
            "GPUs (--cpus-per-trial, --gpus-per-trial); running one at a time, for nodes yet "
            "to join"
        )
    return max(1, fits)


def trial_concurrency(space: SearchSpace, nodes: list[dict[str, float]]) -> int:
    """How many of a training space's trials ``nodes`` (each's total resources) hold at once:
    :func:`~xmr.tune.trials.trials_that_fit`, the fewest over the values of the swept options
    that size a trial (``workers``, ``loaders``, ``loader_cpus``).

    >>> from xmr.tune.space import load_space
    >>> two_cores = {"CPU": 2.0, "memory": 2.0**33}
    >>> trial_concurrency(load_space("fair_alpha"), [two_cores])  # 1 CPU per trial
    2
    >>> trial_concurrency(load_space("fair_alpha").with_overrides(cpus=2), [two_cores] * 2)
    2
    """
    sized = ("workers", "loaders", "loader_cpus")
    choices = [
        space.params[key].values if key in space.params else [space.fixed.get(key)] for key in sized
    ]
    counts = []
    for values in itertools.product(*choices):
        options = {
            **space.fixed,
            **{k: v for k, v in zip(sized, values, strict=True) if v is not None},
        }
        footprint = TrialFootprint.of(options, space.cpus, space.gpus)
        counts.append(trials_that_fit(nodes, footprint))
    return min(counts)


def run_sweep(
    space: SearchSpace,
    *,
    name: str | None = None,
    storage: StoragePath = DEFAULT_STORAGE,
    address: str | None = None,
    tracking_uri: str | None = None,
    max_concurrent: int | None = None,
    experiment: str | None = None,
    parent_run_id: str | None = None,
) -> SweepResult:
    """Run (or resume, same ``name`` and ``storage``) a sweep; trials that raise are reported
    in the result and the parent run, and the others go on.

    The sweep's run goes to ``experiment`` (default ``xmr/tune/<space>``), nested under
    ``parent_run_id`` when given (a job's step); its trials nest under the sweep's run.

    Raises:
        SpaceError: the space cannot run (checked before Ray starts).
    """
    _check_dry(space)
    name = name or default_sweep_name(space)
    sweep_dir = (storage_path(storage) / name).resolve()
    check_bucket(sweep_dir, "--storage")
    uri = resolve_tracking_uri(tracking_uri)
    experiment = experiment or experiment_name("tune", space.name)
    parent = _parent_run(space, name, sweep_dir, uri, experiment, parent_run_id)
    try:
        init_ray(address)
        # A stop marks the sweep's runs KILLED first, then Tune saves its state and stops.
        with on_stop(partial(_end_sweep_runs, parent, experiment, "KILLED")):
            trials = _run_trials(
                space, name, sweep_dir, experiment, parent, address, max_concurrent
            )
        ended = int(trials["status"].isin(["FINISHED", "FAILED"]).sum()) if len(trials) else 0
        if ended < space.trial_count:  # Ctrl-C or SIGTERM: Tune saved its state and stopped
            _log_trials(parent, trials)
            raise SweepInterrupted(
                f"sweep {name} stopped after {ended} of {space.trial_count} trials "
                "(trials.csv says which); rerun the same command to resume it"
            )
        trials, best, artifacts = _finish(space, trials, name, parent)
    except BaseException as exc:
        _end_sweep_runs(parent, experiment, ending_status(exc))
        raise
    return SweepResult(name, parent.run_id, experiment, trials, best, sweep_dir, artifacts)


def _run_trials(
    space: SearchSpace,
    name: str,
    sweep_dir: StoragePath,
    experiment: str,
    parent: TrackedRun,
    address: str | None,
    max_concurrent: int | None,
) -> pd.DataFrame:
    """Build the space's inputs and run its trials on Ray Tune (or resume them); one row per
    trial, as :func:`_trials_frame`."""
    space = _prepare_inputs(space, sweep_dir, name, parent.tracking_uri, address)
    context = SweepContext(
        sweep_id=name,
        experiment=experiment,
        parent_run_id=parent.run_id,
        tracking_uri=parent.tracking_uri,
        runs_dir=sweep_dir / "runs",
        swept=tuple(space.params),
        objective=space.objective.name,
        objective_abs=space.objective.abs,
        cpus_per_trial=space.cpus,
        gpus_per_trial=space.gpus,
        report_epochs=space.scheduler.name == "asha",
    )
    trainable = _trainable(space, context, address)
    param_space = {**space.fixed, **{k: _tune_domain(d) for k, d in space.params.items()}}
    concurrency = max_concurrent or space.max_concurrent or _default_concurrency(space)
    if tune.Tuner.can_restore(str(sweep_dir)):
        print(f"resuming sweep {name} from {sweep_dir}")
        tuner = tune.Tuner.restore(
            str(sweep_dir), trainable, resume_errored=False, param_space=param_space
        )
    else:
        tuner = tune.Tuner(
            trainable,
            param_space=param_space,
            tune_config=_tune_config(space, concurrency),
            run_config=tune.RunConfig(
                name=name,
                storage_path=str(sweep_dir.parent),
                failure_config=tune.FailureConfig(max_failures=0, fail_fast=False),
                # Tune's tables off: a line per trial start and end instead
                verbose=0,
                callbacks=[TrialLines(context, [m.name for m in space.metrics], space.trial_count)],
            ),
        )
    return _trials_frame(space, tuner.fit(), context)


def _end_sweep_runs(parent: TrackedRun, experiment: str, status: str) -> None:
    """End the parent run with ``status`` and the child runs still RUNNING (the trials that a
    stop or a failure of the sweep cut short) KILLED: no run of the sweep stays RUNNING."""
    parent.end(status)
    children = find_runs(experiment, {PARENT_TAG: parent.run_id}, tracking_uri=parent.tracking_uri)
    for child in children:
        if child.info.status == "RUNNING":
            TrackedRun(child.info.run_id, parent.tracking_uri).end("KILLED")


def _trials_frame(space: SearchSpace, grid: Any, context: SweepContext) -> pd.DataFrame:
    """One row per trial: id, child run, status, error, swept values, the space's metrics."""
    children = {
        run.data.tags.get("xmr.trial_id"): run
        for run in find_runs(
            context.experiment,
            {"xmr.sweep_id": context.sweep_id},
            tracking_uri=context.tracking_uri,
        )
    }
    rows = []
    for result in grid:
        trial_id = Path(result.path).name.removeprefix("trial_")
        run = children.get(trial_id)
        metrics = result.metrics or {}
        config = result.config or {}
        row: dict[str, Any] = {
            "trial_id": trial_id,
            "run_name": context.run_name(config),
            "mlflow_run_id": run.info.run_id if run else "",
            # Tune marks a trial's last result done when it ends (returned, or stopped by the
            # scheduler); one that a stop cut short has none.
            "status": "FAILED" if result.error else status_of(metrics),
            "error": _error_reason(result.error, run) if result.error else "",
        }
        for key in space.params:
            row[key] = config.get(key)
        for objective in space.metrics:
            value = metrics.get(objective.name)
            row[objective.name] = float(value) if is_finite_number(value) else math.nan
        rows.append(row)
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame = frame.sort_values([*space.params, "trial_id"], kind="stable").reset_index(drop=True)
    return frame


def status_of(metrics: dict[str, Any]) -> str:
    """A trial's status in ``trials.csv`` from its last result (not failed): FINISHED when Tune
    marked it done, else UNFINISHED (a stop cut it short; a rerun resumes it).

    >>> status_of({"done": True, "test/bias_at_10": 0.1}), status_of({"trial_id": "a1"})
    ('FINISHED', 'UNFINISHED')
    """
    return "FINISHED" if metrics.get("done") else "UNFINISHED"


def _log_trials(parent: TrackedRun, trials: pd.DataFrame) -> None:
    """Log ``trials`` as the parent run's ``trials.csv``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trials.csv"
        trials.to_csv(path, index=False)
        parent.log_artifact(path)


def _error_reason(error: BaseException, run: Any) -> str:
    """Why a trial failed: the reason its child run recorded, else the error's last line."""
    if run is not None and run.data.tags.get("xmr.error"):
        return run.data.tags["xmr.error"]
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return (lines[-1] if lines else type(error).__name__)[:500]


def _finish(
    space: SearchSpace, trials: pd.DataFrame, name: str, parent: TrackedRun
) -> tuple[pd.DataFrame, dict[str, Any] | None, list[str]]:
    """Log the sweep's outcome into the parent run and close it; the trials with a
    ``pareto_<x>_vs_<y>`` column per Pareto pair (:func:`front_marks`; empty for the trials not
    plotted: failed, or without both metrics)."""
    objective = space.objective
    done = trials[trials["status"] == "FINISHED"] if not trials.empty else trials
    best = None
    if not done.empty and done[objective.name].notna().any():
        score = done[objective.name].map(objective.value)
        index = score.idxmax() if objective.mode == "max" else score.idxmin()
        best = trials.loc[index].to_dict()
    trials = trials.copy()
    artifacts = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if best is not None:
            payload = {
                "trial_id": best["trial_id"],
                "mlflow_run_id": best["mlflow_run_id"],
                "selected_by": f"{objective.mode} {objective.label}",
                "config": {**space.fixed, **{k: best[k] for k in space.params}},
                "metrics": {m.name: best[m.name] for m in space.metrics},
            }
            (folder / "best_config.json").write_text(
                json.dumps(payload, indent=2, default=str) + "\n"
            )
            parent.log_artifact(folder / "best_config.json")
            artifacts.append("best_config.json")
            parent.log_metrics(
                {
                    f"best/{m.name}": float(best[m.name])
                    for m in space.metrics
                    if is_finite_number(best[m.name])
                }
            )
        plotted = done.dropna(subset=[m.name for m in space.metrics]) if not done.empty else done
        names = plotted["run_name"].tolist() if not plotted.empty else []
        per_query: dict[str, dict[str, QueryValues] | None] = {}  # run id -> its values
        for pair, (x_name, y_name) in enumerate(space.pareto):
            if plotted.empty:
                break
            x, y = space.metric(x_name), space.metric(y_name)
            slug = f"{_slug(x_name)}_vs_{_slug(y_name)}"
            ties = pareto_ties(plotted, x, y, tracking_uri=parent.tracking_uri, per_query=per_query)
            file = f"pareto_{slug}.png"
            front = plot_pareto(
                plotted,
                x,
                y,
                labels=names,
                path=folder / file,
                title=f"{name}: {len(plotted)} trials, front in red",
                ties=ties,
            )
            trials.loc[plotted.index, f"pareto_{slug}"] = front_marks(front, ties, names)
            parent.log_artifact(folder / file)
            artifacts.append(file)
            if pair == 0:
                xs = objective_values(plotted, x, y)[:, 0]
                parent.set_tag("xmr.pareto_front", front_line(xs, front, ties, names))
        _log_trials(parent, trials)
        artifacts.insert(0, "trials.csv")
    parent.log_metrics(
        {
            "sweep/trials": float(len(trials)),
            "sweep/failed": float((trials["status"] == "FAILED").sum()),
        }
    )
    parent.end("FINISHED")
    return trials, best, artifacts


def pareto_ties(
    frame: pd.DataFrame,
    x: Objective,
    y: Objective,
    *,
    tracking_uri: str,
    per_query: dict[str, dict[str, QueryValues] | None] | None = None,
) -> list[tuple[int, int]]:
    """The neighbours on the front of ``frame``'s trials (row positions, as
    :func:`~xmr.tune.pareto.front_neighbours`) that the test set cannot tell apart: over the
    queries both trials' runs (``mlflow_run_id``) scored, the paired bootstrap intervals of
    their difference on ``x`` and on ``y`` both hold 0 (:data:`PAIRED_CONFIDENCE`; for an
    ``abs`` objective, the difference of the signed metric). Neighbours are left out when
    either run has no per-query values of both metrics or they scored other queries.

    ``per_query``: run id -> its logged values (None: none), filled as runs are read, so that
    several pairs of metrics read each run once.
    """
    values = objective_values(frame, x, y)
    front = pareto_front(values, (x.mode, y.mode))
    runs = frame["mlflow_run_id"].fillna("").astype(str).tolist()
    cache = per_query if per_query is not None else {}
    metrics = (x.name, y.name)
    ties = []
    for i, j in front_neighbours(values[:, 0], front):
        first, second = (_trial_values(runs[k], tracking_uri, cache) for k in (i, j))
        if first is None or second is None:
            continue
        try:
            differences = paired_differences(
                select_metrics(first, metrics),
                select_metrics(second, metrics),
                resamples=PAIRED_RESAMPLES,
                confidence=PAIRED_CONFIDENCE,
                seed=PAIRED_SEED,
            )
        except ValueError:  # other queries: not comparable, left unmarked
            continue
        if all(m in differences and not differences[m].excludes(0.0) for m in metrics):
            ties.append((i, j))
    return ties


def _trial_values(
    run_id: str, tracking_uri: str, cache: dict[str, dict[str, QueryValues] | None]
) -> dict[str, QueryValues] | None:
    """A trial's run's logged per-query values (None: no run, or none logged), read once into
    ``cache``."""
    if run_id not in cache:
        try:
            cache[run_id] = logged_per_query(run_id, tracking_uri=tracking_uri) if run_id else None
        except LookupError:
            cache[run_id] = None
    return cache[run_id]


def _slug(metric: str) -> str:
    return metric.replace("/", "_")
