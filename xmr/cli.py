"""The ``xmr`` command line: one typer app, one sub-command per task.

Each command's flags are the fields of its options dataclasses (:mod:`xmr.fields`): defaults,
help and bounds are declared there once, checked, and every path is made absolute before any
cluster work starts. The commands import their libraries when they run, so ``xmr --help``
loads neither torch, Ray nor MLflow.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from xmr.compare.bootstrap import CONFIDENCE, RESAMPLES, SEED
from xmr.eval.options import BenchmarkOptions, EvalOptions, EvalOutputOptions
from xmr.fields import ClusterOptions, check_options, option, resolve_paths, tracking_uri_option
from xmr.logs import prepare_console
from xmr.options import command, fail, join_list_values, user_errors
from xmr.storage import StoragePath
from xmr.synth.command import synth_command
from xmr.train.options import SeedOptions, TrainOptions, check_seed_flags
from xmr.tune.options import TuneOptions

if TYPE_CHECKING:
    from xmr.cluster import ClusterState

app = typer.Typer(
    help="Measure and remove bias in image-text retrieval models.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
data_app = typer.Typer(help="Generate and inspect datasets.", no_args_is_help=True)
app.add_typer(data_app, name="data")


@dataclass(frozen=True)
class ToyWorldOptions:
    """``xmr data toyworld``'s options."""

    out: Path = option(help="Output folder (COCO layout).", output=True)
    config: str | None = option(
        None, "World YAML, or a packaged world: binding (attribute bias + binding test)."
    )
    seed: int | None = option(None, "Overrides the config's seed.", ge=0)
    mode: str | None = option(
        None,
        "scene (objects, planted biases) | shop (product photos with brand, category, season, "
        "composition entities). Default: the config's `mode`, else scene.",
    )

    def __post_init__(self) -> None:
        check_options(self)
        resolve_paths(self)
        if self.config is not None:
            from xmr.toyworld.config import world_config_path

            object.__setattr__(self, "config", world_config_path(self.config))


def data_toyworld(options: ToyWorldOptions) -> None:
    """Generate a ToyWorld: a procedural dataset with planted biases (scene) or products (shop)."""
    from xmr.toyworld import generate

    with user_errors():
        root = generate(
            options.out, options.config, mode=options.mode, seed=options.seed, progress=True
        )
    typer.echo(f"wrote {root}")


data_app.command("toyworld")(command(data_toyworld, ToyWorldOptions))


@app.command("models")
def models() -> None:
    """List model families and their architectures."""
    from xmr.models import list_archs, list_models

    for family in list_models():
        archs = list_archs(family)
        shown = ", ".join(archs[:12]) + (f", ... ({len(archs)} in all)" if len(archs) > 12 else "")
        typer.echo(f"{family}: {shown}")


def eval_command(
    options: EvalOptions,
    benchmark: BenchmarkOptions,
    outputs: EvalOutputOptions,
    cluster: ClusterOptions,
) -> None:
    """Evaluate a model: Recall@K both ways, ODmAP@K and Bias@K, logged to MLflow; or, with
    --benchmark, its accuracy on ARO, SugarCrepe or the ToyWorld binding test.

    --clip-m applies CLIP-clip (gender paper §3.2) before ranking; the dropped dims are an
    MLflow artifact (clip_dims.json).
    """
    from xmr.eval.config import EvalConfig
    from xmr.eval.encode import ray_encoder
    from xmr.eval.evaluation import run_evaluation

    with user_errors():
        evaluation = run_evaluation(
            EvalConfig.from_options(options), benchmark, ray_encoder(cluster.address)
        )
    evaluation.print()
    if outputs.output:
        evaluation.write_json(outputs.output)
        typer.echo(f"wrote {outputs.output}")
    run_id = evaluation.log(tracking_uri=cluster.tracking_uri, run_name=outputs.run_name)
    typer.echo(f"MLflow run {run_id} in experiment {evaluation.experiment}")


app.command("eval")(
    command(eval_command, EvalOptions, BenchmarkOptions, EvalOutputOptions, ClusterOptions)
)
app.command("synth")(synth_command)


def train_command(options: TrainOptions, seeds: SeedOptions, cluster: ClusterOptions) -> None:
    """Finetune a model on Ray Train (D, or D ∪ D′), evaluate it, and log it to MLflow.

    Rerunning the same --name resumes from its latest checkpoint. --seeds 0 1 2 trains the
    same config once per seed and reports each final metric's mean ± std.
    """
    from xmr.train.config import TrainConfig
    from xmr.train.report import print_seeds_summary, print_summary
    from xmr.train.run import train
    from xmr.train.seeds import train_seeds

    with user_errors():
        check_seed_flags(options, seeds)
        config = TrainConfig.from_options(options)
        if seeds.seeds is not None:
            group = train_seeds(
                config, seeds.seeds, name=options.name, address=cluster.address,
                tracking_uri=cluster.tracking_uri,
            )  # fmt: skip
        else:
            result = train(config, address=cluster.address, tracking_uri=cluster.tracking_uri)
    if seeds.seeds is not None:
        print_seeds_summary(group, config)
    else:
        print_summary(result, config)


app.command("train")(command(train_command, TrainOptions, SeedOptions, ClusterOptions))


def tune_command(options: TuneOptions, cluster: ClusterOptions) -> None:
    """Sweep a search space on Ray Tune: FairSample α, CLIP-clip m, the D′ ratio, or your own.

    One MLflow parent run per sweep (experiment xmr/tune/<space>) with a child run per trial;
    at the end the parent holds the best config, trials.csv and the Pareto plots. A trial that
    fails is reported and the others go on; rerunning the same --name resumes.
    """
    from rich.console import Console

    from xmr.compare.runs import sweep_runs
    from xmr.compare.table import comparison_frame, comparison_table
    from xmr.progress import summary_line
    from xmr.tune.sweep import run_sweep

    started = time.perf_counter()
    with user_errors():
        search_space = options.search_space()
        result = run_sweep(
            search_space,
            name=options.name,
            storage=options.storage,
            address=cluster.address,
            tracking_uri=cluster.tracking_uri,
        )
    console = Console()
    runs, metrics = sweep_runs(result.name, tracking_uri=cluster.tracking_uri)
    console.print(comparison_table(comparison_frame(runs, metrics), f"sweep {result.name}"))
    for _, row in result.failed.iterrows():
        console.print(f"[red]trial {row['trial_id']} ({row['run_name']}) failed[/red]: "
                      f"{row['error'] or row['status']}", soft_wrap=True)  # fmt: skip
    if result.best is not None:
        console.print(
            f"best by {search_space.objective.mode} {search_space.objective.label}: "
            f"{result.best['run_name']}"
        )
    console.print(
        f"MLflow: parent run {result.parent_run_id} in experiment {result.experiment} "
        f"({', '.join(result.artifacts)}); `xmr compare --sweep {result.name}"
        f"{' --allow-unfinished' if len(result.failed) else ''}` shows this again",
        soft_wrap=True,
    )
    numbers = {"trials": len(result.trials), "failed": len(result.failed)}
    line = summary_line(
        f"sweep {result.name}", time.perf_counter() - started, numbers, str(result.path)
    )
    console.print(line, soft_wrap=True, markup=False, highlight=False)
    if len(result.failed):
        raise typer.Exit(code=1)


app.command("tune")(command(tune_command, TuneOptions, ClusterOptions))


@dataclass(frozen=True)
class CompareOptions:
    """``xmr compare``'s options: what to compare (two runs, a sweep or an experiment)."""

    runs: list[str] | None = option(
        None, "Two runs (ids or names): their metrics, paired difference and its interval.",
        positional=True,
    )  # fmt: skip
    sweep: str | None = option(None, "A sweep's name (xmr.sweep_id).")
    experiment: str | None = option(None, "An experiment, e.g. xmr/train/toyworld.")
    metrics: str | None = option(
        None, "Comma-separated metric names (default: the sweep's, or test/...@10)."
    )
    csv: Path | None = option(None, "Also write the table as CSV here.", output=True)
    json_path: Path | None = option(
        None, "Also write the comparison as JSON here (each run's id, name and status).",
        flag="json", output=True,
    )  # fmt: skip
    allow_unfinished: bool = option(
        False, "Compare runs that are not FINISHED (RUNNING, FAILED, KILLED), marked as such; "
        "without it two such runs are refused and a sweep's or experiment's are left out.",
    )  # fmt: skip
    bootstrap: int = option(RESAMPLES, "Two runs: bootstrap resamples of the paired queries.", ge=1)
    confidence: float = option(CONFIDENCE, "Two runs: coverage of the intervals.", gt=0, lt=1)
    seed: int = option(SEED, "Two runs: the bootstrap's seed.", ge=0)
    tracking_uri: str | None = tracking_uri_option()

    def __post_init__(self) -> None:
        runs = list(self.runs or [])
        if runs and len(runs) != 2:
            raise ValueError(f"give two runs to compare, got {len(runs)}: {' '.join(runs)}")
        if sum((bool(runs), self.sweep is not None, self.experiment is not None)) != 1:
            raise ValueError("give exactly one of two runs, --sweep or --experiment")
        resolve_paths(self)


def compare_command(options: CompareOptions) -> None:
    """Compare runs in the terminal: two runs query by query (paired bootstrap), a sweep's
    trials, or an experiment's runs.

    Only FINISHED runs unless --allow-unfinished: two runs of which one is RUNNING, FAILED or
    KILLED are refused (one line naming it, before anything is read), and such runs of a sweep
    or experiment are left out with a line naming them. With the flag they are compared and
    marked: their status in the table and in --json.
    """
    import json

    from rich.console import Console

    from xmr.compare.paired import paired_comparison
    from xmr.compare.runs import (
        describe_runs,
        experiment_runs,
        find_run,
        sweep_runs,
        unfinished_runs,
    )
    from xmr.compare.table import (
        comparison_frame,
        comparison_json,
        comparison_table,
        paired_json,
        paired_table,
    )
    from xmr.tracking import resolve_tracking_uri

    chosen = [m.strip() for m in (options.metrics or "").split(",") if m.strip()]
    uri = resolve_tracking_uri(options.tracking_uri)
    with user_errors():
        if options.runs:
            found = [find_run(reference, tracking_uri=uri) for reference in options.runs]
            unfinished = [run for run in found if not run.finished]
            if unfinished and not options.allow_unfinished:
                named = " and ".join(f"{r.name} (run {r.run_id}) is {r.status}" for r in unfinished)
                its, it = ("its", "it") if len(unfinished) == 1 else ("their", "them")
                raise ValueError(
                    f"{named}, not FINISHED: {its} metrics may not be final; "
                    f"--allow-unfinished compares {it} anyway, marked"
                )
            paired = paired_comparison(
                found[0].run_id, found[1].run_id, chosen, tracking_uri=uri,
                resamples=options.bootstrap, confidence=options.confidence, seed=options.seed,
            )  # fmt: skip
            Console().print(paired_table(paired))
            if options.csv:
                paired.frame.to_csv(options.csv, index=False)
                typer.echo(f"wrote {options.csv}")
            if options.json_path:
                options.json_path.write_text(json.dumps(paired_json(paired), indent=2) + "\n")
                typer.echo(f"wrote {options.json_path}")
            return
        if options.sweep is not None:
            runs, metrics = sweep_runs(options.sweep, tracking_uri=uri)
            title = f"sweep {options.sweep}"
        else:
            runs, metrics = experiment_runs(options.experiment, tracking_uri=uri), []
            title = f"experiment {options.experiment}"
        unfinished, left_out = unfinished_runs(runs), ""
        if len(unfinished) and not options.allow_unfinished:
            if len(unfinished) == len(runs):
                raise ValueError(
                    f"no run of {title} is FINISHED: {describe_runs(unfinished)}; "
                    "--allow-unfinished compares them anyway, marked"
                )
            typer.secho(
                f"left out {len(unfinished)} run(s) of {title} that are not FINISHED: "
                f"{describe_runs(unfinished)}; --allow-unfinished shows them, marked",
                fg=typer.colors.YELLOW, err=True,
            )  # fmt: skip
            runs = runs.drop(unfinished.index)
            left_out = f", {len(unfinished)} not FINISHED left out"
        frame = comparison_frame(runs, chosen or metrics)
    Console().print(comparison_table(frame, f"{title}: {len(frame)} runs{left_out}"))
    if options.csv:
        frame.to_csv(options.csv, index=False)
        typer.echo(f"wrote {options.csv}")
    if options.json_path:
        document = comparison_json(frame, title)
        options.json_path.write_text(json.dumps(document, indent=2) + "\n")
        typer.echo(f"wrote {options.json_path}")


app.command("compare")(command(compare_command, CompareOptions))


@dataclass(frozen=True)
class DemoOptions:
    """``xmr demo``'s options."""

    seed: int = option(0, "Seed of the world, D′ and training.", ge=0)
    epochs: int | None = option(
        None, "Epochs of the D ∪ D′ run; D trains as many optimiser steps (default: 3).", ge=1
    )
    converged: bool = option(
        False,
        "Train D and D ∪ D′ until their val RSUM levels off and compare them there, instead "
        "of at equal steps.",
    )
    pretrained: str | None = option(
        None,
        "'toy': both runs finetune the toy CLIP (xmr-tiny pretrained on ToyWorld, as the "
        "paper finetunes a pretrained CLIP) instead of training xmr-tiny from scratch.",
    )
    equal_epochs: bool = option(
        False, "Also train D for --epochs, as the paper does: a column beside the headline."
    )
    workdir: StoragePath = option(None, "Where D′ and the runs go.", default_folder="xmr-demo")
    data: StoragePath | None = option(
        None, "A ToyWorld folder, a path or s3://…; default: the embedded one."
    )
    cpus_per_worker: int = option(2, "CPU cores for the training worker.", ge=1)

    def __post_init__(self) -> None:
        check_options(self)
        resolve_paths(self)
        if self.converged and (self.epochs is not None or self.equal_epochs):
            raise ValueError(
                "--converged trains each run until it levels off: no --epochs or --equal-epochs"
            )


def demo_command(options: DemoOptions, cluster: ClusterOptions) -> None:
    """The ODmAP experiment on the embedded ToyWorld: build D′, train on D ∪ D′ and on D for as
    many optimiser steps, compare.

    About 20 minutes on 2 CPU cores; rerunning resumes and reuses what is done.
    """
    from rich.console import Console

    from xmr.demo import demo_epochs, run_demo
    from xmr.jobs.odmap import odmap_report

    with user_errors():
        result = run_demo(
            seed=options.seed,
            epochs=demo_epochs(options.epochs, options.pretrained),
            workdir=options.workdir,
            tracking_uri=cluster.tracking_uri,
            address=cluster.address,
            cpus_per_worker=options.cpus_per_worker,
            data=options.data,
            converged=options.converged,
            equal_epochs=options.equal_epochs,
            pretrained=options.pretrained,
        )
    console = Console()
    console.print(odmap_report(result.outcomes))
    budget = (
        "both trained until their val RSUM levelled off"
        if options.converged
        else "D trained for as many optimiser steps as D ∪ D′, so the change is D′'s, not "
        "the extra steps'"
    )
    console.print(
        "ODmAP@K: how often the top captions for an image with objects removed describe what is "
        f"left and not what was removed (higher is better). Here {budget}. One training seed: "
        "each interval covers the test queries, not training's variance. Repeated over three "
        "ToyWorlds and three seeds each (docs/results/odmap.md), D′'s gain at equal steps does not "
        "hold up: small and positive on this world, negative and level on two others. Trained "
        "to convergence (one seed a world) D ∪ D′ leads on all three, with an interval that "
        "excludes 0 only on this world (+0.085 ODmAP@1). The paper's gain is for pretrained "
        "CLIP finetuned on real images. The demo is one MLflow "
        f"run in experiment {result.job.experiment} with a child run per step (`mlflow ui`).",
        soft_wrap=True,
    )
    console.print(result.summary(), soft_wrap=True, markup=False, highlight=False)


app.command("demo")(command(demo_command, DemoOptions, ClusterOptions))


@app.command("job-env")
def job_env() -> None:
    """Print the variables xmr reads, from this shell, as a Ray runtime environment: NLTK_DATA,
    MLFLOW_TRACKING_URI, XMR_* and the AWS settings that are not secret (relative paths made
    absolute). A job sees the environment of `ray start`, not the submitting shell's:
    `ray job submit --runtime-env-json "$(xmr job-env)" --working-dir . -- ...`
    """
    from xmr.job_env import runtime_env_json

    typer.echo(runtime_env_json())


cluster_app = typer.Typer(
    help="A Ray cluster of several nodes and an MLflow server on this machine, to try jobs on.",
    no_args_is_help=True,
)
app.add_typer(cluster_app, name="cluster")


@dataclass(frozen=True)
class ClusterFolderOptions:
    """The folder of an ``xmr cluster``: its state, token, MLflow store and the jobs' storage."""

    folder: Path = option(
        Path("xmr-cluster"),
        "The cluster's folder: what `up` started, its token, MLflow's store, the jobs' storage.",
        flag="dir",
    )

    def __post_init__(self) -> None:
        resolve_paths(self)


@dataclass(frozen=True)
class ClusterSizeOptions:
    """``xmr cluster up``'s size: nodes and CPUs per node."""

    nodes: int = option(2, "Ray nodes (the head is one of them).", ge=1)
    cpus_per_node: int | None = option(
        None, "CPUs each node offers Ray (default: this machine's cores / --nodes).", ge=1
    )

    def __post_init__(self) -> None:
        check_options(self)


def cluster_up_command(size: ClusterSizeOptions, where: ClusterFolderOptions) -> None:
    """Start Ray nodes and an MLflow server on this machine; print how to submit jobs.

    `xmr cluster down` stops exactly what this started. A second `up` in the same --dir is
    refused while its cluster runs.
    """
    import time

    from xmr.cluster import check_can_start, cluster_up, default_cpus_per_node

    with user_errors():
        check_can_start(where.folder)
    cpus = size.cpus_per_node or default_cpus_per_node(size.nodes)
    typer.echo(f"starting {size.nodes} Ray nodes ({cpus} CPU each) and an MLflow server ...")
    began = time.monotonic()
    with user_errors():
        state = cluster_up(where.folder, size.nodes, cpus)
    typer.echo(
        f"cluster up in {time.monotonic() - began:.0f} s: Ray dashboard and job API "
        f"{state.dashboard}, MLflow {state.tracking_uri}"
    )
    typer.echo(
        f"its folder {state.folder}: token {state.token_file}, jobs' XMR_STORAGE "
        f"{state.storage}; Ray's logs under {state.temp_dir}"
    )
    typer.echo('# for this shell (or: eval "$(xmr cluster env)"):')
    for line in state.env_lines():
        typer.echo(line)
    typer.echo("# then, from a checkout of xmr:")
    typer.echo(state.submit_line())
    typer.echo("# stop it all: xmr cluster down" + _dir_flag(where))


def _dir_flag(where: ClusterFolderOptions) -> str:
    """`` --dir FOLDER`` when the folder is not the default one."""
    default = ClusterFolderOptions().folder
    return "" if where.folder == default else f" --dir {where.folder}"


def _running_cluster(where: ClusterFolderOptions) -> ClusterState | None:
    """The cluster recorded in --dir if it still runs."""
    from xmr.cluster import ClusterState

    with user_errors():
        state = ClusterState.read(where.folder)
    return state if state is not None and state.processes() else None


def cluster_env_command(where: ClusterFolderOptions) -> None:
    """Print `export` lines for this shell: eval "$(xmr cluster env)".

    They point `ray job ...`, `ray list` and MLflow clients at the running cluster.
    """
    state = _running_cluster(where)
    if state is None:
        raise fail(f"no cluster runs in {where.folder} (`xmr cluster up`)")
    for line in state.env_lines():
        typer.echo(line)


def cluster_down_command(where: ClusterFolderOptions) -> None:
    """Stop the cluster `xmr cluster up` started in --dir, and only that.

    Never `ray stop` (which stops every Ray on the machine). Its MLflow store and the jobs'
    storage stay.
    """
    import time

    from xmr.cluster import ClusterState, stop_cluster

    with user_errors():
        state = ClusterState.read(where.folder)
    if state is None:
        typer.echo(f"no cluster runs in {where.folder}: nothing to stop")
        return
    began = time.monotonic()
    stopped = stop_cluster(state)
    if not stopped:
        typer.echo(f"the cluster in {where.folder} had already stopped: forgot it")
        return
    typer.echo(
        f"cluster down in {time.monotonic() - began:.0f} s: stopped {len(state.nodes)} Ray "
        f"nodes and the MLflow server ({stopped} processes); MLflow's store and the jobs' "
        f"storage stay in {state.folder}"
    )


cluster_app.command("up")(command(cluster_up_command, ClusterSizeOptions, ClusterFolderOptions))
cluster_app.command("env")(command(cluster_env_command, ClusterFolderOptions))
cluster_app.command("down")(command(cluster_down_command, ClusterFolderOptions))


def main(args: Sequence[str] | None = None) -> None:
    """The ``xmr`` command: :data:`app` on ``args`` (default: the command line), with list
    flags' values joined (``--seeds 0 1 2``, :func:`~xmr.options.join_list_values`); in a
    log, laid out at full width, other libraries' INFO off the console
    (:func:`~xmr.logs.prepare_console`)."""
    prepare_console()
    app(join_list_values(sys.argv[1:] if args is None else args))


if __name__ == "__main__":
    main()
