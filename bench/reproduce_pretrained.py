"""Every paper's claim in the papers' regime (issue 45): a pretrained CLIP (the toy CLIP,
``--pretrained toy``) finetuned to convergence, over training seeds, with each paper's job.

Each experiment is one of the paper jobs (``ray_jobs/``) run once per seed on a world generated
once (``xmr data toyworld --config W``, so the seeds vary training, D′ and BiAug-D′, not the
world), every training run ``--pretrained toy --converged`` unless the experiment says
otherwise. Then, per experiment and metric, the change its job reports (the last condition
minus the first) with one paired 95 % interval over the test queries per seed (the job's
``comparison.csv``), and the mean over seeds with the two-stage seeds-and-queries interval
(:func:`xmr.compare.bootstrap.seeds_and_queries_interval`, over the per-query values the runs
logged): the interval that holds training's variance. A positive control is an experiment
where the effect must appear if xmr measures it; its verdict says whether it did.

    python bench/reproduce_pretrained.py --list                # the experiments
    python bench/reproduce_pretrained.py --workdir xmr-pretrained                  # all, 3 seeds
    python bench/reproduce_pretrained.py --workdir xmr-pretrained --only odmap-default
    python bench/reproduce_pretrained.py --workdir xmr-pretrained --report-only    # the tables

Reruns resume: worlds, finished jobs and their steps are reused (each job resumes as
``ray_jobs/*.py`` does). Every command is printed before it runs. On 2 CPU cores one converged
job takes 30–90 minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
from training_runs import run  # bench/training_runs.py

from xmr.compare.bootstrap import Interval, paired_intervals, seeds_and_queries_interval
from xmr.compare.per_query import QueryValues, logged_per_query
from xmr.compare.verdict import change_text
from xmr.jobs.gender import SWEEPS

REPO = Path(__file__).resolve().parents[1]
ODMAP = [
    f"test/{m}"
    for m in ("odmap_at_1", "odmap_at_5", "odmap_at_10", "recall_t2i_at_1", "recall_t2i_at_10")
]
EICLIP = [
    *(f"test/{p}recall_{d}_at_{k}" for p in ("", "subcat_") for d in ("t2i", "i2t")
      for k in (1, 5, 10)),
    *(f"test/brand_{kind}/recall_{d}_at_1" for kind in ("scene_word", "shop_word", "invented")
      for d in ("t2i", "i2t")),
]  # fmt: skip
BIAUG = [f"test/binding/{m}_acc" for m in ("swap", "counter", "stereotype")] + [
    "test/recall_t2i_at_1", "test/recall_i2t_at_1",
]  # fmt: skip
EICLIP_SUMR = (
    "test/sumr",
    "test/subcat_sumr",
    *(f"test/brand_{kind}/sumr" for kind in ("scene_word", "shop_word", "invented")),
)
GENDER = ["test/bias_at_10", "test/natural/bias_at_10", "test/recall_t2i_at_10"]
GENDER_ALPHAS = ("0.5", "1")
GENDER_MS = ("16", "64")


@dataclass(frozen=True)
class Experiment:
    """One paper job over seeds: its world (a packaged config; None: the mode's default world),
    its flags, the run pairs it compares (``(control, treatment)``, each a step's name or, for a
    sweep step, ``<step>=<value>``: its trial with that value, see :meth:`Reproduction.run_id`),
    the metrics, and whether it is a positive control (the effect must appear)."""

    job: str
    world: str | None
    flags: tuple[str, ...]
    comparisons: tuple[tuple[str, str], ...]
    metrics: list[str]
    positive_control: bool = False
    mode: str | None = None
    levels: tuple[str, ...] = ()
    """Metrics without per-query values (a SumR) shown as each run's value per seed."""


CONVERGED = ("--pretrained", "toy", "--converged")
D_VS_DPRIME = (("train-d", "train-d-dprime"),)
HARD_NEGATIVES = (("train-d", "train-d-dprime"), ("train-d", "train-d-dprime-free"),
                  ("train-d-dprime-free", "train-d-dprime"))  # fmt: skip
EXPERIMENTS = {
    **{
        f"odmap-{w}": Experiment("odmap", None if w == "default" else w, CONVERGED, D_VS_DPRIME,
                                 ODMAP)
        for w in ("default", "pets", "street")
    },
    "odmap-default-steps": Experiment("odmap", None, ("--pretrained", "toy"), D_VS_DPRIME, ODMAP),
    "odmap-control": Experiment("odmap", "odmap-control", CONVERGED, D_VS_DPRIME, ODMAP,
                                positive_control=True),
    "eiclip-shop": Experiment("eiclip", None, CONVERGED, (("train-clip", "train-eiclip"),),
                              EICLIP, mode="shop", levels=EICLIP_SUMR),
    "eiclip-shop-confounded": Experiment("eiclip", "shop-confounded", CONVERGED,
                                         (("train-clip", "train-eiclip"),), EICLIP,
                                         positive_control=True, mode="shop", levels=EICLIP_SUMR),
    "biaug-binding": Experiment("biaug", "binding", (*CONVERGED, "--hard-negative-ablation"),
                                HARD_NEGATIVES, BIAUG),
    "biaug-binding-steps": Experiment("biaug", "binding",
                                      ("--pretrained", "toy", "--hard-negative-ablation"),
                                      HARD_NEGATIVES, BIAUG),
    "biaug-control": Experiment("biaug", "binding", (*CONVERGED, "--synth-ratio", "2",
                                "--captions-per-image", "all"), D_VS_DPRIME, BIAUG,
                                positive_control=True),
    "gender": Experiment("gender", None, (*CONVERGED, "--alphas", ",".join(("0", *GENDER_ALPHAS)),
                                          "--max-concurrent", "1"),
                         (*(("fair-alpha=0", f"fair-alpha={a}") for a in GENDER_ALPHAS),
                          *(("clip-m=0", f"clip-m={m}") for m in GENDER_MS)), GENDER),
}  # fmt: skip
"""The experiments, by name: the papers' claims and one positive control each (ODmAP: four
pairs that always co-occur; EI-CLIP: brand names whose namesakes are on other brands' logos;
BiAug: exact counterfactual pairs, four times the budget, every caption edited). Gender has none
of its own: FairSample at α = 1 and CLIP-clip's largest m are the sweeps' strong ends."""
RESOURCE_FLAG = {"gender": "--cpus-per-trial"}
"""Job -> its flag for a training's CPUs (the others: ``--cpus-per-worker``)."""


class Reproduction:
    """The worlds, the jobs and their reports in ``workdir``."""

    def __init__(self, workdir: Path, seeds: Sequence[int], cpus_per_worker: int) -> None:
        self.workdir, self.seeds, self.cpus = workdir.resolve(), list(seeds), cpus_per_worker
        self.uri = f"sqlite:///{self.workdir / 'mlflow.db'}"

    def world(self, experiment: Experiment) -> Path:
        """The experiment's world, generated on first use (with its config's own seed)."""
        name = experiment.world or experiment.mode or "default"
        folder = self.workdir / "worlds" / name
        if not (folder / "world.json").is_file():
            source = ["--config", experiment.world] if experiment.world else []
            mode = ["--mode", experiment.mode] if experiment.mode and not experiment.world else []
            run(["xmr", "data", "toyworld", "--out", str(folder), *source, *mode])
        return folder

    def train(self, name: str) -> None:
        """Run (or resume) the experiment's job once per seed."""
        experiment = EXPERIMENTS[name]
        data = self.world(experiment)
        for seed in self.seeds:
            run([sys.executable, str(REPO / "ray_jobs" / f"{experiment.job}.py"), *experiment.flags,
                 "--data", str(data), "--seed", str(seed),
                 RESOURCE_FLAG.get(experiment.job, "--cpus-per-worker"), str(self.cpus),
                 "--storage", str(self.workdir / "jobs"), "--name", f"{name}-seed{seed}",
                 "--tracking-uri", self.uri])  # fmt: skip

    def run_id(self, name: str, seed: int, run: str) -> str:
        """The MLflow run of a finished job's ``run``: a step's (``steps/<step>.json``), or for
        ``<step>=<value>`` the sweep trial whose swept option had that value
        (``<step>_trials.csv`` in the job's folder).

        Raises:
            LookupError: the sweep has no finished trial with that value.
        """
        folder = self.workdir / "jobs" / f"{name}-seed{seed}"
        step, _, value = run.partition("=")
        if not value:
            return json.loads((folder / "steps" / f"{step}.json").read_text())["run_id"]
        trials = pd.read_csv(folder / f"{step}_trials.csv")
        swept = SWEEPS[step][1]  # the option the step's sweep varies
        found = trials[(trials[swept] == float(value)) & (trials["status"] == "FINISHED")]
        if found.empty:
            raise LookupError(f"{name} seed {seed}: {step} has no finished trial {swept}={value}")
        return str(found.iloc[0]["mlflow_run_id"])

    @cache  # noqa: B019 (one Reproduction per script run)
    def query_sets(self, name: str, seed: int, run: str) -> dict[str, QueryValues]:
        """The per-query values of a finished job's ``run`` (:meth:`run_id`), read once."""
        return logged_per_query(self.run_id(name, seed, run), tracking_uri=self.uri)

    def metric_set(self, name: str, seed: int, run: str, metric: str) -> QueryValues:
        """The query set of ``run`` (:meth:`run_id`) that holds ``metric``.

        Raises:
            LookupError: none does.
        """
        for query_set in self.query_sets(name, seed, run).values():
            if metric in query_set.values:
                return query_set
        raise LookupError(f"{name} seed {seed}: {run} logged no per-query {metric}")

    def paired_values(
        self, name: str, pair: tuple[str, str], metric: str
    ) -> list[tuple[QueryValues, QueryValues]]:
        """Per seed, the control's and the treatment's query set holding ``metric``.

        Raises:
            ValueError: the two scored other queries.
        """
        pairs = []
        for seed in self.seeds:
            control, treated = (self.metric_set(name, seed, run, metric) for run in pair)
            if control.keys != treated.keys:
                raise ValueError(f"{name} seed {seed}: {pair} scored other queries")
            pairs.append((control, treated))
        return pairs

    def changes(
        self, name: str, pair: tuple[str, str], metric: str
    ) -> tuple[list[Interval], Interval]:
        """Per seed, ``treatment − control`` on ``metric`` with its paired 95 % interval over
        the queries both scored (strata kept, as the job's comparison keeps them); and the
        mean change over seeds with its two-stage interval over seeds and queries."""
        pairs = self.paired_values(name, pair, metric)
        per_seed = [
            paired_intervals({metric: control.values[metric]}, {metric: treated.values[metric]},
                             strata=control.strata)[metric]
            for control, treated in pairs
        ]  # fmt: skip
        rows = [treated.values[metric] - control.values[metric] for control, treated in pairs]
        return per_seed, seeds_and_queries_interval(np.stack(rows))

    def report(self, name: str) -> str:
        """The experiment's table: per metric and comparison, each seed's paired change and
        the mean with its seeds-and-queries interval (``*``: the interval excludes 0)."""
        experiment = EXPERIMENTS[name]
        seeds = ", ".join(str(s) for s in self.seeds)
        kind = " (positive control)" if experiment.positive_control else ""
        lines = [f"### {name}{kind}", "",
                 f"`ray_jobs/{experiment.job}.py {' '.join(experiment.flags)}`, world "
                 f"{experiment.world or experiment.mode or 'default'}, seeds {seeds}.", "",
                 "| metric | change | per seed (paired, over queries) | mean [seeds, queries] |",
                 "|---|---|---|---|"]  # fmt: skip
        for pair in experiment.comparisons:
            for metric in experiment.metrics:
                try:
                    per_seed, mean = self.changes(name, pair, metric)
                except (ValueError, LookupError, FileNotFoundError) as exc:
                    lines.append(f"| {metric} | {pair[1]} − {pair[0]} | not measured: {exc} | |")
                    continue
                cells = "; ".join(change_text(c.value, c.low, c.high, mark=True) for c in per_seed)
                total = change_text(mean.value, mean.low, mean.high, mark=True)
                label = metric.removeprefix("test/")
                lines.append(f"| {label} | {pair[1]} − {pair[0]} | {cells} | {total} |")
        if experiment.levels:
            lines += ["", "| metric | run | per seed | mean |", "|---|---|---|---|"]
            runs = dict.fromkeys(run for pair in experiment.comparisons for run in pair)
            for metric in experiment.levels:
                label = metric.removeprefix("test/")
                for run in runs:
                    try:
                        values = [self.run_metrics(name, seed, run)[metric] for seed in self.seeds]
                    except (KeyError, LookupError, FileNotFoundError) as exc:
                        lines.append(f"| {label} | {run} | not measured: {exc} | |")
                        continue
                    cells = "; ".join(f"{v:.1f}" for v in values)
                    lines.append(f"| {label} | {run} | {cells} | {np.mean(values):.1f} |")
        return "\n".join(lines)

    @cache  # noqa: B019 (one Reproduction per script run)
    def run_metrics(self, name: str, seed: int, run: str) -> dict[str, float]:
        """The metrics ``run`` (:meth:`run_id`) logged, each its last value, read once."""
        import mlflow

        logged = mlflow.MlflowClient(self.uri).get_run(self.run_id(name, seed, run))
        return dict(logged.data.metrics)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("xmr-pretrained"))
    parser.add_argument("--only", nargs="+", choices=list(EXPERIMENTS), default=list(EXPERIMENTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--cpus-per-worker", type=int, default=2)
    parser.add_argument("--report-only", action="store_true", help="no training: the tables")
    parser.add_argument("--list", action="store_true", help="the experiments, then stop")
    args = parser.parse_args(argv)
    if args.list:
        for name, experiment in EXPERIMENTS.items():
            control = " (positive control)" if experiment.positive_control else ""
            world = experiment.world or experiment.mode or "default"
            flags = " ".join(experiment.flags)
            print(f"{name}: ray_jobs/{experiment.job}.py {flags} on world {world}{control}")
        return
    reproduction = Reproduction(args.workdir, args.seeds, args.cpus_per_worker)
    for name in args.only:
        if not args.report_only:
            reproduction.train(name)
        print("\n" + reproduction.report(name), flush=True)


if __name__ == "__main__":
    main()
