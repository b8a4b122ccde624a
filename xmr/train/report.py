"""What ``xmr train`` prints at the end: the final metrics and where the weights are (with
``--seeds``: each final metric's mean ± std over the seeds, and each seed's run)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from xmr.train.config import TrainConfig

if TYPE_CHECKING:
    from xmr.train.result import TrainResult
    from xmr.train.seeds import SeedsResult


def print_summary(result: TrainResult, config: TrainConfig, console: Console | None = None) -> None:
    """A table of the final test metrics (K as columns; metrics without a K, such as the
    binding test's accuracies, in a second table) and the checkpoint paths."""
    console = console or Console()
    prefix = f"{config.test_split}/"
    final = {k.removeprefix(prefix): v for k, v in result.metrics.items() if k.startswith(prefix)}
    _print_tables(console, final, config, f"{config.name}: {config.test_split} split", _cell)
    if any(name.endswith("_ci_low") for name in final):
        console.print(
            f"[dim]{escape('[low, high]')}: 95% bootstrap intervals over the test queries[/dim]"
        )
    pairs = f"{result.data.original} pairs of D"
    if result.data.synthetic:
        pairs += f" + {result.data.synthetic} of D′"
    console.print(f"trained on {pairs}; {_length(result.metrics, config)}")
    console.print(f"last checkpoint: {result.last_checkpoint}")
    if result.best_checkpoint:
        console.print(f"best checkpoint (val RSUM): {result.best_checkpoint}")
    console.print(f"MLflow run {result.mlflow_run_id} in experiment {result.experiment}")


def print_seeds_summary(
    result: SeedsResult, config: TrainConfig, console: Console | None = None
) -> None:
    """The final test metrics as mean ± std over the seeds (K as columns, as
    :func:`print_summary`), then each seed's run and the MLflow parent run."""
    console = console or Console()
    prefix = f"{config.test_split}/"
    statistics = {
        key.removeprefix(prefix): value
        for key, value in result.statistics.items()
        if key.startswith(prefix)
    }
    final = {k.removesuffix("_mean"): v for k, v in statistics.items() if k.endswith("_mean")}
    spread = {k.removesuffix("_std"): v for k, v in statistics.items() if k.endswith("_std")}
    seeds = len(result.runs)
    title = f"{result.name}: {config.test_split} split, mean ± std over {_count(seeds, 'seed')}"

    def cell(values: dict[str, float], name: str) -> str:
        if name not in values:
            return ""
        std = spread.get(name)
        return f"{values[name]:.3f}" + ("" if std is None else f" [dim]± {std:.3f}[/dim]")

    _print_tables(console, final, config, title, cell)
    if seeds == 1:
        console.print("[dim]one seed: no standard deviation[/dim]")
    for seed, run in result.runs.items():
        console.print(
            f"seed {seed}: {_length(run.metrics, config)}; last checkpoint {run.last_checkpoint}",
            soft_wrap=True,
        )
    console.print(
        f"MLflow parent run {result.parent_run_id} ({result.name}) in experiment "
        f"{result.experiment}, a child run per seed",
        soft_wrap=True,
    )


def _print_tables(
    console: Console,
    final: dict[str, float],
    config: TrainConfig,
    title: str,
    cell: Callable[[dict[str, float], str], str],
) -> None:
    """``final`` (metric name without the split -> value) as a table of the ranked metrics,
    K as columns, then one of the metrics without a K; ``cell`` renders a metric's value."""
    ranked = sorted(
        {name.rsplit("_at_", 1)[0] for name in final if "_at_" in name and "_ci_" not in name}
    )
    table = Table(title=title)
    table.add_column("metric")
    for k in config.ks:
        table.add_column(f"@{k}", justify="right")
    for name in ranked:
        table.add_row(name, *(cell(final, f"{name}_at_{k}") for k in config.ks))
    console.print(table)
    single = sorted(
        name for name in final if "_at_" not in name and not name.endswith(("_ci_low", "_ci_high"))
    )
    if single:
        others = Table()
        others.add_column("metric")
        others.add_column("value", justify="right")
        for name in single:
            others.add_row(name, cell(final, name))
        console.print(others)


def _length(metrics: dict[str, float], config: TrainConfig) -> str:
    """How long a run trained: ``3 epochs, 120 optimiser steps`` (the steps when logged)."""
    epochs = int(metrics.get("epoch", config.epochs))
    steps = metrics.get("train/global_step")
    return _count(epochs, "epoch") + ("" if steps is None else f", {int(steps)} optimiser steps")


def _count(number: int, noun: str) -> str:
    """``1 seed``, ``2 seeds``."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _cell(final: dict[str, float], name: str) -> str:
    """``value [low, high]`` of a final metric (its interval when it has one), or ``""``."""
    value = final.get(name)
    if value is None:
        return ""
    low, high = final.get(f"{name}_ci_low"), final.get(f"{name}_ci_high")
    if low is None or high is None:
        return f"{value:.3f}"
    return f"{value:.3f} [dim]{escape(f'[{low:.3f}, {high:.3f}]')}[/dim]"
