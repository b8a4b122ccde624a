"""Reproduce BiAug's claim on ToyWorld: D′ raises attribute binding, and hard negatives help.

The world is the packaged binding world (``xmr data toyworld --config binding``): in train, cars
are red, umbrellas yellow and cups white with p = 0.9, and captions name a colour with
p = 0.1 (the reporting bias of the BiAug paper); its binding test asks which colour goes with
which object. BiAug-D′ is built with perfect components: the ``oracle`` LLM (the scene's ground
truth), the annotation boxes as verification and the world's renderer as the inpainter, two
captions per image as source examples (so D′ holds more than the r·|D| pairs sampled; an
example with nothing to recolour, persons only or too small, ends in ``errors.parquet``). For each
seed, ``xmr-tiny`` CLIP is trained from scratch in four conditions of equal step counts:

- D ∪ BiAug-D′: E epochs (``--epochs``) on D and an r·|D| sample of D′ (r = ``--synth-ratio``),
  each positive beside its hard negative; its optimiser steps, read back from MLflow, are the
  budget N of the three others (``xmr train --steps N``);
- D, step-matched: N steps on D;
- D ∪ BiAug-D′ without hard negatives (``--no-hard-negatives``: the pairs shuffled freely), N
  steps;
- BiAug-D′ without D (``--synth-only``): N steps on the same D′ sample.

The seed runs of a condition are nested in MLflow under a parent run (``xmr train --seeds``;
one per step count, when seeds' N differ). Every run is a plain command line (printed before
it runs); the binding and recall metrics are read back from MLflow (``final/test/...``;
``xmr train`` scores the binding test at the end) and summarised as mean ± std over seeds with
the first seed's 95 % bootstrap interval, and per seed as the binding gain of D ∪ BiAug-D′
over the step-matched D and over no hard negatives, with its paired interval over the items.
SugarCrepe and ARO run on fixtures in their published layouts made from the binding items
(``swap_att`` / VG-Attribution from the swap items, ``replace_att`` from the counter items):
they check the plumbing, and agree with the binding test by construction.

    python bench/reproduce_biaug.py --seeds 0 1 2 --epochs 2 --synth-ratio 0.5 --workdir xmr-biaug

Reruns resume: the world, D′ and finished runs are reused (same names).
"""

from __future__ import annotations

import argparse
import json
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

BINDING = ["binding/swap_acc", "binding/counter_acc", "binding/stereotype_acc"]
RECALL = [f"recall_{d}_at_{k}" for d in ("i2t", "t2i") for k in (1, 10)]
FIXTURES = ["sugarcrepe/swap_att_acc", "sugarcrepe/replace_att_acc", "aro/vg_attribution_acc"]
MIXED, NO_HARD, MATCHED, ONLY = (
    "D ∪ BiAug-D′", "D ∪ BiAug-D′, no hard negatives", "D (step-matched)", "BiAug-D′ without D"
)  # fmt: skip


def write_fixtures(world: Path, out: Path) -> tuple[Path, Path]:
    """SugarCrepe (``swap_att``, ``replace_att``) and ARO VG-Attribution files made from the
    world's binding items, images linked from the world. Returns the two folders."""
    items = json.loads((world / "binding" / "items.json").read_text())
    sugarcrepe, aro = out / "sugarcrepe", out / "aro"
    sugarcrepe.mkdir(parents=True, exist_ok=True)
    aro.mkdir(parents=True, exist_ok=True)
    swaps = [i for i in items if i["kind"] == "swap"]
    counters = [i for i in items if i["kind"] == "counter"]
    swap_att = {
        str(n): {"filename": i["image"], "caption": i["caption"],
                 "negative_caption": i["negative_caption"]}
        for n, i in enumerate(swaps)
    }  # fmt: skip
    replace_att = {
        str(n): {"filename": i["images"]["counter"], "caption": i["captions"]["counter"],
                 "negative_caption": i["captions"]["stereotype"]}
        for n, i in enumerate(counters)
    }  # fmt: skip
    (sugarcrepe / "swap_att.json").write_text(json.dumps(swap_att))
    (sugarcrepe / "replace_att.json").write_text(json.dumps(replace_att))
    size = json.loads((world / "world.json").read_text())["config"]["image_size"]
    attribution = [
        {"image_path": Path(i["image"]).name, "bbox_x": 0, "bbox_y": 0, "bbox_w": size,
         "bbox_h": size, "true_caption": i["caption"], "false_caption": i["negative_caption"],
         "attributes": [i["objects"][0][1], i["objects"][1][1]]}
        for i in swaps
    ]  # fmt: skip
    (aro / "visual_genome_attribution.json").write_text(json.dumps(attribution))
    if not (aro / "images").exists():
        (aro / "images").symlink_to(world / "binding", target_is_directory=True)
    return sugarcrepe, aro


def fixture_metrics(checkpoint: Path, sugarcrepe: Path, images: Path, aro: Path) -> dict:
    """The trained model on the fixtures, in this process (the scoring of ``xmr eval
    --benchmark``, without Ray)."""
    from xmr.eval.benchmark import run_benchmark
    from xmr.eval.config import eval_config
    from xmr.eval.encode import local_encoder
    from xmr.models import create_model
    from xmr.models.base import ModelSpec

    model = create_model(ModelSpec.from_checkpoint(checkpoint))
    encoder = local_encoder(model)
    metrics = run_benchmark(
        eval_config(data=sugarcrepe), "sugarcrepe", images=images, encoder=encoder
    ).metrics
    metrics |= run_benchmark(
        eval_config(data=aro), "aro", subset="vg-attribution", encoder=encoder
    ).metrics
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=2, help="E: epochs of the D ∪ D′ runs")
    parser.add_argument("--synth-ratio", type=float, default=0.5, help="r = |D′ sample| / |D|")
    parser.add_argument("--workdir", type=Path, default=Path("xmr-biaug"))
    parser.add_argument("--cpus-per-worker", type=int, default=2)
    args = parser.parse_args()

    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    xmr = [sys.executable, "-m", "xmr.cli"]
    world, dprime = workdir / "world", workdir / "dprime"
    if not (world / "world.json").is_file():
        run([*xmr, "data", "toyworld", "--config", "binding", "--out", str(world)])
    run([*xmr, "synth", "--mode", "biaug", "--llm", "oracle", "--boxes", "gt", "--fill",
         "render", "--captions-per-image", "2", "--data", str(world), "--out", str(dprime),
         "--max-error-rate", "0.5", "--tracking-uri", uri, "--no-progress"])  # fmt: skip
    sugarcrepe, aro = write_fixtures(world, workdir / "fixtures")
    common = ["--data", str(world), "--cpus-per-worker", str(args.cpus_per_worker),
              "--storage", str(workdir / "runs"), "--tracking-uri", uri]  # fmt: skip
    mixed = ["--synth", str(dprime), "--synth-ratio", str(args.synth_ratio)]
    # Parent run biaug-dd; seed N's run biaug-dd-seedN.
    run([*xmr, "train", *common, *mixed, "--epochs", str(args.epochs), "--seeds",
         seeds_flag(args.seeds), "--name", "biaug-dd"])  # fmt: skip
    steps = {seed: total_steps(uri, f"biaug-dd-seed{seed}") for seed in args.seeds}
    controls = {
        MATCHED: ("d", []),
        NO_HARD: ("dd-nohn", [*mixed, "--no-hard-negatives"]),
        ONLY: ("donly", [*mixed, "--synth-only"]),
    }
    for count, group in by_steps(steps):  # one parent per step count (all seeds, usually)
        for tag, extra in controls.values():
            run([*xmr, "train", *common, *extra, "--steps", str(count), "--seeds",
                 seeds_flag(group), "--name", f"biaug-{tag}-steps{count}"])  # fmt: skip
    rows: dict[str, list[dict[str, float]]] = {}
    names: dict[str, dict[int, str]] = {}
    for condition in (MATCHED, MIXED, NO_HARD, ONLY):  # the tables' order
        for seed in args.seeds:
            name = (
                f"biaug-dd-seed{seed}"
                if condition == MIXED
                else f"biaug-{controls[condition][0]}-steps{steps[seed]}-seed{seed}"
            )
            names.setdefault(condition, {})[seed] = name
            metrics = {k.removeprefix("test/"): v for k, v in final_metrics(uri, name).items()}
            checkpoint = workdir / "runs" / name / "last.pt"
            metrics |= fixture_metrics(checkpoint, sugarcrepe, world, aro)
            rows.setdefault(condition, []).append(metrics)
    print(summarise(rows, BINDING + RECALL, args.seeds))
    print()
    print(paired_gains(uri, (MIXED, names[MIXED]), {c: names[c] for c in (MATCHED, NO_HARD)},
                       [f"test/{m}" for m in BINDING[:2]]))  # fmt: skip
    print()
    print(summarise(rows, FIXTURES, args.seeds))


if __name__ == "__main__":
    main()
