"""What FairSample does (gender paper §3.1, eq. 6): its fixed point's predictions, measured.

The experiments behind docs/results/fairsample.md, each measured against its control (the same
model trained with α = 0, paired over the same queries).

With negatives drawn from a distribution q, InfoNCE's optimal critic is log p(v|c) / q(v).
Plain in-batch training draws q = p(v); FairSample draws a gender-neutral caption's negatives
half from the batch's men and half from its women, which adds log(π_m / π_f) to every male
image's score against a female one's (π: the genders' shares of the training images). So it
raises the majority's exposure and changes nothing when men and women are equally common.

Items (``--items``):

- ``rescore`` (issue 34, item 2): α = 0, 0.4, 1 on the default world (3 training seeds).
  Bias@10, ``gendered_share@10`` and ``male_share@10`` on the test split (natural: most
  images show no person) and on the gender split (every image shows men or women): does
  Bias@K fall through dilution while the male share rises?
- ``hardest`` (item 3): the paper's regime, VSE++'s hinge on the hardest negative after a
  summed warm-up (``--max-violation-after``), the ``mostly-men`` and default worlds, α = 0, 0.4,
  1. Predicted: the male skew rises with α.
- ``shares`` (item 4): worlds with ``female_share`` 0.25, 0.5 and 0.75 and no linked class,
  α = 0 and 1: the measured shift of the male share's log-odds against the predicted
  log(π_m / π_f), in one plot (``--plot``).
- ``balanced`` (item 5): the default world is balanced, yet α = 1 moves it towards men. The
  diagnostic variant ``--fair-captions gendered-images`` (FairSample only on the neutral
  captions of images with men or women; person-less scenes keep their neutral negatives),
  the share of person-less images among neutral captions' positives, and how each model's
  text tower places "a person" between "a man" and "a woman".

Every training is a plain ``xmr train`` command line, printed before it runs; reruns reuse
finished worlds, runs and scores, so the script can be stopped and started again.
``--available`` trains nothing and reports on what has finished. Each trained model is
scored in this process, without Ray (what ``xmr eval --checkpoint RUN/last.pt --split test
--metrics recall,bias --bias-split test`` and ``--bias-split gender_test`` print), and the
per-query values are kept under ``WORKDIR/scores`` for the paired intervals.

    python bench/reproduce_fairsample.py --workdir xmr-gender
    python bench/reproduce_fairsample.py --workdir xmr-gender --items shares --seeds 0 --available
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import yaml
from training_runs import run  # bench/training_runs.py

from xmr.compare.bootstrap import bootstrap_means
from xmr.compare.paired import paired_differences
from xmr.compare.per_query import QueryValues, read_per_query, select_metrics, write_per_query
from xmr.compare.verdict import change_text
from xmr.data.images import load_image
from xmr.data.registry import read_dataset
from xmr.eval.config import EvalConfig
from xmr.eval.encode import local_encoder
from xmr.eval.protocol import record_gender
from xmr.eval.score import evaluate
from xmr.metrics import weight_metric
from xmr.models import ModelSpec, RetrievalModel, create_model
from xmr.train.data import original_pairs
from xmr.train.result import FINAL_METRICS_KEY, RUN_FILE

WORLDS: dict[str, dict] = {
    "default": {},
    "mostly-men": {"seed": 4, "gender_bias": [], "female_share": 0.25},
    "balanced": {"seed": 4, "gender_bias": [], "female_share": 0.5},
    "mostly-women": {"seed": 4, "gender_bias": [], "female_share": 0.75},
}
"""World YAMLs over ``default.yaml``: the default world (cup → woman 0.8, bicycle → man 0.8,
otherwise a person is a woman w.p. ½) and three worlds that differ only in ``female_share``."""


@dataclass(frozen=True)
class Condition:
    """One trained model: its world, a tag naming the condition and its ``xmr train`` flags."""

    world: str
    tag: str
    alpha: float
    flags: tuple[str, ...] = ()
    family: str = "clip"

    def name(self, seed: int) -> str:
        return f"gender-{self.world}-{self.tag}-seed{seed}"


VSEPP = ("--model", "vsepp", "--max-violation-after")  # + the warm-up epochs
SCOPED = ("--fair-captions", "gendered-images")


def conditions(item: str, vsepp_warm_up: int) -> list[Condition]:
    """The models item ``item`` compares, its control (α = 0) first in each world."""
    alphas = {"d": 0.0, "fair0.4": 0.4, "fair1": 1.0}
    if item == "rescore":
        return [Condition("default", tag, a) for tag, a in alphas.items()]
    if item == "shares":
        return [Condition(w, tag, alphas[tag]) for w in ("mostly-men", "balanced", "mostly-women")
                for tag in ("d", "fair1")]  # fmt: skip
    if item == "balanced":
        return [Condition("default", "d", 0.0), Condition("default", "fair1", 1.0),
                Condition("default", "fair1-gendered", 1.0, SCOPED)]  # fmt: skip
    if item == "hardest":
        flags = (*VSEPP, str(vsepp_warm_up))
        return [Condition(w, f"vsepp-hard-{tag}", a, flags, "vsepp")
                for w in ("mostly-men", "default") for tag, a in alphas.items()]  # fmt: skip
    raise ValueError(item)


ITEMS = ("rescore", "shares", "balanced", "hardest")
SEEDS = {"rescore": (0, 1, 2), "shares": (0, 1), "balanced": (0, 1), "hardest": (0, 1)}
K = 10
SPLITS = {"natural": "test", "gender": "gender_test"}
"""The two rankings a model is scored on: ``natural``, the test split's own images (most
without a person); ``gender``, the gender split (every image shows men or women)."""


@dataclass
class Scores:
    """A model's scores on one ranking: metric -> value, and the per-query values by query set."""

    metrics: dict[str, float]
    sets: dict[str, QueryValues] = field(default_factory=dict)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", nargs="+", choices=ITEMS, default=list(ITEMS),
                        help="The experiments to run (default: all, in this order).")  # fmt: skip
    parser.add_argument("--seeds", type=int, nargs="+", help="Training seeds (default: per item).")
    parser.add_argument("--workdir", type=Path, default=Path("xmr-gender"))
    parser.add_argument("--epochs", type=int, default=3, help="CLIP's epochs.")
    parser.add_argument("--vsepp-epochs", type=int, default=8)
    parser.add_argument("--warm-up", type=int, default=4, help="VSE++'s summed epochs.")
    parser.add_argument("--cpus-per-worker", type=int, default=2)
    parser.add_argument("--available", action="store_true", help="Train nothing; report.")
    parser.add_argument("--plot", type=Path, help="Item shares' plot (default: WORKDIR/...).")
    args = parser.parse_args()

    workdir = args.workdir.resolve()
    seeds = {item: tuple(args.seeds) if args.seeds else SEEDS[item] for item in args.items}
    plan: dict[str, list[Condition]] = {i: conditions(i, args.warm_up) for i in args.items}
    if not args.available:
        train_all(workdir, plan, seeds, args)
    report = Report(workdir)
    for item in args.items:
        print(f"\n## {item}\n", flush=True)
        if item == "rescore":
            report.rescore(plan[item], seeds[item])
        elif item == "hardest":
            report.hardest(plan[item], seeds[item])
        elif item == "shares":
            report.shares(plan[item], seeds[item], args.plot or workdir / "fairsample_shares.png")
        else:
            report.balanced(plan[item], seeds[item])


def train_all(workdir: Path, plan: dict[str, list[Condition]], seeds: dict, args) -> None:
    """Every model of ``plan``, seed by seed (all items' first seed, then the second...), so
    that a stopped run has something of every item; a model already trained is skipped."""
    (workdir / "worlds").mkdir(parents=True, exist_ok=True)
    xmr = [sys.executable, "-m", "xmr.cli"]
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    for seed in sorted({s for values in seeds.values() for s in values}):
        done: set[str] = set()
        for item, todo in plan.items():
            if seed not in seeds[item]:
                continue
            for condition in todo:
                name = condition.name(seed)
                if name in done or finished(workdir / "runs" / name):
                    continue
                done.add(name)
                world = ensure_world(workdir, condition.world, xmr)
                epochs = args.vsepp_epochs if condition.family == "vsepp" else args.epochs
                alpha = ["--fair-alpha", f"{condition.alpha:g}"] if condition.alpha else []
                run([*xmr, "train", "--epochs", str(epochs), "--seed", str(seed),
                     "--cpus-per-worker", str(args.cpus_per_worker), *alpha, *condition.flags,
                     "--data", str(world), "--storage", str(workdir / "runs"),
                     "--tracking-uri", uri, "--name", name])  # fmt: skip


def finished(run_dir: Path) -> bool:
    """Whether the run in ``run_dir`` finished training (its record holds final metrics; a
    stopped one is resumed by training it again)."""
    record = run_dir / RUN_FILE
    return record.is_file() and FINAL_METRICS_KEY in json.loads(record.read_text())


def ensure_world(workdir: Path, name: str, xmr: list[str]) -> Path:
    """The world ``name`` under ``workdir/worlds``, generated from :data:`WORLDS` if absent."""
    config = workdir / "worlds" / f"{name}.yaml"
    world = workdir / "worlds" / name
    if not (world / "world.json").is_file():
        config.write_text(yaml.safe_dump(WORLDS[name], sort_keys=False) if WORLDS[name] else "{}\n")
        run([*xmr, "data", "toyworld", "--config", str(config), "--out", str(world)])
    return world


class Report:
    """The items' tables, from the trained models' scores (computed once, then read back)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._scores: dict[tuple[str, str], Scores] = {}  # (run, ranking) -> read once
        self._models: dict[str, RetrievalModel] = {}  # run -> loaded once

    # --- scores -------------------------------------------------------------------------

    def scores(self, condition: Condition, seed: int, ranking: str) -> Scores | None:
        """The model's :class:`Scores` on ``ranking`` (:data:`SPLITS`), None when it is not
        trained yet."""
        name = condition.name(seed)
        checkpoint = self.workdir / "runs" / name / "last.pt"
        if not finished(self.workdir / "runs" / name):
            return None
        if (name, ranking) in self._scores:
            return self._scores[name, ranking]
        folder = self.workdir / "scores"
        scores, values = (folder / f"{name}-{ranking}.{ext}" for ext in ("json", "parquet"))
        if not scores.is_file():
            folder.mkdir(exist_ok=True)
            print(f"scoring {name} on the {ranking} ranking", flush=True)
            model = self.model(condition, seed)
            spec = ModelSpec.from_checkpoint(checkpoint)
            metrics = ("recall", "bias") if ranking == "natural" else ("bias",)
            config = EvalConfig(model=spec, dataset="toyworld", split="test", metrics=metrics,
                                data=self.workdir / "worlds" / condition.world,
                                bias_split=SPLITS[ranking])  # fmt: skip
            result = evaluate(config, local_encoder(model), model=model)
            write_per_query(result.per_query, values)
            scores.write_text(json.dumps(result.metrics, indent=1) + "\n")
        found = Scores(json.loads(scores.read_text()), read_per_query(values))
        self._scores[name, ranking] = found
        return found

    def model(self, condition: Condition, seed: int) -> RetrievalModel | None:
        """The trained model of ``condition`` and ``seed`` (loaded once), None when it has not
        finished."""
        name = condition.name(seed)
        if name not in self._models:
            run_dir = self.workdir / "runs" / name
            if not finished(run_dir):
                return None
            self._models[name] = create_model(ModelSpec.from_checkpoint(run_dir / "last.pt"))
        return self._models[name]

    def trained(self, plan: list[Condition], seeds: Sequence[int]) -> list[int]:
        """The seeds of ``seeds`` for which every model of ``plan`` has finished training (a
        table's means and relative changes are over the same seeds in every row)."""
        return [s for s in seeds if all(finished(self.workdir / "runs" / c.name(s)) for c in plan)]

    def pairs(
        self, control: Condition, treated: Condition, seeds: Sequence[int], ranking: str
    ) -> list[tuple[Scores, Scores]]:
        """``(control, treated)`` scores of each seed both are trained for."""
        out = []
        for seed in seeds:
            a, b = (self.scores(c, seed, ranking) for c in (control, treated))
            if a is not None and b is not None:
                out.append((a, b))
        return out

    # --- the items ----------------------------------------------------------------------

    def rescore(self, plan: list[Condition], seeds: Sequence[int]) -> None:
        control = plan[0]
        names = [f"test/{m}_at_{K}" for m in ("bias", "gendered_share", "male_share")]
        seeds = self.trained(plan, seeds)
        print(f"CLIP (xmr-tiny, 3 epochs), default world; training seeds {_list(seeds)}. Values: "
              "the mean over the seeds; changes: one per seed, paired over the same queries, "
              "95 % interval (* excludes 0).\n")  # fmt: skip
        print(f"| α | ranking | Bias@{K} | gendered share@{K} | male share@{K} | "
              f"Δ Bias@{K} | Δ gendered share | Δ male share |")  # fmt: skip
        print("|---|---|---:|---:|---:|---|---|---|")
        for condition in plan:
            for ranking in SPLITS:
                pairs = self.pairs(control, condition, seeds, ranking)
                if not pairs:
                    continue
                means = [np.mean([b.metrics[n] for _, b in pairs]) for n in names]
                changes = (
                    ["(control)"] * 3 if condition is control
                    else [_changes(pairs, n) for n in names]
                )  # fmt: skip
                print(f"| {condition.alpha:g} | {ranking} | {means[0]:+.3f} | {means[1]:.3f} | "
                      f"{means[2]:.3f} | {' | '.join(changes)} |")  # fmt: skip

        self.by_k(plan, seeds)

    def by_k(self, plan: list[Condition], seeds: Sequence[int]) -> None:
        """Bias@K and the gendered share at K = 1, 5, 10 on the natural ranking, each α's
        relative change from α = 0 (the paper's table 2 shape: reductions that shrink with K)."""
        ks = (1, 5, 10)
        print("\nThe natural ranking at K = 1, 5, 10 (means over the seeds; in brackets the "
              "relative change from α = 0):\n")  # fmt: skip
        print("| α | " + " | ".join(f"Bias@{k}" for k in ks) + " | "
              + " | ".join(f"gendered share@{k}" for k in ks) + " |")  # fmt: skip
        print("|---|" + "---:|" * 2 * len(ks))
        base: dict[str, float] = {}
        for condition in plan:
            pairs = self.pairs(plan[0], condition, seeds, "natural")
            if not pairs:
                continue
            cells = []
            for stem in ("bias", "gendered_share"):
                for k in ks:
                    name = f"test/{stem}_at_{k}"
                    mean = float(np.mean([b.metrics[name] for _, b in pairs]))
                    base.setdefault(name, mean)
                    change = "" if condition is plan[0] else f" ({mean / base[name] - 1:+.0%})"
                    cells.append(
                        f"{mean:+.3f}{change}" if stem == "bias" else f"{mean:.3f}{change}"
                    )
            print(f"| {condition.alpha:g} | " + " | ".join(cells) + " |")

    def hardest(self, plan: list[Condition], seeds: Sequence[int]) -> None:
        bias, recall = f"test/bias_at_{K}", f"test/recall_t2i_at_{K}"
        natural = [f"test/{m}_at_{K}" for m in ("bias", "gendered_share", "male_share")]
        seeds = self.trained(plan, seeds)
        print(f"VSE++ (xmr-tiny-vgg), summed hinge then the hardest negative; training seeds "
              f"{_list(seeds)}. Levels: means over the seeds.\n")  # fmt: skip
        print(f"| world | α | R@{K} t2i | Bias@{K} (gender split) | Δ Bias@{K} vs α = 0 | "
              f"natural: Bias@{K} | natural: gendered share | natural: male share | "
              "Δ male share (natural) |")  # fmt: skip
        print("|---|---|---:|---:|---|---:|---:|---:|---|")
        for world in dict.fromkeys(c.world for c in plan):
            row = [c for c in plan if c.world == world]
            for condition in row:
                gender = self.pairs(row[0], condition, seeds, "gender")
                plain = self.pairs(row[0], condition, seeds, "natural")
                if not gender or not plain:
                    continue
                control = condition is row[0]
                levels = " | ".join(
                    f"{np.mean([b.metrics[n] for _, b in plain]):{sign}.3f}"
                    for n, sign in zip(natural, ("+", "", ""), strict=True)
                )
                print(f"| {world} | {condition.alpha:g} | "
                      f"{np.mean([b.metrics[recall] for _, b in plain]):.3f} | "
                      f"{np.mean([b.metrics[bias] for _, b in gender]):+.3f} | "
                      f"{'(control)' if control else _changes(gender, bias)} | {levels} | "
                      f"{'(control)' if control else _changes(plain, natural[2])} |")  # fmt: skip

    def shares(self, plan: list[Condition], seeds: Sequence[int], plot: Path) -> None:
        male = f"test/male_share_at_{K}"
        seeds = self.trained(plan, seeds)
        print(f"Training seeds {_list(seeds)}.")
        natural = [f"test/{m}_at_{K}" for m in ("bias", "gendered_share", "male_share")]
        print("CLIP (xmr-tiny, 3 epochs), no linked class; α = 1 against α = 0 (one value per "
              "seed). Predicted: on the gender split the male share's log-odds move by "
              "log(π_m / π_f); on the natural test split, Bias@K may also move through the "
              "gendered share.\n")  # fmt: skip
        print(f"| world (female_share) | train men / women | predicted log(π_m/π_f) | "
              f"male share@{K} α = 0 → 1 (gender split) | measured Δ log-odds [95 %] | "
              f"natural: Bias@{K} α = 0 → 1 | natural: gendered share | "
              "natural: male share |")  # fmt: skip
        print("|---|---:|---:|---|---|---|---|---|")
        points = []
        for world in dict.fromkeys(c.world for c in plan):
            control, treated = (c for c in plan if c.world == world)
            pairs = self.pairs(control, treated, seeds, "gender")
            if not pairs:
                continue
            men, women = train_genders(train_pairs(self.workdir / "worlds" / world))
            predicted = math.log(men / women)
            cells, shifts = [], []
            for a, b in pairs:
                shift = logit_shift(a.sets, b.sets, male)
                shifts.append(shift)
                cells.append(f"{a.metrics[male]:.3f} → {b.metrics[male]:.3f}")
            measured = "; ".join(change_text(*s, mark=True) for s in shifts)
            moves = [
                "; ".join(f"{a.metrics[n]:{sign}.3f} → {b.metrics[n]:{sign}.3f}" for a, b in
                          self.pairs(control, treated, seeds, "natural"))
                for n, sign in zip(natural, ("+", "", ""), strict=True)
            ]  # fmt: skip
            share = WORLDS[world]["female_share"]
            print(f"| {world} ({share:g}) | {men} / {women} | {predicted:+.3f} | "
                  f"{'; '.join(cells)} | {measured} | {' | '.join(moves)} |")  # fmt: skip
            points += [(world, predicted, *s) for s in shifts]
        if len({p[1] for p in points}) > 1:
            slope, offset = np.polyfit([p[1] for p in points], [p[2] for p in points], 1)
            print(f"\nLeast squares over the worlds and seeds: measured = {offset:+.3f} "
                  f"{slope:+.3f} · predicted (the fixed point: 0 + 1 · predicted).")  # fmt: skip
        if points:
            plot_shifts(points, plot)
            print(f"\nplot: {plot}")

    def balanced(self, plan: list[Condition], seeds: Sequence[int]) -> None:
        seeds = self.trained(plan, seeds)
        print(f"Training seeds {_list(seeds)}.")
        pairs = train_pairs(self.workdir / "worlds" / plan[0].world)
        men, women = train_genders(pairs)
        print(f"Default world (balanced: {men} men's and {women} women's training images). Of "
              f"the gender-neutral training captions, {person_less_share(pairs):.3f} describe a "
              "person-less image: FairSample takes every "
              "neutral image out of their negatives.\n")  # fmt: skip
        classes = [f"test/bias_at_{K}", f"test/bias_at_{K}_cup", f"test/bias_at_{K}_bicycle"]
        print(f"| model | Bias@{K} all / cup / bicycle (gender split) | Δ all vs D | Δ cup | "
              "Δ bicycle | text tower: cos(person, man) − cos(person, woman) | person-less "
              "captions: cos to men − to women |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        control = plan[0]
        for condition in plan:
            pairs = self.pairs(control, condition, seeds, "gender")
            if not pairs:
                continue
            levels = " / ".join(
                f"{np.mean([b.metrics[n] for _, b in pairs]):+.3f}" for n in classes
            )
            changes = (
                ["(control)"] * 3 if condition is control
                else [_changes(pairs, n) for n in classes]
            )  # fmt: skip
            leans = [self.person_lean(condition, seed) for seed in seeds]
            lean = "; ".join(f"{x:+.3f}" for x in leans if x is not None)
            scenes = [self.scene_lean(condition, seed) for seed in seeds]
            scene = "; ".join(f"{x:+.4f}" for x in scenes if x is not None)
            label = f"α = {condition.alpha:g}" + (", gendered images only" if condition.flags
                                                  else "")  # fmt: skip
            print(f"| {label} | {levels} | {' | '.join(changes)} | {lean} | {scene} |")

    def person_lean(self, condition: Condition, seed: int) -> float | None:
        """``cos(t(person), t(man)) − cos(t(person), t(woman))`` of the model's text tower
        (``t``: the text embedding of "a person", "a man", "a woman"); > 0: nearer the men."""
        model = self.model(condition, seed)
        if model is None:
            return None
        person, man, woman = model.encode_texts(["a person", "a man", "a woman"]).cpu().numpy()
        return float(person @ man - person @ woman)

    def scene_lean(self, condition: Condition, seed: int) -> float | None:
        """Where the captions of person-less test scenes sit between the sexes: the mean over
        them of their mean cosine to the gender split's male images minus to its female ones
        (> 0: nearer the men). FairSample pushes these captions away from the gendered images
        only, ½ from each sex, where plain training also pushes them from other scenes."""
        model = self.model(condition, seed)
        if model is None:
            return None
        world = self.workdir / "worlds" / condition.world
        people = read_dataset("toyworld", world, "gender_test")
        sexes = np.array([record_gender(r) for r in people])
        pixels = torch.stack([model.preprocess(load_image(r.path)) for r in people])
        images = model.encode_images(pixels).cpu().numpy()
        scenes = [
            caption
            for record in read_dataset("toyworld", world, "test")
            if not any(o.category == "person" for o in record.objects)
            for caption in record.caption_texts
        ]
        texts = np.concatenate([model.encode_texts(scenes[i : i + 512]).cpu().numpy()
                                for i in range(0, len(scenes), 512)])  # fmt: skip
        similarity = texts @ images.T  # [captions, images]
        return float(
            similarity[:, sexes == "male"].mean() - similarity[:, sexes == "female"].mean()
        )


def _list(seeds: Sequence[int]) -> str:
    return ", ".join(str(s) for s in seeds)


def _changes(pairs: list[tuple[Scores, Scores]], metric: str) -> str:
    """Each seed's paired change of ``metric`` (treated − control) with its interval."""
    cells = []
    for a, b in pairs:
        interval = paired_differences(select_metrics(a.sets, [metric]),
                                      select_metrics(b.sets, [metric]))[metric]  # fmt: skip
        cells.append(change_text(interval.value, interval.low, interval.high, mark=True))
    return "; ".join(cells)


def logit_shift(
    first: dict[str, QueryValues], second: dict[str, QueryValues], metric: str
) -> tuple[float, float, float]:
    """``logit(share of second) − logit(share of first)`` of the weighted share ``metric``, and
    its paired percentile bootstrap interval over the queries both scored."""
    (a,) = select_metrics(first, [metric]).values()
    (b,) = select_metrics(second, [metric]).values()
    weight = weight_metric(metric)
    columns = []
    for values in (a, b):
        w, x = values.values[weight], values.values[metric]
        columns += [np.where(w > 0, w * x, 0.0), w]
    table = np.stack(columns, axis=1)
    means = np.vstack([table.mean(0), bootstrap_means(table)])  # [1 + resamples, 4]
    logits = [np.log(means[:, i] / (means[:, i + 1] - means[:, i])) for i in (0, 2)]
    shift = logits[1] - logits[0]
    low, high = np.quantile(shift[1:][np.isfinite(shift[1:])], [0.025, 0.975])
    return float(shift[0]), float(low), float(high)


def train_pairs(world: Path) -> pd.DataFrame:
    """The world's training pairs (:func:`~xmr.train.data.original_pairs`) with a ``person``
    column: whether the pair's image shows any person at all."""
    records = read_dataset("toyworld", world, "train")
    persons = {r.image_id: any(o.category == "person" for o in r.objects) for r in records}
    pairs = pd.DataFrame(original_pairs(records))
    return pairs.assign(person=pairs.image_id.map(persons))


def train_genders(pairs: pd.DataFrame) -> tuple[int, int]:
    """Men's and women's images among the training pairs' images."""
    images = pairs.drop_duplicates("image_id").image_gender.value_counts()
    return int(images.get("male", 0)), int(images.get("female", 0))


def person_less_share(pairs: pd.DataFrame) -> float:
    """The share of the gender-neutral training captions whose image shows no person."""
    return float((~pairs[pairs.caption_neutral].person).mean())


def plot_shifts(points: list[tuple[str, float, float, float, float]], path: Path) -> None:
    """Measured against predicted log-odds shifts, one point per world and seed with its
    interval, the line the fixed point predicts (measured = predicted) and 0 (no change)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 5))
    ax = fig.subplots()
    span = max(1.5, *(abs(p[1]) + 0.3 for p in points))
    line = np.array([-span, span])
    ax.plot(line, line, "--", color="tab:red", label="fixed point: the score shift log(π_m / π_f)")
    ax.axhline(0.0, color="0.6", linewidth=1, label="no change")
    for world in dict.fromkeys(p[0] for p in points):
        mine = [p for p in points if p[0] == world]
        xs = np.array([p[1] for p in mine]) + np.linspace(-0.03, 0.03, len(mine))
        ys = np.array([p[2] for p in mine])
        errors = np.array([[p[2] - p[3] for p in mine], [p[4] - p[2] for p in mine]])
        ax.errorbar(xs, ys, yerr=errors, fmt="o", capsize=3, label=world)
    if len({p[1] for p in points}) > 1:  # the measured slope and the shift at balance
        slope, offset = np.polyfit([p[1] for p in points], [p[2] for p in points], 1)
        ax.plot(line, offset + slope * line, ":", color="0.3",
                label=f"least squares: {offset:+.2f} {slope:+.2f}·log(π_m / π_f)")  # fmt: skip
    ax.set_xlabel("predicted shift: log(π_m / π_f) of the training images")
    ax.set_ylabel(f"measured: Δ log-odds of male_share@{K}, α = 1 − α = 0")
    ax.set_title("FairSample's fixed point on the gender split (95 % paired intervals)",
                 fontsize=10)  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
