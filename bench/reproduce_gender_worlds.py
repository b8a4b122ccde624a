"""The planted gender bias under several ToyWorld configs: a model trained on D picks up each
linked class's gender, Bias@K on the world's gender split measures it with a confidence interval
that excludes 0, and FairSample α = 1 (gender paper §5.3) reduces it.

For each config below (the default's rules, then other classes, genders, strengths and world
seeds) the script generates the world, trains ``xmr-tiny`` CLIP from scratch on D and with
``--fair-alpha 1``, and reads back each linked class's Bias@10 with its 95 % bootstrap interval
(over the gender split's queries that mention the class) and FairSample's paired change
(``xmr compare``'s paired bootstrap over the same queries). Every step is a plain command line,
printed before it runs; reruns reuse finished worlds and runs.

    python bench/reproduce_gender_worlds.py --epochs 3 --workdir xmr-gender
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml
from training_runs import final_metrics, run  # bench/training_runs.py

from xmr.compare import paired_comparison, resolve_run, run_per_query
from xmr.data.toyworld import load_config
from xmr.eval.score import class_suffix
from xmr.metrics import TRAINED_DELTA_SD, detectable_effect

CONFIGS: dict[str, dict] = {
    "default": {},
    "umbrella-horse": {
        "seed": 1,
        "gender_bias": [
            {"with": "umbrella", "gender": "female", "p": 0.9},
            {"with": "horse", "gender": "male", "p": 0.9},
        ],
    },
    "dog-ball": {
        "seed": 2,
        "gender_bias": [
            {"with": "dog", "gender": "male", "p": 0.8},
            {"with": "sports ball", "gender": "female", "p": 0.8},
        ],
    },
    "car-bench-frisbee": {
        "seed": 3,
        "splits": {"train": 4000, "val": 500, "test": 500, "gender_test": 300},
        "gender_bias": [
            {"with": "car", "gender": "female", "p": 0.75},
            {"with": "bench", "gender": "male", "p": 0.75},
            {"with": "frisbee", "gender": "female", "p": 0.9},
        ],
    },
}
"""World YAMLs (over ``default.yaml``): 2-3 linked classes each, women's and men's, p 0.75-0.9."""

K = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="Training seed.")
    parser.add_argument("--workdir", type=Path, default=Path("xmr-gender"))
    parser.add_argument("--cpus-per-worker", type=int, default=2)
    args = parser.parse_args()

    workdir = args.workdir.resolve()
    (workdir / "worlds").mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    xmr = [sys.executable, "-m", "xmr.cli"]
    common = ["--epochs", str(args.epochs), "--cpus-per-worker", str(args.cpus_per_worker),
              "--seed", str(args.seed), "--storage", str(workdir / "runs"),
              "--tracking-uri", uri]  # fmt: skip
    rows = []
    for name in args.configs:
        config_file = workdir / "worlds" / f"{name}.yaml"
        config_file.write_text(yaml.safe_dump(CONFIGS[name], sort_keys=False))
        world = workdir / "worlds" / name
        if not (world / "world.json").is_file():
            run([*xmr, "data", "toyworld", "--config", str(config_file), "--out", str(world)])
        runs = {}
        for condition, extra in (("D", []), ("FairSample α=1", ["--fair-alpha", "1"])):
            run_name = f"gender-{name}-{'fair1' if extra else 'd'}-seed{args.seed}"
            run([*xmr, "train", *common, *extra, "--data", str(world), "--name", run_name])
            runs[condition] = run_name
        d, fair = (final_metrics(uri, runs[c]) for c in ("D", "FairSample α=1"))
        paired = paired_comparison(runs["D"], runs["FairSample α=1"], tracking_uri=uri).frame
        paired = paired.set_index("metric")
        queries = run_per_query(resolve_run(runs["D"], tracking_uri=uri)[0], tracking_uri=uri)
        for rule in load_config(config_file).gender_bias:
            suffix = class_suffix(rule.with_class)
            metric = f"test/bias_at_{K}_{suffix}"
            change = paired.loc[metric]
            per_class = queries[f"bias_{suffix}"]
            rows.append(
                (name, rule, _cell(d, metric), _cell(fair, metric),
                 f"{change['difference']:+.3f} [{change['ci_low']:+.3f}, {change['ci_high']:+.3f}]",
                 _verdict(rule.gender, d, fair, metric, change),
                 f"{len(per_class.keys)} / {per_class.values[metric].std(ddof=1):.2f}")
            )  # fmt: skip
    print(f"| world | linked class (planted) | queries / sd of Δ (D) | Bias@{K} D [95 % CI] | "
          f"Bias@{K} FairSample α=1 | FairSample − D (paired) | verdict |")  # fmt: skip
    print("|---|---|---:|---|---|---|---|")
    for name, rule, d_cell, fair_cell, change, verdict, queries in rows:
        planted = f"{rule.with_class} ({rule.gender} {rule.p:g})"
        print(f"| {name} | {planted} | {queries} | {d_cell} | {fair_cell} | {change} | {verdict} |")
    print(
        f"\nPower: 400 queries of a class (100 images) detect a per-class Bias@{K} of "
        f"{detectable_effect(400, TRAINED_DELTA_SD):.3f} at 95 % with power 0.8, "
        f"{detectable_effect(100, TRAINED_DELTA_SD):.3f} counting images "
        f"(sd {TRAINED_DELTA_SD}, xmr/metrics/power.py)."
    )


def _cell(metrics: dict[str, float], name: str) -> str:
    """``value [low, high]`` of one metric (its bootstrap interval)."""
    low, high = metrics.get(f"{name}_ci_low"), metrics.get(f"{name}_ci_high")
    interval = f" [{low:+.3f}, {high:+.3f}]" if low is not None and high is not None else ""
    return f"{metrics[name]:+.3f}{interval}"


def _verdict(gender: str, d: dict[str, float], fair: dict[str, float], metric: str, change) -> str:
    """Whether D shows the planted direction (CI on the planted side of 0) and FairSample
    brings it significantly nearer 0."""
    sign = 1 if gender == "male" else -1
    low, high = d[f"{metric}_ci_low"], d[f"{metric}_ci_high"]
    shown = (low > 0) if sign > 0 else (high < 0)
    reduced = change["significant"] and abs(fair[metric]) < abs(d[metric])
    return f"{'direction ✓' if shown else 'direction ✗'}, {'reduced ✓' if reduced else 'reduced ✗'}"


if __name__ == "__main__":
    main()
