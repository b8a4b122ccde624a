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

Each pair's Pareto front is checked against the test set's noise
(:func:`~xmr.tune.pareto.pareto_ties`): two front points next to each other along x whose
trials' paired bootstrap intervals (over the queries both scored, from their runs'
``per_query.parquet``) hold 0 on x and on y are not distinguishable. ``trials.csv`` says so
in a column per pair (``pareto_<x>_vs_<y>``: ``front``, ``front ≈ <neighbour's run name>`` or
``dominated``), the PNG joins them with a dashed ``≈`` segment and the parent's
``xmr.pareto_front`` tag (the first pair's front in x order) with `` ≈ ``. Trials without
per-query values are left unmarked.
"""

from __future__ import annotations

import itertools
import math
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd
import ray
from ray import tune

from xmr.pipeline.ray_executor import init_ray
from xmr.stops import Stopped, on_stop
from xmr.storage import StoragePath, as_path, check_bucket, storage_path
from xmr.text import require_tagger
from xmr.tracking import (
    TrackedRun,
    ending_status,
    experiment_name,
    find_runs,
    is_finite_number,
    resolve_tracking_uri,
)
from xmr.tune.options import DEFAULT_STORAGE
from xmr.tune.outcome import SweepResult, error_reason, log_outcome, log_trials, status_of
from xmr.tune.record import default_sweep_name, end_sweep_runs, parent_run
from xmr.tune.space import DEFAULT_SYNTH, Domain, SearchSpace, SpaceError
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


class SweepInterrupted(Stopped):
    """The sweep stopped before every trial ran (Ctrl-C or SIGTERM); its state is saved to
    resume."""


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


def _prepare_inputs(
    space: SearchSpace, sweep_dir: StoragePath, name: str, uri: str, address: str | None
) -> SearchSpace:
    """Build what the space leaves to xmr: D′ for ``synth: default``, the model an eval sweep
    evaluates when it names none (``base_model``, trained with ``xmr train``)."""
    fixed = dict(space.fixed)
    if space.command == "train" and fixed.get("synth") == DEFAULT_SYNTH:
        from xmr.synth.methods import synthesize_defaults
        from xmr.toyworld.default_world import default_toyworld

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
    from xmr.eval.encode import encode, ray_encoder

    config = eval_config(**space.example_trial()).encoding()
    print(f"encoding {config.dataset}/{config.split} once for every trial")
    encoded = encode(config, ray_encoder(address), mi_features=True)
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
    parent = parent_run(space, name, sweep_dir, uri, experiment, parent_run_id)
    try:
        init_ray(address)
        # A stop marks the sweep's runs KILLED first, then Tune saves its state and stops.
        with on_stop(partial(end_sweep_runs, parent, experiment, "KILLED")):
            trials = _run_trials(
                space, name, sweep_dir, experiment, parent, address, max_concurrent
            )
        ended = int(trials["status"].isin(["FINISHED", "FAILED"]).sum()) if len(trials) else 0
        if ended < space.trial_count:  # Ctrl-C or SIGTERM: Tune saved its state and stopped
            log_trials(parent, trials)
            raise SweepInterrupted(
                f"sweep {name} stopped after {ended} of {space.trial_count} trials "
                "(trials.csv says which); rerun the same command to resume it"
            )
        trials, best, artifacts = log_outcome(space, trials, name, parent)
    except BaseException as exc:
        end_sweep_runs(parent, experiment, ending_status(exc))
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
                callbacks=[TrialLines(context, space.recorded, space.trial_count)],
            ),
        )
    return _trials_frame(space, tuner.fit(), context)


def _trials_frame(space: SearchSpace, grid: Any, context: SweepContext) -> pd.DataFrame:
    """One row per trial: id, child run, status, error, swept values, the space's metrics and
    diagnostics."""
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
            "error": error_reason(result.error, run) if result.error else "",
        }
        for key in space.params:
            row[key] = config.get(key)
        for name in space.recorded:
            value = metrics.get(name)
            row[name] = float(value) if is_finite_number(value) else math.nan
        rows.append(row)
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame = frame.sort_values([*space.params, "trial_id"], kind="stable").reset_index(drop=True)
    return frame
