"""Reproduce the ODmAP paper's claim on ToyWorld, and FairSample's trade-off, with `xmr` commands.

For each seed: train ``xmr-tiny`` CLIP from scratch on D and on D ∪ D′ (D′ = ``xmr synth``
defaults: Telea fill, noun-phrase removal), same budget; then FairSample α ∈ {0, 0.4, 1} on D
(ToyWorld's train split plants a gender bias, its test captions are gender-neutral). Every run
is a plain command line (printed before it runs); the metrics are read back from MLflow and
summarised as mean ± std over seeds.

    python bench/reproduce_toyworld.py --seeds 0 1 2 --epochs 3 --workdir xmr-repro

Reruns resume: finished runs are reused (same names), so the table can be rebuilt cheaply.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from training_runs import final_metrics, run  # bench/training_runs.py

METRICS = [
    *(f"test/odmap_at_{k}" for k in (1, 5, 10)),
    *(f"test/recall_i2t_at_{k}" for k in (1, 5, 10)),
    *(f"test/recall_t2i_at_{k}" for k in (1, 5, 10)),
    "test/bias_at_10",
]


def summarise(rows: dict[str, list[dict[str, float]]]) -> str:
    """A Markdown table: one row per condition, mean ± std over seeds per metric."""
    names = [m.removeprefix("test/").replace("_at_", "@") for m in METRICS]
    lines = ["| condition | seeds | " + " | ".join(names) + " |"]
    lines.append("|---|---|" + "---|" * len(METRICS))
    for condition, results in rows.items():
        cells = []
        for metric in METRICS:
            values = np.array([r[metric] for r in results])
            spread = values.std(ddof=1) if len(values) > 1 else 0.0
            cells.append(f"{values.mean():.3f} ± {spread:.3f}")
        lines.append(f"| {condition} | {len(results)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.0, 0.4, 1.0])
    parser.add_argument("--workdir", type=Path, default=Path("xmr-repro"))
    parser.add_argument("--cpus-per-worker", type=int, default=2)
    args = parser.parse_args()

    workdir = args.workdir.resolve()
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    workdir.mkdir(parents=True, exist_ok=True)
    xmr = [sys.executable, "-m", "xmr.cli"]
    common = ["--epochs", str(args.epochs), "--cpus-per-worker", str(args.cpus_per_worker),
              "--storage", str(workdir / "runs"), "--tracking-uri", uri]  # fmt: skip
    dprime = workdir / "dprime"
    run([*xmr, "synth", "--out", str(dprime), "--tracking-uri", uri, "--no-progress"])

    rows: dict[str, list[dict[str, float]]] = {}
    for seed in args.seeds:
        for condition, extra in (("D", []), ("D ∪ D′", ["--synth", str(dprime)])):
            name = f"repro-{'d-dprime' if extra else 'd'}-seed{seed}"
            run([*xmr, "train", *common, *extra, "--seed", str(seed), "--name", name])
            rows.setdefault(condition, []).append(final_metrics(uri, name))
    fair: dict[str, list[dict[str, float]]] = {}
    for alpha in args.alphas:
        seed = args.seeds[0]
        name = f"repro-d-seed{seed}" if alpha == 0 else f"repro-fair{alpha}-seed{seed}"
        if alpha:
            run([*xmr, "train", *common, "--fair-alpha", str(alpha), "--seed", str(seed),
                 "--name", name])  # fmt: skip
        fair[f"FairSample α={alpha}"] = [final_metrics(uri, name)]
    print(summarise(rows))
    print()
    print(summarise(fair))


if __name__ == "__main__":
    main()
