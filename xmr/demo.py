"""``xmr demo``: the ODmAP paper's central experiment, end to end, on the embedded ToyWorld.

1. Generate the default ToyWorld (cached; no download).
2. Build D′ from its train split: box masks + Telea inpainting, noun-phrase removal captions.
3. Train ``xmr-tiny`` CLIP from scratch on D, and on D ∪ D′, with the same seed and budget.
4. Evaluate both on the test split (Recall@K both ways, ODmAP@K on exact counterfactual
   renders, Bias@K) and print them side by side.

Both runs land in the MLflow experiment ``xmr/train/toyworld`` tagged ``xmr.demo``; every step
is resumable (rerunning reuses the world, D′ and finished runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from xmr.data.default_world import default_toyworld
from xmr.metrics import metric_direction
from xmr.synth.build import synthesize_defaults
from xmr.train.config import resolve_config

if TYPE_CHECKING:
    from xmr.train.run import TrainResult

DEMO_EPOCHS = 3  # bench/RESULTS.md: the D′ effect is clear after 3 epochs
CONDITIONS = {"D": None, "D ∪ D′": "dprime"}


@dataclass
class DemoResult:
    """The two trained runs, by condition ("D", "D ∪ D′"), and the D′ folder."""

    runs: dict[str, TrainResult]
    dprime: Path


def run_demo(
    workdir: Path,
    *,
    seed: int = 0,
    epochs: int = DEMO_EPOCHS,
    tracking_uri: str | None = None,
    address: str | None = None,
    cpus_per_worker: int = 2,
    progress: bool = True,
    data: Path | None = None,
) -> DemoResult:
    """Run the demo into ``workdir`` (D′ in ``workdir/dprime``, runs in ``workdir/runs``).

    ``data``: another ToyWorld folder (``xmr data toyworld``) instead of the default one.
    """
    from xmr.train.run import train  # the Ray Train driver

    console = Console()
    world = data or default_toyworld(seed, progress=progress)
    console.rule("1/3  D′: remove co-occurring objects from the train split")
    dprime = workdir / "dprime"
    synthesize_defaults(world, dprime, seed=seed, address=address, progress=progress)
    runs: dict[str, TrainResult] = {}
    for step, (condition, synth) in enumerate(CONDITIONS.items(), start=2):
        console.rule(f"{step}/3  train xmr-tiny CLIP on {condition}")
        config = resolve_config(
            "clip",
            data=world,
            synth=dprime if synth else None,
            epochs=epochs,
            seed=seed,
            cpus_per_worker=cpus_per_worker,
            storage=workdir / "runs",
            name=f"demo-{'d-dprime' if synth else 'd'}-seed{seed}",
        )
        runs[condition] = train(
            config, address=address, tracking_uri=tracking_uri, tags={"xmr.demo": f"seed{seed}"}
        )
    return DemoResult(runs, dprime)


ROWS = [
    *(f"recall_i2t_at_{k}" for k in (1, 5, 10)),
    *(f"recall_t2i_at_{k}" for k in (1, 5, 10)),
    *(f"odmap_at_{k}" for k in (1, 5, 10)),
    "bias_at_10",
]


def comparison_table(result: DemoResult, split: str = "test") -> Table:
    """Metrics as rows, conditions as columns, and the change D ∪ D′ − D: green where D ∪ D′
    is better by the metric's direction (:func:`~xmr.metrics.metric_direction`; Bias@K by its
    size), red where it is not."""
    table = Table(title=f"xmr demo: {split} split of the default ToyWorld")
    table.add_column("metric")
    for condition in result.runs:
        table.add_column(condition, justify="right")
    table.add_column("Δ", justify="right")
    base, mixed = (result.runs[c].metrics for c in CONDITIONS)
    for name in ROWS:
        key = f"{split}/{name}"
        if key not in base:
            continue
        delta = mixed[key] - base[key]
        better = metric_direction(key).better(mixed[key], than=base[key])
        colour = "green" if better else "red"
        table.add_row(
            name.replace("_at_", "@"),
            f"{base[key]:.3f}",
            f"{mixed[key]:.3f}",
            f"[{colour}]{delta:+.3f}[/{colour}]",
        )
    return table
