"""xmr's commands as job steps: a generated ToyWorld, a D′ build, a training run, an
evaluation, a sweep.

Each function checks its options when the job is planned (a bad flag fails before any step
runs, with the flag named) and returns a :class:`~xmr.jobs.steps.Step` whose run calls the
same API as the command (no second implementation) and logs its MLflow run as a child of the
job's run.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from xmr.fields import changed_options
from xmr.jobs.options import command_line
from xmr.jobs.steps import Step, StepContext, StepOutcome
from xmr.storage import ObjectPath, StoragePath, put_folder

if TYPE_CHECKING:
    from xmr.eval.options import BenchmarkOptions, EvalOptions
    from xmr.llm import LLMSpec
    from xmr.synth.config import SynthOptions, SynthRuntime
    from xmr.train.config import TrainConfig
    from xmr.train.options import TrainOptions
    from xmr.tune.space import SearchSpace


def world_step(
    out: StoragePath,
    *,
    seed: int | None,
    config: str | Path | None = None,
    mode: str | None = None,
    name: str = "world",
) -> Step:
    """Generate a ToyWorld into ``out`` (``xmr data toyworld``), so that every node reads the
    same world from the job's folder rather than each its own cache. ``seed`` None: the
    config's; ``config``: a world YAML or a packaged world's name (``binding``); ``mode``:
    ``scene`` or ``shop`` (default: the config's, else scene); ``name``: the step's (a job
    with several worlds names each). In an object store the world is generated in a local
    temporary folder, then uploaded."""

    def run(context: StepContext) -> StepOutcome:
        from xmr.toyworld import generate

        if isinstance(out, ObjectPath):
            with tempfile.TemporaryDirectory(prefix="xmr-world-") as scratch:
                world = Path(scratch) / out.name
                generate(world, config, mode=mode, seed=seed, progress=True)
                put_folder(world, out)
        else:  # beside its place, so that an interrupted run leaves no world there
            partial = out.with_name(f".{out.name}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            generate(partial, config, mode=mode, seed=seed, progress=True)
            shutil.rmtree(out, ignore_errors=True)  # a world put there by a run stopped before
            put_folder(partial, out)  # its step record: this step's own, made again
        return StepOutcome(outputs={"world": str(out)})

    command = command_line(
        "xmr data toyworld", {"out": out, "config": config, "mode": mode, "seed": seed}
    )
    kind = f"{mode} " if mode else ""
    which = f"the {config} " if isinstance(config, str) and "/" not in config else "a "
    seeded = f" (seed {seed})" if seed is not None else ""
    return Step(name, f"generate {which}{kind}ToyWorld{seeded}", command, run)


def synth_step(
    name: str,
    summary: str,
    options: SynthOptions,
    runtime: SynthRuntime,
    llm: LLMSpec | None = None,
) -> Step:
    """Build D′ (``xmr synth``) with the configs ``options`` into ``runtime.out`` (its MLflow
    run named ``name``), and for ``--mode biaug`` with the LLM ``llm``.

    Raises:
        ValueError: an LLM that cannot run (no ``--llm-model``; checked now, as ``xmr synth``
            checks it before Ray starts).
    """
    runtime = replace(runtime, run_name=name)
    spec = llm if options.mode == "biaug" else None
    if spec is not None:
        spec.check_ready()

    def run(context: StepContext) -> StepOutcome:
        from xmr.synth.methods import synthesize
        from xmr.synth.report import SAMPLES, log_to_mlflow, save_sample_grid
        from xmr.synth.runner import ray_executor

        attached = replace(runtime, address=context.address, tracking_uri=context.tracking_uri)
        result = synthesize(options, attached, spec, executor=ray_executor(attached))
        save_sample_grid(result.out, result.out / SAMPLES, seed=options.shared.seed)
        run_id = log_to_mlflow(
            result,
            options,
            attached,
            spec,
            experiment=context.experiment,
            parent_run_id=context.parent_run_id,
        )
        manifest = result.manifest
        if result.error_rate > runtime.max_error_rate:
            raise RuntimeError(
                f"{name}: {manifest['errors']} of {manifest['planned']} rows failed "
                f"({result.error_rate:.1%} > --max-error-rate {runtime.max_error_rate:.1%}); "
                f"reasons in {result.out / 'errors.parquet'}"
            )
        counts = {key: float(manifest[key]) for key in ("planned", "written", "errors")}
        return StepOutcome(run_id, counts, {"dprime": str(result.out)})

    shown = {**changed_options(options.shared), **changed_options(options.own)}
    shown |= {
        k: v for k, v in changed_options(runtime).items() if k not in ("progress", "run_name")
    }
    if spec is not None:  # the LLM's flags set away from their defaults, --llm always
        shown.update({"llm": spec.backend, **changed_options(spec)})
    return Step(name, summary, command_line("xmr synth", shown), run)


def train_step(
    name: str,
    summary: str,
    options: TrainOptions,
    tags: Mapping[str, str],
    *,
    steps_of: str | None = None,
) -> TrainStep:
    """Train (``xmr train``) as ``options`` say; the run is named ``name`` and its folder
    is ``<storage>/<name>``. The options are resolved once, now (a bad value fails before any
    step runs). The outcome's metrics are the run's final test-split metrics (the
    evaluation ``xmr train`` ends with: Recall@K both ways, ODmAP@K, Bias@K) and how long it
    trained: ``train/global_step`` (its optimiser steps) and, trained with ``--epochs auto``,
    ``train/best_epoch`` and ``train/stopped_epoch``.

    ``steps_of``: an earlier training step whose run's optimiser steps this one trains
    (``--steps``, read from that step's outcome when this one runs), on that run's
    learning-rate path (its ``step`` schedule's period, ``--lr-step-period``): a control
    matched to another run's budget and rates step by step, whatever that run's data made of
    its epochs.

    Raises:
        ValueError: an unknown family or values out of bounds (checked now).
    """
    from xmr.train.config import TrainConfig
    from xmr.train.convergence import BEST_EPOCH, STOPPED_EPOCH
    from xmr.train.optim import LR_STEP_PERIOD

    options = replace(options, name=name)
    planned = TrainConfig.from_options(options)

    def run(context: StepContext) -> StepOutcome:
        from xmr.train.run import train

        config = planned
        if steps_of:
            config = matched_config(planned, context, steps_of)
        result = train(
            config,
            address=context.address,
            tracking_uri=context.tracking_uri,
            tags=dict(tags),
            experiment=context.experiment,
            parent_run_id=context.parent_run_id,
        )
        length = (GLOBAL_STEP, LR_STEP_PERIOD, BEST_EPOCH, STOPPED_EPOCH)
        final = {
            key: value
            for key, value in result.metrics.items()
            if key.startswith(f"{config.test_split}/") or key in length
        }
        outputs = {"run": str(result.run_dir), "checkpoint": str(result.last_checkpoint)}
        return StepOutcome(result.mlflow_run_id, final, outputs)

    command = command_line("xmr train", changed_options(options))
    if steps_of:
        command += f" --steps <{steps_of}'s steps>"
    return TrainStep(name, summary, command, run, planned)


@dataclass(frozen=True)
class TrainStep(Step):
    """A training step with the config it resolved once, when it was planned (``--steps`` of a
    matched control is set when it runs): what the job reads of it (its epochs, its test
    split) without resolving the options again."""

    config: TrainConfig


GLOBAL_STEP = "train/global_step"
"""A training step's optimiser steps, in its outcome (what ``steps_of`` matches)."""


def matched_steps(context: StepContext, step: str) -> int:
    """The optimiser steps that the earlier training step ``step`` ran (its outcome's
    :data:`GLOBAL_STEP`, read from its run).

    Raises:
        RuntimeError: ``step`` has not run, or its record predates the step count.
    """
    outcome = context.outcomes.get(step)
    if outcome is None or GLOBAL_STEP not in outcome.metrics:
        raise RuntimeError(
            f"{step} recorded no optimiser step count ({GLOBAL_STEP}) to match: remove "
            f"{context.folder / 'steps' / f'{step}.json'} to train it again"
        )
    return int(outcome.metrics[GLOBAL_STEP])


def matched_config(config: TrainConfig, context: StepContext, step: str) -> TrainConfig:
    """``config`` trained for the optimiser steps of the earlier training step ``step``
    (:func:`matched_steps`) on its learning-rate path: the ``step`` schedule decays every
    ``step``'s period (its outcome's ``train/lr_step_period``), not every ``step_epochs`` of
    this run's own, shorter or longer, epochs. A record from before the period was kept
    keeps the run's own period, and says so.
    """
    from xmr.train.optim import LR_STEP_PERIOD

    steps = matched_steps(context, step)
    period = context.outcomes[step].metrics.get(LR_STEP_PERIOD)
    if period is None:
        print(
            f"note: {step} recorded no learning-rate period ({LR_STEP_PERIOD}); this run's "
            "step schedule follows its own epochs"
        )
        return replace(config, steps=steps)
    optim = replace(config.optim, step_period=int(period))
    return replace(config, steps=steps, optim=optim)


def eval_step(
    name: str,
    summary: str,
    options: EvalOptions,
    output: StoragePath,
    benchmark: BenchmarkOptions | None = None,
) -> Step:
    """Evaluate (``xmr eval``) as ``options`` say; with ``benchmark`` score that benchmark,
    read from ``options.data``, instead of a split (``xmr eval --benchmark``). The
    ``checkpoint`` may be one an earlier step writes: it is read when the step runs (for the
    model's family and architecture, unless the options name them).

    The step's run is named ``name``; the metrics JSON (``xmr eval --output``) goes to
    ``output``, and the outcome's metrics are the evaluation's (``{split}/recall_...`` or the
    benchmark's ``aro/...``, ``sugarcrepe/...``, ``binding/...``).
    """
    from xmr.eval.options import BenchmarkOptions

    scored = benchmark or BenchmarkOptions()

    def run(context: StepContext) -> StepOutcome:
        from xmr.eval.config import EvalConfig
        from xmr.eval.encode import ray_encoder
        from xmr.eval.evaluation import run_evaluation

        config = EvalConfig.from_options(options)
        evaluation = run_evaluation(config, scored, ray_encoder(context.address))
        evaluation.print()
        evaluation.write_json(output)
        run_id = evaluation.log(
            tracking_uri=context.tracking_uri,
            run_name=name,
            experiment=context.experiment,
            parent_run_id=context.parent_run_id,
        )
        return StepOutcome(run_id, dict(evaluation.result.metrics), {"metrics": str(output)})

    flags = {**changed_options(scored), **changed_options(options), "output": output}
    return Step(name, summary, command_line("xmr eval", flags), run)


def sweep_step(
    name: str,
    summary: str,
    space: SearchSpace,
    storage: StoragePath,
    *,
    sweep: str,
    max_concurrent: int | None = None,
    prepare: Callable[[SearchSpace, StepContext], SearchSpace] | None = None,
) -> Step:
    """Sweep ``space`` on Ray Tune (``xmr tune``) as sweep ``sweep`` (its folder under
    ``storage``, its ``xmr.sweep_id``); the sweep's parent run is the step's run.
    ``prepare`` completes the space from earlier steps' outcomes when the step runs (e.g. the
    checkpoint an eval sweep scores).

    The step finishes when at least one trial did (the sweep's run and ``trials.csv`` list
    the failed ones, and the outcome counts them as ``trials_failed``); it fails when none did.
    """

    def run(context: StepContext) -> StepOutcome:
        from xmr.tune.sweep import run_sweep

        ready = prepare(space, context) if prepare is not None else space
        result = run_sweep(
            ready,
            name=sweep,
            storage=storage,
            address=context.address,
            tracking_uri=context.tracking_uri,
            max_concurrent=max_concurrent,
            experiment=context.experiment,
            parent_run_id=context.parent_run_id,
        )
        trials = result.path / "trials.csv"
        trials.write_text(result.trials.to_csv(index=False))  # a local file or in a bucket
        failed = len(result.failed)
        if failed == len(result.trials):
            reasons = "; ".join(sorted(set(result.failed["error"].astype(str)))[:3])
            raise RuntimeError(f"{name}: every one of the {failed} trials failed: {reasons}")
        if failed:
            print(f"warning: {name}: {failed} of {len(result.trials)} trials failed ({trials})")
        metrics = {"trials": float(len(result.trials)), "trials_failed": float(failed)}
        if result.best is not None:
            metrics.update({f"best/{m.name}": float(result.best[m.name]) for m in space.metrics})
        outputs = {"sweep": str(result.path), "trials": str(trials)}
        return StepOutcome(result.parent_run_id, metrics, outputs)

    from xmr.tune.space import load_space

    swept = ", ".join(f"{key} in {list(domain.values)}" for key, domain in space.params.items())
    command = command_line(
        "xmr tune",
        {
            "space": space.name,
            "name": sweep,
            "storage": storage,
            "cpus_per_trial": space.cpus,
            "gpus_per_trial": space.gpus,
            "max_concurrent": max_concurrent,
        },
    )
    shipped = load_space(space.origin or space.name).fixed
    changed = {key: value for key, value in space.fixed.items() if shipped.get(key) != value}
    fixed = " ".join(f"--set {key}={value}" for key, value in changed.items())
    return Step(name, f"{summary} ({swept})", f"{command} {fixed}".strip(), run)
