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
) -> None:
    """Generate a ToyWorld: a procedural dataset with planted co-occurrence and gender biases."""
    from xmr.data.toyworld import generate

    try:
        root = generate(out, config, seed=seed, progress=True)
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
    model: Annotated[str, typer.Option(help="Model family (see `xmr models`).")] = "clip",
    arch: Annotated[str, typer.Option(help="Architecture, e.g. ViT-B-32 or xmr-tiny.")] = (
        "xmr-tiny"
    ),
    pretrained: Annotated[
        str, typer.Option(help="Pretrained tag (e.g. openai), or 'none' for random init.")
    ] = "none",
    checkpoint: Annotated[
        Path | None, typer.Option(help="Local checkpoint (state dict) to load.")
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
) -> None:
    """Evaluate a model: Recall@K both ways, ODmAP@K and Bias@K, logged to MLflow."""
    from xmr.data import DataError
    from xmr.eval import EvalConfig, evaluate
    from xmr.eval.report import log_to_mlflow, print_report, write_json
    from xmr.models import ModelSpec

    try:
        config = EvalConfig(
            model=ModelSpec(model, arch, None if pretrained == "none" else pretrained, checkpoint),
            dataset=dataset,
            data=data,
            split=split,
            metrics=tuple(m.strip() for m in metrics.split(",") if m.strip()),
            batch_size=batch_size,
            actors=actors,
            device=device,
            seed=seed,
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


if __name__ == "__main__":
    app()
