"""What ``xmr train`` prints at the end: the final metrics and where the weights are."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from xmr.train.config import TrainConfig

if TYPE_CHECKING:
    from xmr.train.run import TrainResult


def print_summary(result: TrainResult, config: TrainConfig, console: Console | None = None) -> None:
    """A table of the final test metrics (K as columns; metrics without a K, such as the
    binding test's accuracies, in a second table) and the checkpoint paths."""
    console = console or Console()
    prefix = f"{config.test_split}/"
    final = {k.removeprefix(prefix): v for k, v in result.metrics.items() if k.startswith(prefix)}
    ranked = sorted(
        {name.rsplit("_at_", 1)[0] for name in final if "_at_" in name and "_ci_" not in name}
    )
    table = Table(title=f"{config.name}: {config.test_split} split")
    table.add_column("metric")
    for k in config.ks:
        table.add_column(f"@{k}", justify="right")
    for name in ranked:
        table.add_row(name, *(_cell(final, f"{name}_at_{k}") for k in config.ks))
    console.print(table)
    if any(name.endswith("_ci_low") for name in final):
        console.print(
            f"[dim]{escape('[low, high]')}: 95% bootstrap intervals over the test queries[/dim]"
        )
    single = sorted(name for name in final if "_at_" not in name)
    if single:
        others = Table()
        others.add_column("metric")
        others.add_column("value", justify="right")
        for name in single:
            others.add_row(name, f"{final[name]:.3f}")
        console.print(others)
    pairs = f"{result.data.original} pairs of D"
    if result.data.synthetic:
        pairs += f" + {result.data.synthetic} of D′"
    console.print(f"trained on {pairs}; {config.epochs} epochs")
    console.print(f"last checkpoint: {result.last_checkpoint}")
    if result.best_checkpoint:
        console.print(f"best checkpoint (val RSUM): {result.best_checkpoint}")
    console.print(f"MLflow run {result.mlflow_run_id} in experiment {result.experiment}")


def _cell(final: dict[str, float], name: str) -> str:
    """``value [low, high]`` of a final metric (its interval when it has one), or ``""``."""
    value = final.get(name)
    if value is None:
        return ""
    low, high = final.get(f"{name}_ci_low"), final.get(f"{name}_ci_high")
    if low is None or high is None:
        return f"{value:.3f}"
    return f"{value:.3f} [dim]{escape(f'[{low:.3f}, {high:.3f}]')}[/dim]"
