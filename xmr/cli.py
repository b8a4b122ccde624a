"""The ``xmr`` command line: one typer app, one sub-command per task."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    help="Measure and remove bias in image-text retrieval models.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
data_app = typer.Typer(help="Generate and inspect datasets.", no_args_is_help=True)
app.add_typer(data_app, name="data")


def _fail(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(code=2)


@data_app.command("toyworld")
def data_toyworld(
    out: Annotated[Path, typer.Option(help="Output folder (COCO layout).")],
    config: Annotated[
        Path | None, typer.Option(help="World YAML; defaults ship in the package.")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Overrides the config's seed.")] = None,
    mode: Annotated[
        str | None,
        typer.Option(
            help="scene (objects, planted biases) | shop (product photos with brand, category, "
            "season, composition entities). Default: the config's `mode`, else scene."
        ),
    ] = None,
) -> None:
    """Generate a ToyWorld: a procedural dataset with planted biases (scene) or products (shop)."""
    from xmr.data.toyworld import generate_world

    try:
        root = generate_world(out, config, mode=mode, seed=seed, progress=True)
    except (ValueError, FileNotFoundError) as exc:
        raise _fail(str(exc)) from exc
    typer.echo(f"wrote {root}")


@app.command("models")
def models() -> None:
    """List model families and their architectures."""
    from xmr.models import list_archs, list_models

    for family in list_models():
        archs = list_archs(family)
        shown = ", ".join(archs[:12]) + (f", ... ({len(archs)} in all)" if len(archs) > 12 else "")
        typer.echo(f"{family}: {shown}")


@app.command("eval")
def eval_command(
    dataset: Annotated[str, typer.Option(help="toyworld | coco | flickr30k")] = "toyworld",
    data: Annotated[
        Path | None, typer.Option(help="Dataset folder; default: the embedded ToyWorld.")
    ] = None,
    split: Annotated[str, typer.Option(help="Split to evaluate.")] = "test",
    model: Annotated[
        str | None,
        typer.Option(help="Model family (see `xmr models`); default: the checkpoint's, or clip."),
    ] = None,
    arch: Annotated[
        str | None,
        typer.Option(help="Architecture, e.g. ViT-B-32; default: the checkpoint's, or xmr-tiny."),
    ] = None,
    pretrained: Annotated[
        str, typer.Option(help="Pretrained tag (e.g. openai), or 'none' for random init.")
    ] = "none",
    checkpoint: Annotated[
        Path | None,
        typer.Option(help="Local checkpoint to load (e.g. xmr_runs/<run>/last.pt)."),
    ] = None,
    metrics: Annotated[str, typer.Option(help="Comma-separated: recall,odmap,bias.")] = (
        "recall,odmap,bias"
    ),
    output: Annotated[Path | None, typer.Option(help="Also write the metrics JSON here.")] = None,
    batch_size: Annotated[int, typer.Option(help="Encoding batch size.")] = 128,
    actors: Annotated[
        int | None, typer.Option(help="Encoder actors (default: one per GPU or CPU core).")
    ] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda")] = "auto",
    seed: Annotated[int, typer.Option(help="Seed for random init and example sampling.")] = 0,
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: RAY_ADDRESS or local Ray).")
    ] = None,
    tracking_uri: Annotated[
        str | None,
        typer.Option(help="MLflow store (default: MLFLOW_TRACKING_URI or sqlite:///mlflow.db)."),
    ] = None,
    run_name: Annotated[str | None, typer.Option(help="MLflow run name.")] = None,
    clip_m: Annotated[
        int, typer.Option(help="CLIP-clip: drop the m dims with the most gender information.")
    ] = 0,
    mi_estimator: Annotated[
        str, typer.Option(help="histogram (the reference code's) | ksg (Gao et al. 2017)")
    ] = "histogram",
    mi_split: Annotated[
        str,
        typer.Option(
            help="Split whose images estimate the MI (not the scored one: its labels would leak)."
        ),
    ] = "train",
    mi_samples: Annotated[int, typer.Option(help="At most this many MI images.")] = 5000,
    mi_bins: Annotated[int, typer.Option(help="histogram: bins per axis.")] = 64,
    mi_sigma: Annotated[float, typer.Option(help="histogram: Gaussian smoothing (bins).")] = 1.0,
    mi_neighbors: Annotated[int, typer.Option(help="ksg: neighbours k.")] = 3,
    clip_renormalize: Annotated[
        bool, typer.Option(help="L2-normalise the clipped embeddings (the reference does not).")
    ] = False,
) -> None:
    """Evaluate a model: Recall@K both ways, ODmAP@K and Bias@K, logged to MLflow.

    --clip-m applies CLIP-clip (gender paper §3.2) before ranking; the dropped dims are an
    MLflow artifact (clip_dims.json).
    """
    from xmr.data import DataError
    from xmr.eval import evaluate
    from xmr.eval.evaluate import eval_config
    from xmr.eval.report import log_to_mlflow, print_report, write_json

    try:
        config = eval_config(
            model=model,
            arch=arch,
            pretrained=pretrained,
            checkpoint=checkpoint,
            dataset=dataset,
            data=data,
            split=split,
            metrics=metrics,
            batch_size=batch_size,
            actors=actors,
            device=device,
            seed=seed,
            clip_m=clip_m,
            mi_estimator=mi_estimator,
            mi_split=mi_split,
            mi_samples=mi_samples,
            mi_bins=mi_bins,
            mi_sigma=mi_sigma,
            mi_neighbors=mi_neighbors,
            clip_renormalize=clip_renormalize,
        )
        result = evaluate(config, address=address)
    except (DataError, ValueError, FileNotFoundError, LookupError) as exc:
        raise _fail(str(exc)) from exc
    print_report(result, config)
    if output:
        write_json(result, config, output)
        typer.echo(f"wrote {output}")
    run_id = log_to_mlflow(result, config, tracking_uri=tracking_uri, run_name=run_name)
    typer.echo(f"MLflow run {run_id} in experiment xmr/eval/{dataset}")


def synth_command(
    config: Annotated[
        Path | None, typer.Option(help="YAML file of options (flags override it).")
    ] = None,
    dataset: Annotated[str | None, typer.Option(help="toyworld | coco | flickr30k")] = None,
    data: Annotated[
        Path | None, typer.Option(help="Dataset folder; default: the embedded ToyWorld.")
    ] = None,
    split: Annotated[
        str | None, typer.Option(help="Split to synthesize from (default train).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Output folder (default xmr-synth/<dataset>-<split>).")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N images.")] = None,
    alpha1: Annotated[
        float | None, typer.Option(help="Max share of a kept class hidden (default 0.4).")
    ] = None,
    alpha2: Annotated[
        float | None,
        typer.Option(help="Share hidden under a removed class that removes it too (default 0.8)."),
    ] = None,
    alpha3: Annotated[
        float | None, typer.Option(help="Max removed share of the image (default 0.7).")
    ] = None,
    captions_per_image: Annotated[
        str | None, typer.Option(help="Captions paired with each removal: N or 'all' (default 1).")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Seed of every random choice (default 0).")
    ] = None,
    fill: Annotated[str | None, typer.Option(help="telea | ns | zero | mean | blur | sd")] = None,
    sd_model: Annotated[
        str | None, typer.Option(help="Stable Diffusion inpainting repo id or local folder.")
    ] = None,
    sd_steps: Annotated[int | None, typer.Option(help="Diffusion steps (default 25).")] = None,
    sd_guidance: Annotated[float | None, typer.Option(help="Guidance scale (default 7.5).")] = None,
    sd_resolution: Annotated[
        int | None, typer.Option(help="SD working size in px (default 512).")
    ] = None,
    caption: Annotated[
        str | None, typer.Option(help="np-removal | prompt | captioner (default np-removal).")
    ] = None,
    captioner_model: Annotated[
        str | None, typer.Option(help="Image-captioning repo id or local folder.")
    ] = None,
    boxes: Annotated[
        str | None, typer.Option(help="gt (annotations) | groundingdino (detections) (default gt).")
    ] = None,
    detector_model: Annotated[
        str | None, typer.Option(help="GroundingDINO repo id or local folder.")
    ] = None,
    box_threshold: Annotated[float | None, typer.Option(help="Detection score threshold.")] = None,
    text_threshold: Annotated[float | None, typer.Option(help="Phrase score threshold.")] = None,
    rows_per_shard: Annotated[
        int | None, typer.Option(help="Rows per Parquet shard (default 256).")
    ] = None,
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: RAY_ADDRESS or local Ray).")
    ] = None,
    num_cpus: Annotated[int | None, typer.Option(help="CPUs for a local Ray.")] = None,
    plan_actors: Annotated[int | None, typer.Option(help="Planning actors.")] = None,
    detect_actors: Annotated[int | None, typer.Option(help="Detection actors.")] = None,
    fill_actors: Annotated[int | None, typer.Option(help="Fill actors.")] = None,
    caption_actors: Annotated[int | None, typer.Option(help="Caption actors.")] = None,
    gpus_per_actor: Annotated[
        float | None,
        typer.Option(help="GPUs per actor of a GPU stage (sd, captioner) (default 1)."),
    ] = None,
    batch_size: Annotated[int | None, typer.Option(help="Rows per batch (default 32).")] = None,
    max_error_rate: Annotated[
        float | None,
        typer.Option(help="Exit non-zero above this share of failed rows (default 0.01)."),
    ] = None,
    progress: Annotated[bool | None, typer.Option(help="Progress bars.")] = None,
    tracking_uri: Annotated[
        str | None,
        typer.Option(help="MLflow store (default: MLFLOW_TRACKING_URI or sqlite:///mlflow.db)."),
    ] = None,
    run_name: Annotated[str | None, typer.Option(help="MLflow run name.")] = None,
    mlflow: Annotated[bool | None, typer.Option(help="Log the build to MLflow.")] = None,
) -> None:
    """Build D′: remove co-occurring objects from images and their captions, on Ray Data.

    Rerunning with the same options and --out resumes an interrupted build.
    """
    overrides = {k: v for k, v in locals().items() if k not in {"config", "mlflow"}}
    overrides["log_mlflow"] = mlflow
    from xmr.data import DataError
    from xmr.synth.build import synthesize
    from xmr.synth.config import load_configs
    from xmr.synth.report import SAMPLES, log_to_mlflow, print_summary, save_sample_grid

    try:
        synth_config, runtime = load_configs(config, overrides)
        result = synthesize(synth_config, runtime)
    except (DataError, ValueError, FileNotFoundError, LookupError) as exc:
        raise _fail(str(exc)) from exc
    save_sample_grid(result.out, result.out / SAMPLES, seed=synth_config.seed)
    print_summary(result)
    if runtime.log_mlflow:
        run_id = log_to_mlflow(result, synth_config, runtime)
        typer.echo(f"MLflow run {run_id} in experiment xmr/synth/{synth_config.dataset}")
    if result.error_rate > runtime.max_error_rate:
        manifest = result.manifest
        typer.secho(
            f"error: {manifest['errors']} of {manifest['planned']} rows failed "
            f"({result.error_rate:.1%} > --max-error-rate {runtime.max_error_rate:.1%}); "
            f"reasons in {result.out / 'errors.parquet'}",
            fg=typer.colors.RED,
            err=True,
        )
        raise typer.Exit(code=1)


app.command("synth")(synth_command)


@app.command("train")
def train_command(
    model: Annotated[str, typer.Option(help="clip | vsepp | blip | eiclip")] = "clip",
    arch: Annotated[
        str | None, typer.Option(help="Architecture (default: the family's, see `xmr models`).")
    ] = None,
    pretrained: Annotated[
        str | None,
        typer.Option(
            help="Pretrained weights tag, or 'none' (default: the family's; ToyWorld: none)."
        ),
    ] = None,
    dataset: Annotated[str, typer.Option(help="toyworld | coco | flickr30k | fashiongen")] = (
        "toyworld"
    ),
    data: Annotated[
        Path | None, typer.Option(help="Dataset folder; default: the embedded ToyWorld.")
    ] = None,
    split: Annotated[str, typer.Option(help="Training split.")] = "train",
    synth: Annotated[
        Path | None, typer.Option(help="A D′ folder from `xmr synth` to train on D ∪ D′.")
    ] = None,
    synth_ratio: Annotated[
        float | None, typer.Option(help="D′ pairs per pair of D (default: all of D′).")
    ] = None,
    fair_alpha: Annotated[
        float, typer.Option(help="FairSample weight α in [0, 1] (0: plain training).")
    ] = 0.0,
    epochs: Annotated[int | None, typer.Option(help="Epochs (default: the family's).")] = None,
    batch_size: Annotated[
        int | None, typer.Option(help="Global batch size (default: the family's).")
    ] = None,
    lr: Annotated[float | None, typer.Option(help="Learning rate (default: the family's).")] = None,
    workers: Annotated[int, typer.Option(help="Data-parallel training workers.")] = 1,
    gpus_per_worker: Annotated[float, typer.Option(help="GPUs per worker (0: CPU).")] = 0.0,
    cpus_per_worker: Annotated[int, typer.Option(help="CPU cores per worker.")] = 1,
    init: Annotated[
        Path | None, typer.Option(help="Start from this checkpoint (e.g. a D-only run's).")
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="Run name (default: family-arch-dataset-<config hash>).")
    ] = None,
    storage: Annotated[Path, typer.Option(help="Folder of runs and checkpoints.")] = Path(
        "xmr_runs"
    ),
    seed: Annotated[int, typer.Option(help="Seed of init, shuffling and sampling.")] = 0,
    eval_every: Annotated[
        int, typer.Option(help="Evaluate on the val split every N epochs (0: only at the end).")
    ] = 0,
    max_failures: Annotated[
        int, typer.Option(help="Worker-group restarts from the last checkpoint.")
    ] = 2,
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: RAY_ADDRESS or local Ray).")
    ] = None,
    tracking_uri: Annotated[
        str | None,
        typer.Option(help="MLflow store (default: MLFLOW_TRACKING_URI or sqlite:///mlflow.db)."),
    ] = None,
) -> None:
    """Finetune a model on Ray Train (D, or D ∪ D′), evaluate it, and log it to MLflow.

    Rerunning the same --name resumes from its latest checkpoint.
    """
    from xmr.data import DataError
    from xmr.train.config import resolve_config
    from xmr.train.report import print_summary
    from xmr.train.run import train

    try:
        config = resolve_config(
            model,
            arch=arch,
            pretrained=pretrained,
            init=init,
            epochs=epochs,
            batch_size=batch_size,
            lr=lr,
            dataset=dataset,
            data=data,
            split=split,
            synth=synth,
            synth_ratio=synth_ratio,
            fair_alpha=fair_alpha,
            seed=seed,
            eval_every=eval_every,
            workers=workers,
            gpus_per_worker=gpus_per_worker,
            cpus_per_worker=cpus_per_worker,
            max_failures=max_failures,
            name=name or "",
            storage=storage,
        )
        result = train(config, address=address, tracking_uri=tracking_uri)
    except (DataError, ValueError, FileNotFoundError, LookupError) as exc:
        raise _fail(str(exc)) from exc
    print_summary(result, config)


@app.command("tune")
def tune_command(
    space: Annotated[
        str,
        typer.Option(help="fair_alpha | clip_m | synth_ratio (tune_spaces/) or a space YAML path."),
    ],
    dataset: Annotated[
        str | None, typer.Option(help="Shortcut for --set dataset=... (default: the space's).")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a fixed option of the space: KEY=VALUE (repeatable)."),
    ] = None,
    num_samples: Annotated[
        int | None,
        typer.Option(help="Trials (random/optuna) or repeats of the grid (default: the space's)."),
    ] = None,
    max_concurrent: Annotated[
        int | None,
        typer.Option(help="Trials at once (default: as many as the cluster's CPUs/GPUs fit)."),
    ] = None,
    gpus_per_trial: Annotated[
        float | None, typer.Option(help="GPUs per trial (default: the space's).")
    ] = None,
    cpus_per_trial: Annotated[
        float | None, typer.Option(help="CPUs per trial (default: the space's).")
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(help="Sweep name; rerunning a name resumes it (default: space-<hash>)."),
    ] = None,
    storage: Annotated[Path, typer.Option(help="Folder of sweeps.")] = Path("xmr_tune"),
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: RAY_ADDRESS or local Ray).")
    ] = None,
    tracking_uri: Annotated[
        str | None,
        typer.Option(help="MLflow store (default: MLFLOW_TRACKING_URI or sqlite:///mlflow.db)."),
    ] = None,
) -> None:
    """Sweep a search space on Ray Tune: FairSample α, CLIP-clip m, the D′ ratio, or your own.

    One MLflow parent run per sweep (experiment xmr/tune/<space>) with a child run per trial;
    at the end the parent holds the best config, trials.csv and the Pareto plots. A trial that
    fails is reported and the others go on; rerunning the same --name resumes.
    """
    import yaml
    from rich.console import Console

    from xmr.compare import comparison_frame, comparison_table, sweep_runs
    from xmr.data import DataError
    from xmr.tune import SpaceError, SweepInterrupted, load_space, run_sweep

    overrides: dict = {}
    for item in set_ or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise _fail(f"--set takes KEY=VALUE, got {item!r}")
        overrides[key.strip().replace("-", "_")] = yaml.safe_load(value)
    if dataset:
        overrides["dataset"] = dataset
    changes: dict = {"fixed": overrides}
    for field, value in (
        ("num_samples", num_samples),
        ("max_concurrent", max_concurrent),
        ("gpus", gpus_per_trial),
        ("cpus", cpus_per_trial),
    ):
        if value is not None:
            changes[field] = value
    try:
        search_space = load_space(space).with_overrides(**changes)
        result = run_sweep(
            search_space, name=name, storage=storage, address=address, tracking_uri=tracking_uri
        )
    except (SpaceError, DataError, ValueError, FileNotFoundError, LookupError) as exc:
        raise _fail(str(exc)) from exc
    except SweepInterrupted as exc:
        typer.secho(str(exc), fg=typer.colors.YELLOW, err=True)
        raise typer.Exit(code=130) from exc
    console = Console()
    runs, metrics = sweep_runs(result.name, tracking_uri=tracking_uri)
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
        f"({', '.join(result.artifacts)}); `xmr compare --sweep {result.name}` shows this again",
        soft_wrap=True,
    )
    if len(result.failed):
        raise typer.Exit(code=1)


@app.command("compare")
def compare_command(
    sweep: Annotated[str | None, typer.Option(help="A sweep's name (xmr.sweep_id).")] = None,
    experiment: Annotated[
        str | None, typer.Option(help="An experiment, e.g. xmr/train/toyworld.")
    ] = None,
    metrics: Annotated[
        str | None,
        typer.Option(help="Comma-separated metric names (default: the sweep's, or test/...@10)."),
    ] = None,
    csv: Annotated[Path | None, typer.Option(help="Also write the table as CSV here.")] = None,
    tracking_uri: Annotated[
        str | None,
        typer.Option(help="MLflow store (default: MLFLOW_TRACKING_URI or sqlite:///mlflow.db)."),
    ] = None,
) -> None:
    """Compare runs in the terminal: a sweep's trials, or an experiment's runs."""
    from rich.console import Console

    from xmr.compare import comparison_frame, comparison_table, experiment_runs, sweep_runs

    if (sweep is None) == (experiment is None):
        raise _fail("give exactly one of --sweep or --experiment")
    chosen = [m.strip() for m in (metrics or "").split(",") if m.strip()]
    try:
        if sweep is not None:
            runs, sweep_metrics = sweep_runs(sweep, tracking_uri=tracking_uri)
            frame = comparison_frame(runs, chosen or sweep_metrics)
            title = f"sweep {sweep}"
        else:
            frame = comparison_frame(experiment_runs(experiment, tracking_uri=tracking_uri), chosen)
            title = f"experiment {experiment}"
    except LookupError as exc:
        raise _fail(str(exc)) from exc
    Console().print(comparison_table(frame, f"{title}: {len(frame)} runs"))
    if csv:
        frame.to_csv(csv, index=False)
        typer.echo(f"wrote {csv}")


@app.command("demo")
def demo_command(
    seed: Annotated[int, typer.Option(help="Seed of the world, D′ and training.")] = 0,
    epochs: Annotated[int | None, typer.Option(help="Training epochs per run.")] = None,
    workdir: Annotated[Path, typer.Option(help="Where D′ and the runs go.")] = Path("xmr-demo"),
    data: Annotated[
        Path | None, typer.Option(help="A ToyWorld folder; default: the embedded one.")
    ] = None,
    cpus_per_worker: Annotated[int, typer.Option(help="CPU cores for the training worker.")] = 2,
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: RAY_ADDRESS or local Ray).")
    ] = None,
    tracking_uri: Annotated[
        str | None,
        typer.Option(help="MLflow store (default: MLFLOW_TRACKING_URI or sqlite:///mlflow.db)."),
    ] = None,
) -> None:
    """The ODmAP experiment on the embedded ToyWorld: build D′, train on D and on D ∪ D′, compare.

    About 15 minutes on 2 CPU cores; rerunning resumes and reuses what is done.
    """
    from rich.console import Console

    from xmr.data import DataError
    from xmr.demo import DEMO_EPOCHS, comparison_table, run_demo

    try:
        result = run_demo(
            seed=seed,
            epochs=epochs or DEMO_EPOCHS,
            workdir=workdir,
            tracking_uri=tracking_uri,
            address=address,
            cpus_per_worker=cpus_per_worker,
            data=data,
        )
    except (DataError, ValueError, FileNotFoundError, LookupError) as exc:
        raise _fail(str(exc)) from exc
    console = Console()
    console.print(comparison_table(result))
    console.print(
        "ODmAP@K: how often the top captions for an image with objects removed describe what is "
        "left and not what was removed (higher is better). Both runs are in the MLflow "
        "experiment xmr/train/toyworld (`mlflow ui`, tag xmr.demo)."
    )


if __name__ == "__main__":
    app()
