"""Does D′ help beyond the training budget? The ODmAP paper's claim on three ToyWorlds, over
training seeds, at equal steps and at convergence, with `xmr` commands.

For each world (the default one; the packaged worlds ``pets`` and ``street``: other planted
pairs, strengths, world seeds and half the training images), generated into the workdir:

1. D′ of its train split (``xmr synth`` defaults: Telea fill, noun-phrase removal).
2. For each training seed (``xmr train --seeds``: the seed runs nested under a parent run):
   ``xmr-tiny`` CLIP from scratch on D ∪ D′ for E epochs; on D for as many optimiser steps as
   that seed's D ∪ D′ run took (``--steps``, read back from MLflow); on D for E epochs (the
   paper's equal-epochs comparison, which gives D ∪ D′ more steps).
3. ``--converged``: D and D ∪ D′ each until its val RSUM levels off (``--epochs auto``), tested
   with its best epoch's weights.

Then ``--ratios``: the ``synth_ratio`` space on the first world, every ratio trained for the
steps of E epochs of D (``--set steps=N``: step-matched), and ``--alphas``: FairSample on the
first world's D (α = 0 is the D run).

The report, per world: each seed's paired change of D ∪ D′ over each D run on ODmAP@1/5/10
(95 % bootstrap interval over the test queries, which says nothing of training variance), and
over the seeds the mean change with a two-stage bootstrap interval over seeds *and* queries
(:func:`xmr.compare.bootstrap.seeds_and_queries_interval`), the one that carries training's
variance; then one line per world for the README.

    python bench/reproduce_toyworld.py --workdir xmr-repro                 # 3 worlds × 3 seeds
    python bench/reproduce_toyworld.py --workdir xmr-repro --converged     # + at convergence
    python bench/reproduce_toyworld.py --workdir xmr-repro --converged --converged-seeds 0
    python bench/reproduce_toyworld.py --workdir xmr-repro --worlds default --ratios
    python bench/reproduce_toyworld.py --workdir xmr-repro --report-only   # the tables again

Reruns resume: finished runs are reused (same names), so the report can be rebuilt cheaply and
an interrupted reproduction continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from training_runs import (  # bench/training_runs.py
    by_steps,
    final_metrics,
    lr_step_period,
    paired_gains,
    run,
    seed_differences,
    seeds_flag,
    short_name,
    summarise,
    total_steps,
)

from xmr.compare.bootstrap import seeds_and_queries_interval
from xmr.compare.paired import paired_comparison
from xmr.compare.runs import sweep_runs
from xmr.compare.verdict import change_text

WORLDS = {"default": None, "pets": "pets", "street": "street"}
"""The worlds: None is the default config (world seed 0); the others are packaged worlds
(``xmr data toyworld --config pets``)."""
ODMAP = [f"test/odmap_at_{k}" for k in (1, 5, 10)]
METRICS = [*ODMAP, *(f"test/recall_{d}_at_10" for d in ("i2t", "t2i")), "test/bias_at_10"]
D, D_DPRIME, D_STEPS, D_CONV, D_DPRIME_CONV = (
    "D, E epochs", "D ∪ D′, E epochs", "D, same steps", "D, converged", "D ∪ D′, converged"
)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", nargs="+", default=list(WORLDS), choices=list(WORLDS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=3, help="E: epochs of the D ∪ D′ run")
    parser.add_argument("--converged", action="store_true", help="also D, D ∪ D′ --epochs auto")
    parser.add_argument("--patience", type=int, default=3, help="of the converged runs")
    parser.add_argument("--max-epochs", type=int, default=30, help="of the converged runs")
    parser.add_argument(
        "--converged-seeds",
        type=int,
        nargs="+",
        help="seeds of the converged runs (default: --seeds)",
    )
    parser.add_argument("--ratios", action="store_true",
                        help="the synth_ratio space on the first world, step-matched")  # fmt: skip
    parser.add_argument("--alphas", type=float, nargs="*", default=[],
                        help="FairSample α besides 0 on the first world's D")  # fmt: skip
    parser.add_argument("--workdir", type=Path, default=Path("xmr-repro"))
    parser.add_argument(
        "--pretrained", default=None,
        help="'toy': every run finetunes the toy CLIP (give it its own --workdir); the "
        "step-matched control then also takes D ∪ D′'s learning-rate period",
    )  # fmt: skip
    parser.add_argument("--cpus-per-worker", type=int, default=2)
    parser.add_argument("--report-only", action="store_true", help="no training: the tables")
    args = parser.parse_args()

    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    bench = Reproduction(workdir, args)
    if not args.report_only:
        for world in args.worlds:
            bench.train_fixed_budget(world)
        if args.converged:
            for world in args.worlds:
                bench.train_converged(world)
        if args.ratios:
            bench.sweep_ratios(args.worlds[0])
        if args.alphas:
            bench.train_fairsample(args.worlds[0], args.alphas)
    headline = [bench.report_world(world) for world in args.worlds]
    print("\n## Over worlds: D ∪ D′ − D on ODmAP@1, mean over seeds [interval over seeds and "
          "queries]\n")  # fmt: skip
    print("| world | planted pairs | same steps | same epochs | converged |")
    print("|---|---|---|---|---|")
    for line in headline:
        print(line)
    if args.ratios:
        bench.report_ratios(args.worlds[0])
    if args.alphas:
        bench.report_fairsample(args.worlds[0], args.alphas)


class Reproduction:
    """The runs of one workdir: where each world, D′ and run is, and the commands that make
    them (each printed before it runs; a finished run is reused)."""

    def __init__(self, workdir: Path, args: argparse.Namespace) -> None:
        self.workdir, self.args = workdir, args
        self.uri = f"sqlite:///{workdir / 'mlflow.db'}"
        self.xmr = [sys.executable, "-m", "xmr.cli"]
        self.seeds = list(args.seeds)
        self.converged_seeds = list(args.converged_seeds or args.seeds)

    def world(self, name: str) -> Path:
        """The world's folder, generated on first use."""
        folder = self.workdir / f"world-{name}"
        if not (folder / "world.json").is_file():
            config = WORLDS[name]
            source = ["--config", str(config)] if config else ["--seed", "0"]
            run([*self.xmr, "data", "toyworld", "--out", str(folder), *source])
        return folder

    def dprime(self, name: str) -> Path:
        """D′ of the world's train split, built on first use (an interrupted build resumes; a
        finished one has its manifest)."""
        out = self.workdir / f"dprime-{name}"
        if not (out / "manifest.json").is_file():
            run([*self.xmr, "synth", "--data", str(self.world(name)), "--out", str(out),
                 "--tracking-uri", self.uri, "--no-progress"])  # fmt: skip
        return out

    def train(self, name: str, *flags: str, seeds: Sequence[int] | None = None) -> None:
        """``xmr train`` on ``name``'s world, once per seed (runs ``<run>-seed<N>``)."""
        world = name.split("-")[0]
        run([*self.xmr, "train", "--data", str(self.world(world)),
             "--cpus-per-worker", str(self.args.cpus_per_worker),
             "--storage", str(self.workdir / "runs"), "--tracking-uri", self.uri,
             "--seeds", seeds_flag(seeds or self.seeds), *self.init, *flags,
             "--name", name])  # fmt: skip

    def runs(self, world: str) -> dict[str, dict[int, str]]:
        """Per condition, its run name per seed (the fixed-budget ones; converged ones when
        trained)."""
        names = {
            D_DPRIME: {s: f"{world}-d-dprime-seed{s}" for s in self.seeds},
            D_STEPS: {s: f"{world}-d-steps{self.steps(world, s)}-seed{s}" for s in self.seeds},
            D: {s: f"{world}-d-seed{s}" for s in self.seeds},
        }
        if self.args.converged:
            seeds = self.converged_seeds
            names[D_CONV] = {s: f"{world}-conv-d-seed{s}" for s in seeds}
            names[D_DPRIME_CONV] = {s: f"{world}-conv-d-dprime-seed{s}" for s in seeds}
        return names

    def steps(self, world: str, seed: int) -> int:
        """The optimiser steps of the seed's D ∪ D′ run (what the control matches)."""
        return total_steps(self.uri, f"{world}-d-dprime-seed{seed}")

    def train_fixed_budget(self, world: str) -> None:
        epochs = ["--epochs", str(self.args.epochs)]
        self.train(f"{world}-d-dprime", *epochs, "--synth", str(self.dprime(world)))
        steps = {seed: self.steps(world, seed) for seed in self.seeds}
        for count, group in by_steps(steps):  # one group per step count
            # From the toy CLIP, on D ∪ D′'s learning-rate path too (the from-scratch tables
            # were made before --lr-step-period; their runs keep their names and rates).
            lr = self.matched_lr(world, group[0])
            self.train(f"{world}-d-steps{count}", "--steps", str(count), *lr, seeds=group)
        self.train(f"{world}-d", *epochs)

    @property
    def init(self) -> list[str]:
        """The runs' ``--pretrained`` flag, when given."""
        return ["--pretrained", self.args.pretrained] if self.args.pretrained else []

    def matched_lr(self, world: str, seed: int) -> list[str]:
        """``--lr-step-period`` of the seed's D ∪ D′ run, for a control finetuning the toy
        CLIP; none from scratch."""
        if not self.args.pretrained:
            return []
        return ["--lr-step-period", str(lr_step_period(self.uri, f"{world}-d-dprime-seed{seed}"))]

    def train_converged(self, world: str) -> None:
        auto = ["--epochs", "auto", "--patience", str(self.args.patience),
                "--max-epochs", str(self.args.max_epochs)]  # fmt: skip
        seeds = self.converged_seeds
        self.train(f"{world}-conv-d-dprime", *auto, "--synth", str(self.dprime(world)), seeds=seeds)
        self.train(f"{world}-conv-d", *auto, seeds=seeds)

    def sweep_ratios(self, world: str) -> None:
        """The shipped synth_ratio space on ``world``, each ratio for the steps of E epochs of
        D (the world's D run)."""
        steps = total_steps(self.uri, f"{world}-d-seed{self.seeds[0]}")
        run([*self.xmr, "tune", "--space", "synth_ratio", "--name", f"{world}-ratios",
             "--set", f"data={self.world(world)}", "--set", f"synth={self.dprime(world)}",
             "--set", f"steps={steps}", "--set", f"seed={self.seeds[0]}",
             "--storage", str(self.workdir / "sweeps"), "--tracking-uri", self.uri])  # fmt: skip

    def train_fairsample(self, world: str, alphas: Sequence[float]) -> None:
        for alpha in alphas:
            self.train(f"{world}-fair{alpha:g}", "--epochs", str(self.args.epochs),
                       "--fair-alpha", str(alpha))  # fmt: skip

    def report_world(self, world: str) -> str:
        """Print the world's tables; return its line of the over-worlds table."""
        names = self.runs(world)
        pairs = _planted_pairs(self.world(world))
        print(f"\n## World {world}: {pairs}\n")
        rows = {c: [final_metrics(self.uri, n) for n in runs.values()] for c, runs in names.items()}
        print(summarise(rows, METRICS, self.seeds))
        print()
        controls = {c: names[c] for c in (D_STEPS, D)}
        print(paired_gains(self.uri, (D_DPRIME, names[D_DPRIME]), controls, ODMAP))
        if self.args.converged:
            print(paired_gains(self.uri, (D_DPRIME_CONV, names[D_DPRIME_CONV]),
                               {D_CONV: names[D_CONV]}, ODMAP))  # fmt: skip
            stops = [final_metrics(self.uri, n) for c in (D_CONV, D_DPRIME_CONV)
                     for n in names[c].values()]  # fmt: skip
            epochs = ", ".join(f"{int(m['train/best_epoch'])}/{int(m['train/stopped_epoch'])}"
                               for m in stops)  # fmt: skip
            print(f"\nconverged runs' best/stopped epochs ({D_CONV}, then {D_DPRIME_CONV}, "
                  f"by seed): {epochs}")  # fmt: skip
        print("\nD ∪ D′ − D, mean over seeds [95 % two-stage bootstrap interval over seeds and "
              "test queries; over the queries alone for one seed]")  # fmt: skip
        cells = {}
        comparisons = {"same steps": (D_DPRIME, D_STEPS), "same epochs": (D_DPRIME, D)}
        if self.args.converged:
            comparisons["converged"] = (D_DPRIME_CONV, D_CONV)
        for label, (treated, control) in comparisons.items():
            parts = []
            differences = seed_differences(self.uri, names[treated], names[control], ODMAP)
            for metric in ODMAP:
                interval = seeds_and_queries_interval(differences[metric])
                text = change_text(interval.value, interval.low, interval.high, mark=True)
                parts.append(f"{short_name(metric)} {text}")
                if metric == ODMAP[0]:
                    cells[label] = parts[-1].split(" ", 1)[1]
            print(f"- {label} (seeds {seeds_flag(list(names[treated]))}): " + ", ".join(parts))
        converged = cells.get("converged", "–")
        return (
            f"| {world} | {pairs} | {cells['same steps']} | {cells['same epochs']} | {converged} |"
        )

    def report_ratios(self, world: str) -> None:
        """Each ratio's paired change over the lowest (D alone, as many steps) on ODmAP@1 and
        Recall@1 both ways, with the paired interval over the test queries."""
        trials, _ = sweep_runs(f"{world}-ratios", tracking_uri=self.uri)
        trials = trials[trials["status"] == "FINISHED"]
        by_ratio = dict(zip(trials["params.data.synth_ratio"].astype(float), trials["run_id"],
                            strict=True))  # fmt: skip
        lowest = min(by_ratio)
        steps = total_steps(self.uri, f"{world}-d-seed{self.seeds[0]}")
        print(f"\n## {world}: the synth_ratio space at equal steps ({steps} each, seed "
              f"{self.seeds[0]}): each ratio − ratio {lowest:g}\n")  # fmt: skip
        metrics = [ODMAP[0], "test/recall_t2i_at_1", "test/recall_i2t_at_1"]
        for ratio in sorted(r for r in by_ratio if r != lowest):
            frame = paired_comparison(by_ratio[lowest], by_ratio[ratio], metrics,
                                      tracking_uri=self.uri).frame  # fmt: skip
            cells = ", ".join(
                f"{short_name(row.metric)} "
                f"{change_text(row.difference, row.ci_low, row.ci_high, mark=True)}"
                for row in frame.itertuples()
            )
            print(f"- ratio {ratio:g}: {cells}")
        print("\n[low, high]: paired 95 % bootstrap interval over the test queries; * excludes 0")

    def report_fairsample(self, world: str, alphas: Sequence[float]) -> None:
        names = {"FairSample α=0 (D)": {s: f"{world}-d-seed{s}" for s in self.seeds}}
        names.update({f"FairSample α={a:g}": {s: f"{world}-fair{a:g}-seed{s}" for s in self.seeds}
                      for a in alphas})  # fmt: skip
        rows = {c: [final_metrics(self.uri, n) for n in runs.values()] for c, runs in names.items()}
        per_class = [m for m in rows[next(iter(rows))][0]
                     if m.startswith("test/bias_at_10_") and "_ci_" not in m]  # fmt: skip
        print(f"\n## {world}: FairSample\n")
        print(summarise(rows, [*METRICS, *per_class], self.seeds))
        plain, *others = names.items()
        for condition, runs in others:
            metrics = ["test/bias_at_10", *per_class, "test/recall_t2i_at_10"]
            print(paired_gains(self.uri, (condition, runs), dict([plain]), metrics))


def _planted_pairs(world: Path) -> str:
    """``dog → frisbee 0.9, horse → person 0.9``: the world's planted co-occurrences."""
    config = json.loads((world / "world.json").read_text())["config"]
    return ", ".join(f"{p['a']} → {p['b']} {p['p']:g}" for p in config["cooccurrence"])


if __name__ == "__main__":
    main()
