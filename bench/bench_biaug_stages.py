"""Benchmark: images/s and peak memory of the BiAug detector and inpainting stages, in process.

The stages of ``xmr synth --mode biaug`` run here without Ray, as ``Stage.run_local`` runs
them (``setup()`` once, then ``process(batch)`` per batch), on inputs built as the build
builds them (``source_examples`` for the planning rows, the build's ``hard_negative_groups``
for the hard-negative groups):

1. ``VerifyObjects`` (GroundingDINO + the §4.1 filters) on real COCO images (coco-mini), three
   proposals per image (the image's annotated classes, largest first, topped up with classes it
   does not show), batch sizes 1 and 8; skipped with a message when the images are absent.
2. ``InpaintPairs --fill sd``: Stable Diffusion inpainting of one annotated box per image, with
   the positive and the negative phrase (two images per group, both counted), at
   ``--sd-resolution`` 64 and 128, 2 steps, 4 groups per batch; on the COCO images (the ToyWorld's
   when COCO is absent).
3. ``InpaintPairs --fill render`` on a small generated ToyWorld: the exact-oracle baseline.

Each measurement runs in a fresh Python process with ``--threads`` torch threads (default 1:
Ray sets ``OMP_NUM_THREADS`` to an actor's CPUs, and the build's CPU stages ask for one).
After one untimed warm-up batch (first-call costs), ``--repeats`` passes over all batches are
timed; images/s is the median pass's (and the fastest's); model loading (``setup``, with the
import of transformers or diffusers) is timed apart. CPU time counts all threads of the
process. Peak RSS is that process's resident high-water mark (``VmHWM``: Python, torch, the
model, the batches; Linux), "before setup" its RSS after the imports, before the stage loads
its model.

Without ``--detector-model`` / ``--sd-model`` the tests' tiny random-weight models are built into
a temporary folder: the figures are then the stages' own overhead (image decoding, resizing,
filters, PNG encoding, the pipelines' Python), not the cost of real-size models. Where the
pretrained weights cannot be downloaded, ``bench/full_size_models.py`` builds random-weight models
with the real architectures (same cost per image, noise out).

Run from the repository root with ``xmr`` importable:

    python bench/bench_biaug_stages.py                   # tiny models, CPU, ~2-4 min on 2 cores
    python bench/bench_biaug_stages.py --detector-model IDEA-Research/grounding-dino-tiny \\
        --sd-model stabilityai/stable-diffusion-2-inpainting --sd-resolutions 512 \\
        --sd-steps 25 --device cuda                      # real-size models, where they can run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from process_stats import cpu_seconds, status_kib  # bench/process_stats.py

from xmr.biaug import ToyWorldOracle
from xmr.data.records import ImageRecord
from xmr.pipeline import Resources
from xmr.pipeline.stage import Batch, Stage, rows_to_batch
from xmr.synth.batch import ERROR_COLUMNS
from xmr.synth.biaug.method import hard_negative_groups, source_examples
from xmr.synth.biaug.stages import InpaintPairs, VerifyObjects
from xmr.synth.config import SynthConfig, load_configs
from xmr.synth.inputs import read_inputs
from xmr.text.class_words import COCO_CLASSES
from xmr.toyworld import generate
from xmr.toyworld.scene.classes import palette
from xmr.toyworld.scene.config import WorldConfig

PROPOSALS = 3
COLOURS = ("red", "blue")  # the positive and the negative phrase of a COCO group


def measure(
    stage: Stage, batches: list[Batch], images_per_row: int, repeats: int
) -> dict[str, float | int]:
    """Set ``stage`` up, run ``batches[0]`` untimed, then time ``repeats`` passes over all
    ``batches``.

    Returns the setup seconds, the images of one pass (``images_per_row`` per row), images/s of
    the median and of the fastest pass, the median pass's wall and CPU milliseconds per image,
    the failed rows of a pass, and this process's RSS before ``setup`` and resident high-water
    mark, MiB.
    """
    rss_before_setup = status_kib("VmRSS") / 1024
    start = time.perf_counter()
    stage.setup()
    setup_s = time.perf_counter() - start
    stage.process(batches[0])  # warm-up: lazy initialisation, first-call allocations
    passes = []
    for _ in range(repeats):
        rows = failed = 0
        cpu, start = cpu_seconds(), time.perf_counter()
        for batch in batches:
            out = stage.process(batch)
            rows += len(out["key"])
            failed += sum(bool(e) for e in out["error"])
        passes.append((time.perf_counter() - start, cpu_seconds() - cpu))
    seconds, cpu = sorted(passes)[len(passes) // 2]
    images = rows * images_per_row
    return {
        "images": images,
        "failed_rows": failed,
        "setup_s": setup_s,
        "repeats": repeats,
        "images_per_s": images / seconds,
        "best_images_per_s": images / min(passes)[0],
        "wall_ms_per_image": seconds / images * 1000,
        "cpu_ms_per_image": cpu / images * 1000,
        "rss_before_setup_mib": rss_before_setup,
        "peak_rss_mib": status_kib("VmHWM") / 1024,
    }


def run_case(path: Path) -> dict[str, float | int]:
    """Measure, in this process, the case saved at ``path`` (JSON: ``stage`` verify | inpaint,
    ``config`` overrides, ``rows``, ``batch_size``, ``images_per_row``, ``repeats``, ``threads``,
    ``device``, ``world``)."""
    import torch

    case = json.loads(path.read_text())
    torch.set_num_threads(case["threads"])
    options, _ = load_configs(None, case["config"])
    config, size = options.shared, case["batch_size"]
    if case["stage"] == "verify":
        stage = VerifyObjects(
            config, options.methods["biaug"], Resources(cpus=1), size, case["device"]
        )
    else:
        stage = InpaintPairs(config, Resources(cpus=1), size, case["device"], case["world"])
    return measure(stage, batches_of(case["rows"], size), case["images_per_row"], case["repeats"])


def measure_apart(case: dict, folder: Path) -> dict[str, float | int | str]:
    """Measure ``case`` (the keys :func:`run_case` reads, and ``label``) in a fresh Python
    process, so that its peak memory is its own."""
    path = folder / "case.json"
    path.write_text(json.dumps(case))
    command = [sys.executable, __file__, "--case", str(path)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{case['label']} failed:\n{done.stderr[-3000:]}")
    result = {"stage": case["label"], **json.loads(done.stdout.strip().splitlines()[-1])}
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}))
    sys.stdout.flush()
    return result


def batches_of(rows: list[dict], size: int) -> list[Batch]:
    """Column batches of ``size`` rows (the last one may be short)."""
    return [rows_to_batch(rows[i : i + size]) for i in range(0, len(rows), size)]


def proposal_rows(records: list[ImageRecord], config: SynthConfig) -> list[dict]:
    """The source examples of ``records`` with an ``objects`` column as ProposeObjects writes
    it: the image's annotated classes (largest box first), then classes it does not show."""
    rows = []
    for record, example in zip(records, source_examples(records, config), strict=True):
        shown = []
        for obj in sorted(record.objects, key=lambda o: -o.bbox[2] * o.bbox[3]):
            if obj.category not in shown:
                shown.append(obj.category)
        absent = [c for c in COCO_CLASSES if c not in shown]
        rows.append({**example, "objects": json.dumps((shown + absent)[:PROPOSALS])})
    return rows


def group_rows(
    records: list[ImageRecord], config: SynthConfig, pick: Callable[[ImageRecord], tuple | None]
) -> list[dict]:
    """Hard-negative groups as the planning pass leaves them: one per record that ``pick``
    gives ``(object name, bbox, positive phrase, negative phrase)``, through the build's
    ``hard_negative_groups`` (same columns, keys and seeds)."""
    groups = []
    for record, example in zip(records, source_examples(records, config), strict=True):
        chosen = pick(record)
        if chosen is None:
            continue
        name, bbox, positive, negative = chosen
        decoupled = {
            **example,
            "verified": json.dumps([{"name": name, "bbox": list(bbox), "score": 1.0}]),
            "attributes": json.dumps(
                [
                    {
                        "object": name,
                        "category": "color",
                        "phrase": positive,
                        "caption": f"{example['caption'].rstrip('.')} with {positive}.",
                        "negative_phrase": negative,
                        "negative_caption": f"{example['caption'].rstrip('.')} with {negative}.",
                    }
                ]
            ),
        }
        groups += hard_negative_groups(rows_to_batch([decoupled]), 0, config.seed)
    blank = {name: "" for name in ERROR_COLUMNS}
    return [{**group, **blank} for group in groups]


def coco_pick(record: ImageRecord) -> tuple | None:
    """The largest annotated box, "a red <class>" against "a blue <class>"."""
    if not record.objects:
        return None
    obj = max(record.objects, key=lambda o: o.bbox[2] * o.bbox[3])
    positive, negative = (f"a {colour} {obj.category}" for colour in COLOURS)
    return obj.category, obj.bbox, positive, negative


def toyworld_pick(world: Path) -> Callable[[ImageRecord], tuple | None]:
    """The first object whose class occurs once in the scene: its own colour (the re-render
    equals the image inside the box) against another colour of its palette."""
    oracle = ToyWorldOracle(world)

    def pick(record: ImageRecord) -> tuple | None:
        scene = oracle.scene(record.image_id)
        for obj in scene.objects:
            if sum(o.category == obj.category for o in scene.objects) == 1:
                other = next(c for c in palette(obj.category, obj.gender) if c != obj.colour)
                name = obj.category
                return name, obj.bbox(scene.size), f"a {obj.colour} {name}", f"a {other} {name}"
        return None

    return pick


def real_size_note(args: argparse.Namespace) -> str | None:
    """One line saying why real-size models are not measured in this run (None when they are)."""
    import torch

    reasons = []
    if args.detector_model is None or args.sd_model is None:
        reasons.append("no --detector-model/--sd-model given (tiny random models used)")
    if not torch.cuda.is_available():
        reasons.append("no GPU on this machine (real SD 2 inpainting at 512 px is impractical)")
    if not reasons:
        return None
    return "note: real-size models not measured: " + "; ".join(reasons) + "."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--coco", type=Path, default=Path("../shared/data/coco-mini"))
    parser.add_argument("--images", type=int, default=24, help="COCO images per detector run")
    parser.add_argument("--verify-batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--sd-groups", type=int, default=8, help="groups per SD run")
    parser.add_argument("--sd-resolutions", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--sd-steps", type=int, default=2)
    parser.add_argument("--sd-batch", type=int, default=4, help="groups per InpaintPairs batch")
    parser.add_argument("--world-images", type=int, default=64, help="ToyWorld images (128 px)")
    parser.add_argument("--render-batch", type=int, default=32)
    parser.add_argument("--detector-model", help="GroundingDINO (hub id or folder); default tiny")
    parser.add_argument("--sd-model", help="SD inpainting (hub id or folder); default tiny")
    parser.add_argument("--device", default="cpu", help="torch device of the model stages")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per stage")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (1: as Ray gives a 1-CPU actor)"
    )
    parser.add_argument("--case", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case)))
        return

    note = real_size_note(args)
    loads = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"{os.cpu_count()} cores, {args.threads} torch threads, device {args.device}, "
        f"load average {loads}"
    )
    if note:
        print(note)
    cases = []

    def add(
        label: str, stage: str, rows: list[dict], config: dict, batch_size: int, **more
    ) -> None:
        settings = {"threads": args.threads, "device": args.device, "world": None,
                    "repeats": args.repeats, **more}  # fmt: skip
        cases.append({"label": label, "stage": stage, "rows": rows, "config": config,
                      "batch_size": batch_size, **settings})  # fmt: skip

    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        detector_model, sd_model = args.detector_model, args.sd_model
        if detector_model is None:
            from tiny_grounding_dino import build_tiny_grounding_dino

            detector_model = str(build_tiny_grounding_dino(tmp / "gdino"))
        if sd_model is None:
            from tiny_sd import build_tiny_sd_inpainting

            sd_model = str(build_tiny_sd_inpainting(tmp / "sd"))
        world_config = WorldConfig.from_dict(
            {"image_size": 128, "splits": {"train": args.world_images, "test": 1}}
        )
        world = generate(tmp / "world", world_config, seed=0)
        have_coco = (args.coco / "annotations/captions_train2017.json").is_file()

        # 1. VerifyObjects on COCO. The tiny detector's boxes are small: the area filter is
        # relaxed (as in the tests) so that rows pass; the filters run either way.
        if have_coco:
            config = {"mode": "biaug", "dataset": "coco", "data": str(args.coco),
                      "limit": args.images, "detector_model": detector_model,
                      "min_box_share": 0.001, "max_box_share": 1.0}  # fmt: skip
            synth_config = load_configs(None, config)[0].shared
            rows = proposal_rows(read_inputs(synth_config, args.coco)[0], synth_config)
            for size in args.verify_batches:
                label = f"VerifyObjects, COCO, {PROPOSALS} proposals/image, batch {size}"
                add(label, "verify", rows, config, size, images_per_row=1)
        else:
            print(f"skipped VerifyObjects: no COCO images at {args.coco} (--coco DIR)")

        # 2. InpaintPairs --fill sd, on COCO (else on the ToyWorld).
        dataset, data = ("coco", args.coco) if have_coco else ("toyworld", world)
        for resolution in args.sd_resolutions:
            config = {"mode": "biaug", "dataset": dataset, "data": str(data), "fill": "sd",
                      "sd_model": sd_model, "sd_steps": args.sd_steps,
                      "sd_resolution": resolution}  # fmt: skip
            synth_config = load_configs(None, config)[0].shared
            records = read_inputs(synth_config, data)[0]
            groups = group_rows(records, synth_config, coco_pick)[: args.sd_groups]
            label = f"InpaintPairs sd, {dataset}, {resolution} px, {args.sd_steps} steps"
            add(f"{label}, batch {args.sd_batch}", "inpaint", groups, config, args.sd_batch,
                images_per_row=2)  # fmt: skip

        # 3. InpaintPairs --fill render (ToyWorld's exact oracle).
        config = {"mode": "biaug", "dataset": "toyworld", "data": str(world), "fill": "render"}
        synth_config = load_configs(None, config)[0].shared
        records = read_inputs(synth_config, world)[0]
        groups = group_rows(records, synth_config, toyworld_pick(world))
        label = f"InpaintPairs render, ToyWorld 128 px, batch {args.render_batch}"
        add(label, "inpaint", groups, config, args.render_batch, images_per_row=2,
            device="cpu", world=str(world))  # fmt: skip

        results = [measure_apart(case, tmp) for case in cases]

    print(
        f"\n| stage | images per pass | images/s (median of {args.repeats}) | best images/s "
        "| wall ms/image | CPU ms/image | setup s | RSS before setup MiB | peak RSS MiB "
        "| failed rows |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['stage']} | {r['images']} | {r['images_per_s']:.1f} "
              f"| {r['best_images_per_s']:.1f} | {r['wall_ms_per_image']:.1f} "
              f"| {r['cpu_ms_per_image']:.1f} | {r['setup_s']:.2f} "
              f"| {r['rss_before_setup_mib']:.0f} | {r['peak_rss_mib']:.0f} "
              f"| {r['failed_rows']} |")  # fmt: skip
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if note:
        print(note)


if __name__ == "__main__":
    main()
