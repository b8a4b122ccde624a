"""Reproduce the ODmAP paper's claim on ToyWorld, and FairSample's trade-off, with `xmr` commands.

On one ToyWorld (the default config, world seed 0, generated into the workdir), train
``xmr-tiny`` CLIP from scratch, once per training seed (``xmr train --seeds``: the seed runs
nested in MLflow under a parent run per condition), in three conditions: D and D ∪ D′ for E
epochs (D′ = ``xmr synth`` defaults: Telea fill, noun-phrase removal), and D for as many
optimiser steps as the same seed's D ∪ D′ run took (``--steps``, read back from MLflow: D ∪ D′
has more pairs, so E epochs of it are more steps); then FairSample α ∈ {0.4, 1} on D with the
same seeds, α = 0 being the D runs (ToyWorld's train split plants a gender bias; its gender
split holds gender-neutral captions of images with the linked classes). Every run is a plain
command line (printed before it runs). The metrics are read back from MLflow and summarised
per condition as mean ± std over seeds with the first seed's 95 % bootstrap interval; D′'s
ODmAP gain over both D controls, and each α's change of Bias@10 (overall and per linked
class) from α = 0, come with their paired intervals per seed.

    python bench/reproduce_toyworld.py --seeds 0 1 2 --epochs 3 --workdir xmr-repro
    python bench/reproduce_toyworld.py ... --alphas 1     # FairSample α = 1 only
    python bench/reproduce_toyworld.py ... --alphas       # the ODmAP conditions only

Reruns resume: finished runs are reused (same names), so the table can be rebuilt cheaply.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from training_runs import (  # bench/training_runs.py
    by_steps,
    final_metrics,
    paired_gains,
    run,
    seeds_flag,
    summarise,
    total_steps,
)

METRICS = [
    *(f"test/odmap_at_{k}" for k in (1, 5, 10)),
    *(f"test/recall_i2t_at_{k}" for k in (1, 5, 10)),
    *(f"test/recall_t2i_at_{k}" for k in (1, 5, 10)),
    "test/bias_at_10",
]
ODMAP = [f"test/odmap_at_{k}" for k in (1, 5, 10)]  # the paper's claim: D′ raises these
D, D_DPRIME, D_MATCHED = "D", "D ∪ D′", "D (steps of D ∪ D′)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=3, help="E: epochs of the D and D ∪ D′ runs")
    parser.add_argument("--alphas", type=float, nargs="*", default=[0.4, 1.0],
                        help="FairSample α besides 0 (the D run); none: skip")  # fmt: skip
    parser.add_argument("--workdir", type=Path, default=Path("xmr-repro"))
    parser.add_argument("--cpus-per-worker", type=int, default=2)
    args = parser.parse_args()

    workdir = args.workdir.resolve()
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    workdir.mkdir(parents=True, exist_ok=True)
    xmr = [sys.executable, "-m", "xmr.cli"]
    common = ["--cpus-per-worker", str(args.cpus_per_worker), "--storage", str(workdir / "runs"),
              "--tracking-uri", uri]  # fmt: skip
    epochs = ["--epochs", str(args.epochs)]
    seeds = ["--seeds", seeds_flag(args.seeds)]
    # One world for every seed (without --data each seed would train on its own default world,
    # and D′, built once, would come from another one): the seed is training's alone.
    world = workdir / "world"
    if not (world / "world.json").is_file():
        run([*xmr, "data", "toyworld", "--out", str(world), "--seed", "0"])
    common += ["--data", str(world)]
    dprime = workdir / "dprime"
    run([*xmr, "synth", "--data", str(world), "--out", str(dprime), "--tracking-uri", uri,
         "--no-progress"])  # fmt: skip

    # Parent runs repro-d and repro-d-dprime; seed N's runs repro-d-seedN, repro-d-dprime-seedN.
    run([*xmr, "train", *common, *epochs, *seeds, "--name", "repro-d"])
    run([*xmr, "train", *common, *epochs, "--synth", str(dprime), *seeds, "--name",
         "repro-d-dprime"])  # fmt: skip
    steps = {seed: total_steps(uri, f"repro-d-dprime-seed{seed}") for seed in args.seeds}
    for count, group in by_steps(steps):  # one parent per step count (all seeds, usually)
        run([*xmr, "train", *common, "--steps", str(count), "--seeds", seeds_flag(group),
             "--name", f"repro-d-steps{count}"])  # fmt: skip
    # FairSample last: the ODmAP conditions above are the claim, these its gender-method sibling.
    fair_names = {"FairSample α=0 (D)": {s: f"repro-d-seed{s}" for s in args.seeds}}
    for alpha in args.alphas:
        run([*xmr, "train", *common, *epochs, "--fair-alpha", str(alpha), *seeds, "--name",
             f"repro-fair{alpha}"])  # fmt: skip
        fair_names[f"FairSample α={alpha}"] = {s: f"repro-fair{alpha}-seed{s}" for s in args.seeds}
    names = {
        D: {seed: f"repro-d-seed{seed}" for seed in args.seeds},
        D_DPRIME: {seed: f"repro-d-dprime-seed{seed}" for seed in args.seeds},
        D_MATCHED: {seed: f"repro-d-steps{steps[seed]}-seed{seed}" for seed in args.seeds},
    }
    rows = {c: [final_metrics(uri, n) for n in runs.values()] for c, runs in names.items()}
    per_class = [m for m in rows[D][0] if m.startswith("test/bias_at_10_") and "_ci_" not in m]
    fair = {c: [final_metrics(uri, n) for n in runs.values()] for c, runs in fair_names.items()}
    print(summarise(rows, [*METRICS, *per_class], args.seeds))
    print()
    print(paired_gains(uri, (D_DPRIME, names[D_DPRIME]), {c: names[c] for c in (D, D_MATCHED)},
                       ODMAP))  # fmt: skip
    if not args.alphas:
        return
    print()
    print(summarise(fair, [*METRICS, *per_class], args.seeds))
    print()
    plain, *others = fair_names.items()
    for condition, runs in others:
        print(paired_gains(uri, (condition, runs), dict([plain]),
                           ["test/bias_at_10", *per_class, "test/recall_t2i_at_10"]))  # fmt: skip


if __name__ == "__main__":
    main()
