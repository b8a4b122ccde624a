"""Writing a ToyWorld: COCO annotation files, PNG images, counterfactual renders, ``world.json``.

Layout under ``out_dir``::

    world.json                              mode "scene", resolved config, seed, xmr version, counts
    annotations/instances_{split}.json      COCO instances; persons carry attributes.gender
    annotations/captions_{split}.json       COCO captions, 5 per image
    {split}/{image_id:012d}.png             images (file_name in the JSON is the base name)
    counterfactuals/index_{split}.json      [{id, file_name, source_image_id, removed, kept}]
    counterfactuals/{split}/{source_image_id:012d}_{removed classes joined by '+'}.png

Image ids run from 1 across the splits in config order; annotation, caption and counterfactual
ids run from 1 across the whole world. Image ``i`` of a split draws everything from
:func:`~xmr.data.toyworld.scene.scene_rng` ``(seed, split, i)``, so chunks of images render in
parallel processes and the output is byte-identical for a seed whatever the process count.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from PIL import Image
from tqdm import tqdm

from xmr.data.toyworld.captions import make_captions
from xmr.data.toyworld.classes import CLASSES
from xmr.data.toyworld.config import WorldConfig, load_config
from xmr.data.toyworld.render import render
from xmr.data.toyworld.scene import Scene, sample_scene, scene_rng
from xmr.removal.planning import plan_removals

CHUNK = 100  # images per parallel task
PNG_COMPRESS_LEVEL = 1  # fast; the images are small


@dataclass(frozen=True)
class _Chunk:
    """Images ``start .. stop - 1`` of ``split``; the first gets image id ``first_id``."""

    config: WorldConfig
    out_dir: str
    split: str
    start: int
    stop: int
    first_id: int


def counterfactual_name(source_image_id: int, removed: tuple[str, ...]) -> str:
    """``{source_image_id:012d}_{removed joined by '+', spaces as '_'}.png``."""
    return f"{source_image_id:012d}_" + "+".join(sorted(removed)).replace(" ", "_") + ".png"


def scene_objects(scene: Scene) -> list[tuple[str, list[int]]]:
    """``(category, [x, y, w, h])`` of every object, boxes clipped to the image (annotations)."""
    return [(o.category, list(o.bbox(scene.size))) for o in scene.objects]


def _save_png(pixels, path: Path) -> None:
    Image.fromarray(pixels).save(path, compress_level=PNG_COMPRESS_LEVEL)


def _run_chunk(chunk: _Chunk) -> list[dict[str, Any]]:
    """Render and write one chunk; return each image's annotations (JSON-ready, ids not set)."""
    cfg = chunk.config
    out = Path(chunk.out_dir)
    biased = chunk.split in cfg.biased_splits
    neutral = chunk.split in cfg.captions.neutral_splits
    cf = cfg.counterfactuals
    results = []
    for i in range(chunk.start, chunk.stop):
        image_id = chunk.first_id + i - chunk.start
        rng = scene_rng(cfg.seed, chunk.split, i)
        scene = sample_scene(cfg, rng, biased=biased)
        captions = make_captions(
            scene,
            rng,
            omit_prob=cfg.captions.omit_prob,
            gendered_word_prob=cfg.captions.gendered_word_prob,
            neutral=neutral,
        )
        file_name = f"{image_id:012d}.png"
        _save_png(render(scene), out / chunk.split / file_name)
        objects = scene_objects(scene)
        counterfactuals = []
        if chunk.split in cf.splits:
            size = cfg.image_size
            for plan in plan_removals(objects, size, size, cf.alpha1, cf.alpha2, cf.alpha3):
                name = f"counterfactuals/{chunk.split}/{counterfactual_name(image_id, plan)}"
                _save_png(render(scene, omit=frozenset(plan)), out / name)
                kept = sorted(set(scene.counts) - set(plan))
                counterfactuals.append(
                    {
                        "file_name": name,
                        "source_image_id": image_id,
                        "removed": sorted(plan),
                        "kept": kept,
                    }
                )
        results.append(
            {
                "image": {
                    "id": image_id,
                    "file_name": file_name,
                    "width": cfg.image_size,
                    "height": cfg.image_size,
                    "background": scene.background,
                },
                "objects": [
                    (category, box, o.gender)
                    for (category, box), o in zip(objects, scene.objects, strict=True)
                ],
                "captions": captions,
                "counterfactuals": counterfactuals,
            }
        )
    return results


def run_chunks(
    run: Callable[[Any], list[dict[str, Any]]],
    chunks: Sequence[Any],
    splits: list[str],
    *,
    progress: bool,
) -> dict[str, list[dict[str, Any]]]:
    """``run`` every chunk (each has ``split``, ``start``, ``stop``); return each split's results
    in chunk order.

    Worlds of more than :data:`CHUNK` images run in spawned processes, one per core: ``run`` must
    be a module-level function (it is pickled to the workers).
    """
    total = sum(c.stop - c.start for c in chunks)
    processes = min(_workers(), math.ceil(total / CHUNK))  # small worlds: no pool to start
    results: dict[str, list[dict[str, Any]]] = {split: [] for split in splits}
    with tqdm(total=total, disable=not progress, unit="img", desc="toyworld") as bar:
        if processes > 1:
            with multiprocessing.get_context("spawn").Pool(processes) as pool:
                for chunk, part in zip(chunks, pool.imap(run, chunks), strict=True):
                    results[chunk.split] += part
                    bar.update(len(part))
        else:
            for chunk in chunks:
                part = run(chunk)
                results[chunk.split] += part
                bar.update(len(part))
    return results


def _resolve(config: WorldConfig | str | Path | None, seed: int | None) -> WorldConfig:
    if config is None or isinstance(config, str | Path):
        cfg = load_config(config)
    else:  # re-validate a programmatic config
        cfg = WorldConfig.from_dict(config.to_dict(), source="WorldConfig")
    return cfg if seed is None else replace(cfg, seed=seed)


def _workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def empty_world_dir(out_dir: str | Path) -> Path:
    """``out_dir`` with an ``annotations`` folder; it must be new or empty. Raises ValueError."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out}: output folder exists and is not empty")
    (out / "annotations").mkdir(parents=True, exist_ok=True)
    return out


def box_annotation(
    ann_id: int, image_id: int, category_id: int, bbox: tuple[int, int, int, int]
) -> dict[str, Any]:
    """A COCO instance annotation for an ``[x, y, w, h]`` box (its rectangle as segmentation)."""
    x, y, w, h = bbox
    return {
        "id": ann_id,
        "image_id": image_id,
        "category_id": category_id,
        "bbox": [x, y, w, h],
        "area": w * h,
        "iscrowd": 0,
        "segmentation": [[x, y, x + w, y, x + w, y + h, x, y + h]],
    }


def _write_json(path: Path, data: Any, *, indent: int | None = None) -> None:
    separators = None if indent else (",", ":")
    path.write_text(json.dumps(data, indent=indent, separators=separators) + "\n")


def generate(
    out_dir: str | Path,
    config: WorldConfig | str | Path | None = None,
    *,
    seed: int | None = None,
    progress: bool = False,
) -> Path:
    """Generate a ToyWorld into ``out_dir`` (created; must be empty if it exists).

    Args:
        out_dir: output folder.
        config: a :class:`WorldConfig`, a world YAML path, or None for the packaged defaults.
        seed: overrides the config's seed.
        progress: show a tqdm bar (images).

    Returns:
        ``out_dir`` as a Path.

    Raises:
        ValueError: invalid config, or ``out_dir`` is not empty.
        FileNotFoundError: the config file does not exist.
    """
    from xmr import __version__

    cfg = _resolve(config, seed)
    out = empty_world_dir(out_dir)
    chunks = []
    first_id = 1
    for split, count in cfg.splits.items():
        (out / split).mkdir()
        if split in cfg.counterfactuals.splits:
            (out / "counterfactuals" / split).mkdir(parents=True)
        for start in range(0, count, CHUNK):
            stop = min(count, start + CHUNK)
            chunks.append(_Chunk(cfg, str(out), split, start, stop, first_id + start))
        first_id += count

    results = run_chunks(_run_chunk, chunks, list(cfg.splits), progress=progress)

    categories = [
        {"id": CLASSES[c].coco_id, "name": c, "supercategory": CLASSES[c].supercategory}
        for c in sorted(cfg.classes, key=lambda c: CLASSES[c].coco_id)
    ]
    info = {"description": "ToyWorld (xmr)", "version": __version__, "seed": cfg.seed}
    ann_id = caption_id = cf_id = 1
    counts: dict[str, dict[str, Any]] = {}
    for split, items in results.items():
        images, annotations, captions, index = [], [], [], []
        per_class = dict.fromkeys(sorted(cfg.classes), 0)
        for item in items:
            image = item["image"]
            images.append(image)
            for category, (x, y, w, h), gender in item["objects"]:
                ann = box_annotation(ann_id, image["id"], CLASSES[category].coco_id, (x, y, w, h))
                if gender is not None:
                    ann["attributes"] = {"gender": gender}
                annotations.append(ann)
                per_class[category] += 1
                ann_id += 1
            for text in item["captions"]:
                captions.append({"id": caption_id, "image_id": image["id"], "caption": text})
                caption_id += 1
            for entry in item["counterfactuals"]:
                index.append({"id": cf_id, **entry})
                cf_id += 1
        _write_json(
            out / "annotations" / f"instances_{split}.json",
            {
                "info": info,
                "licenses": [],
                "images": images,
                "annotations": annotations,
                "categories": categories,
            },
        )
        _write_json(
            out / "annotations" / f"captions_{split}.json",
            {"info": info, "licenses": [], "images": images, "annotations": captions},
        )
        counts[split] = {
            "images": len(images),
            "objects": len(annotations),
            "captions": len(captions),
            "objects_per_class": per_class,
        }
        if split in cfg.counterfactuals.splits:
            _write_json(out / "counterfactuals" / f"index_{split}.json", index)
            counts[split]["counterfactuals"] = len(index)
    world = {
        "xmr_version": __version__,
        "mode": "scene",
        "seed": cfg.seed,
        "config": cfg.to_dict(),
        "counts": counts,
    }
    _write_json(out / "world.json", world, indent=2)
    return out
