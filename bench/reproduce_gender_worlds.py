"""The planted gender bias under several ToyWorld configs: does a model trained on D pick up each
linked class's gender, does Bias@K on the world's gender split measure it with a confidence
interval that excludes 0, and does FairSample α = 1 (gender paper §3.1) reduce it?

For each config below (the default's rules, then other classes, genders, strengths and world
seeds) the script generates the world, trains a tiny model from scratch (``--model clip``:
``xmr-tiny`` CLIP, FairSample's softmax form; ``vsepp``: the triplet loss of eq. 6) on D and
with ``--fair-alpha 1``, once per training seed (``xmr train --seeds``), and reads back each
linked class's Bias@10 with its 95 % bootstrap interval (over the gender split's queries that
mention the class) and FairSample's paired change (``xmr compare``'s paired bootstrap over the
same queries). Every step is a plain command line, printed before it runs; reruns reuse
finished worlds and runs.

    python bench/reproduce_gender_worlds.py --epochs 3 --seeds 0 1 2 --workdir xmr-gender
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml
from training_runs import final_metrics, run, seeds_flag  # bench/training_runs.py

from xmr.compare.paired import paired_comparison
from xmr.compare.per_query import logged_per_query
from xmr.compare.runs import find_run
from xmr.compare.verdict import change_text
from xmr.eval.score import class_suffix
from xmr.metrics import TRAINED_DELTA_SD, detectable_effect
from xmr.toyworld import WorldConfig, load_config

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
    "mostly-men": {"seed": 4, "gender_bias": [], "female_share": 0.25},
}
"""World YAMLs (over ``default.yaml``): 2-3 linked classes each, women's and men's, p 0.75-0.9;
``mostly-men`` links no class but makes 3 of 4 persons men (FairSample's premise: a batch's
negatives slant towards the majority gender), read on all the gender split's captions."""

K = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--model", choices=["clip", "vsepp"], default="clip",
                        help="clip: FairSample as softmax; vsepp: eq. 6 as written")  # fmt: skip
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="Training seeds.")
    parser.add_argument("--workdir", type=Path, default=Path("xmr-gender"))
    parser.add_argument("--cpus-per-worker", type=int, default=2)
    args = parser.parse_args()

    workdir = args.workdir.resolve()
    (workdir / "worlds").mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    xmr = [sys.executable, "-m", "xmr.cli"]
    common = ["--model", args.model, "--epochs", str(args.epochs), "--cpus-per-worker",
              str(args.cpus_per_worker), "--seeds", seeds_flag(args.seeds), "--storage",
              str(workdir / "runs"), "--tracking-uri", uri]  # fmt: skip
    rows = []
    for name in args.configs:
        config_file = workdir / "worlds" / f"{name}.yaml"
        config_file.write_text(yaml.safe_dump(CONFIGS[name], sort_keys=False))
        world = workdir / "worlds" / name
        if not (world / "world.json").is_file():
            run([*xmr, "data", "toyworld", "--config", str(config_file), "--out", str(world)])
        prefix = f"gender-{name}" if args.model == "clip" else f"gender-{name}-{args.model}"
        for tag, extra in (("d", []), ("fair1", ["--fair-alpha", "1"])):
            run([*xmr, "train", *common, *extra, "--data", str(world), "--name", f"{prefix}-{tag}"])
        per_seed = []
        for seed in args.seeds:
            d_run, fair_run = (f"{prefix}-{tag}-seed{seed}" for tag in ("d", "fair1"))
            paired = paired_comparison(d_run, fair_run, tracking_uri=uri).frame.set_index("metric")
            queries = logged_per_query(find_run(d_run, tracking_uri=uri).run_id, tracking_uri=uri)
            per_seed.append((final_metrics(uri, d_run), final_metrics(uri, fair_run), paired,
                             queries))  # fmt: skip
        for label, gender, p, suffix in _planted(load_config(config_file)):
            metric = f"test/bias_at_{K}" + (f"_{suffix}" if suffix else "")
            first_queries = per_seed[0][3][f"bias_{suffix}" if suffix else "bias"]
            spread = first_queries.values[metric].std(ddof=1)
            rows.append(
                (name, f"{label} ({gender} {p:g})",
                 f"{len(first_queries.keys)} / {spread:.2f}",
                 "; ".join(_cell(d, metric) for d, *_ in per_seed),
                 "; ".join(_cell(fair, metric) for _, fair, *_ in per_seed),
                 "; ".join(_change(paired.loc[metric]) for *_, paired, _ in per_seed),
                 _verdict(gender, metric, per_seed))
            )  # fmt: skip
    seeds = ", ".join(str(seed) for seed in args.seeds)
    print(f"{args.model}, {args.epochs} epochs, training seeds {seeds} "
          "(one value per seed in each cell)")  # fmt: skip
    print(f"| world | linked class (planted) | queries / sd of Δ (D) | Bias@{K} D [95 % CI] | "
          f"Bias@{K} FairSample α=1 | FairSample − D (paired) | verdict |")  # fmt: skip
    print("|---|---|---:|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(
        f"\nPower: 400 queries of a class (100 images) detect a per-class Bias@{K} of "
        f"{detectable_effect(400, TRAINED_DELTA_SD):.3f} at 95 % with power 0.8, "
        f"{detectable_effect(100, TRAINED_DELTA_SD):.3f} counting images "
        f"(sd {TRAINED_DELTA_SD}, xmr/metrics/power.py)."
    )


def _planted(config: WorldConfig) -> list[tuple[str, str, float, str]]:
    """What ``config`` plants, as ``(label, gender, p, class suffix)``: each linked class, read on
    the captions that name it, and an imbalance (``female_share`` ≠ 0.5), read on every caption
    of the gender split (suffix ``""``)."""
    planted = [
        (rule.with_class, rule.gender, rule.p, class_suffix(rule.with_class))
        for rule in config.gender_bias
    ]
    if config.female_share != 0.5:
        majority = "male" if config.female_share < 0.5 else "female"
        share = max(config.female_share, 1 - config.female_share)
        planted.append(("all captions", majority, share, ""))
    return planted


def _cell(metrics: dict[str, float], name: str) -> str:
    """``value [low, high]`` of one metric (its bootstrap interval)."""
    low, high = metrics.get(f"{name}_ci_low"), metrics.get(f"{name}_ci_high")
    interval = f" [{low:+.3f}, {high:+.3f}]" if low is not None and high is not None else ""
    return f"{metrics[name]:+.3f}{interval}"


def _change(change) -> str:
    """A paired difference with its interval, ``*`` when the interval excludes 0."""
    return change_text(change["difference"], change["ci_low"], change["ci_high"], mark=True)


def _verdict(gender: str, metric: str, per_seed: list) -> str:
    """In how many seeds D shows the planted direction (interval on the planted side of 0) and
    FairSample brings it significantly nearer 0."""
    sign = 1 if gender == "male" else -1
    shown = reduced = 0
    for d, fair, paired, _ in per_seed:
        low, high = d[f"{metric}_ci_low"], d[f"{metric}_ci_high"]
        shown += (low > 0) if sign > 0 else (high < 0)
        reduced += bool(paired.loc[metric, "significant"]) and abs(fair[metric]) < abs(d[metric])
    n = len(per_seed)
    return f"direction {shown}/{n}, reduced {reduced}/{n}"


if __name__ == "__main__":
    main()
