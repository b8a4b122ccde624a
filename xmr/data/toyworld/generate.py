"""Writing a scene ToyWorld: COCO annotation files, PNG images, counterfactual renders,
``world.json`` (through the driver both modes share, :func:`xmr.data.toyworld.world.write_world`).

Layout under ``out_dir``::

    world.json                              mode "scene", resolved config, seed, xmr version, counts
    annotations/instances_{split}.json      COCO instances; persons carry attributes.gender
    annotations/captions_{split}.json       COCO captions, 5 per image (gender-neutral in the
                                            neutral and gender splits)
    {split}/{image_id:012d}.png             images (file_name in the JSON is the base name)
    counterfactuals/index_{split}.json      [{id, file_name, source_image_id, removed, kept}]
    counterfactuals/{split}/{source_image_id:012d}_{removed classes joined by '+'}.png
    binding/items.json, binding/*.png       the attribute-binding test, when the config asks for
                                            one (:mod:`xmr.data.toyworld.binding`)

Image ids run from 1 across the splits in config order; annotation, caption and counterfactual
ids run from 1 across the whole world. Image ``i`` of a split draws everything from
:func:`~xmr.data.toyworld.scene.scene_rng` ``(seed, split, i)``, so chunks of images render in
parallel processes and the output is byte-identical for a seed whatever the process count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from xmr.data.toyworld.binding import write_binding
from xmr.data.toyworld.captions import make_captions
from xmr.data.toyworld.classes import CLASSES
from xmr.data.toyworld.config import WorldConfig, load_config
from xmr.data.toyworld.render import render
from xmr.data.toyworld.scene import Scene, gender_scene_counts, sample_scene, scene_rng
from xmr.data.toyworld.world import (
    Chunk,
    Items,
    box_annotation,
    resolve_config,
    save_png,
    write_coco_split,
    write_json,
    write_world,
)
from xmr.removal.planning import plan_removals


def counterfactual_name(source_image_id: int, removed: tuple[str, ...]) -> str:
    """``{source_image_id:012d}_{removed joined by '+', spaces as '_'}.png``."""
    return f"{source_image_id:012d}_" + "+".join(sorted(removed)).replace(" ", "_") + ".png"


def scene_objects(scene: Scene) -> list[tuple[str, list[int]]]:
    """``(category, [x, y, w, h])`` of every object, boxes clipped to the image (annotations)."""
    return [(o.category, list(o.bbox(scene.size))) for o in scene.objects]


def locate_image(config: WorldConfig, image_id: int) -> tuple[str, int]:
    """The split of image ``image_id`` and its index in that split (ids run from 1 across the
    splits in config order). Raises ``ValueError`` for an id outside the world."""
    first = 1
    for split, count in config.splits.items():
        if first <= image_id < first + count:
            return split, image_id - first
        first += count
    raise ValueError(f"image id {image_id} is not in this world (ids 1 to {first - 1})")


def image_scene(config: WorldConfig, split: str, index: int) -> tuple[Scene, np.random.Generator]:
    """The scene of image ``index`` of ``split``, and its RNG after the scene was drawn (the
    captions draw from it next): the same scene every time, for re-renders of a world image."""
    rng = scene_rng(config.seed, split, index)
    if split in config.gender_splits:
        counts, gender = gender_scene_counts(config, rng, index)
        return sample_scene(config, rng, biased=False, counts=counts, gender=gender), rng
    return sample_scene(config, rng, biased=split in config.biased_splits), rng


def _run_chunk(chunk: Chunk) -> list[dict[str, Any]]:
    """Render and write one chunk; return each image's annotations (JSON-ready, ids not set)."""
    cfg = chunk.config
    out = Path(chunk.out_dir)
    neutral = chunk.split in (*cfg.captions.neutral_splits, *cfg.gender_splits)
    cf = cfg.counterfactuals
    results = []
    for i in range(chunk.start, chunk.stop):
        image_id = chunk.first_id + i - chunk.start
        scene, rng = image_scene(cfg, chunk.split, i)
        captions = make_captions(
            scene,
            rng,
            omit_prob=cfg.captions.omit_prob,
            colour_prob=cfg.captions.colour_prob,
            gendered_word_prob=cfg.captions.gendered_word_prob,
            neutral=neutral,
        )
        file_name = f"{image_id:012d}.png"
        save_png(render(scene), out / chunk.split / file_name)
        objects = scene_objects(scene)
        counterfactuals = []
        if chunk.split in cf.splits:
            size = cfg.image_size
            for plan in plan_removals(objects, size, size, cf.alpha1, cf.alpha2, cf.alpha3):
                name = f"counterfactuals/{chunk.split}/{counterfactual_name(image_id, plan)}"
                save_png(render(scene, omit=frozenset(plan)), out / name)
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


def _write_annotations(
    out: Path, cfg: WorldConfig, items: Items, info: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """The COCO files and counterfactual indexes of every split, and the binding test when the
    config asks for one; returns the per-split counts (and ``binding``'s)."""
    categories = [
        {"id": CLASSES[c].coco_id, "name": c, "supercategory": CLASSES[c].supercategory}
        for c in sorted(cfg.classes, key=lambda c: CLASSES[c].coco_id)
    ]
    ann_id = caption_id = cf_id = 1
    counts: dict[str, dict[str, Any]] = {}
    for split, split_items in items.items():
        images, annotations, captions, index = [], [], [], []
        per_class = dict.fromkeys(sorted(cfg.classes), 0)
        for item in split_items:
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
        write_coco_split(out, split, info, images, annotations, categories, captions)
        counts[split] = {
            "images": len(images),
            "objects": len(annotations),
            "captions": len(captions),
            "objects_per_class": per_class,
        }
        if split in cfg.counterfactuals.splits:
            write_json(out / "counterfactuals" / f"index_{split}.json", index)
            counts[split]["counterfactuals"] = len(index)
    if cfg.binding.swap_items or cfg.binding.counter_items:
        counts["binding"] = write_binding(out, cfg)
    return counts


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
        progress: show progress (images; a bar on a terminal, else a line per tenth).

    Returns:
        ``out_dir`` as a Path.

    Raises:
        ValueError: invalid config, or ``out_dir`` is not empty.
        FileNotFoundError: the config file does not exist.
    """
    cfg = resolve_config(config, seed, WorldConfig, load_config)
    counterfactual_splits = [s for s in cfg.splits if s in cfg.counterfactuals.splits]
    return write_world(
        out_dir,
        cfg,
        _run_chunk,
        _write_annotations,
        description="ToyWorld (xmr)",
        folders=[f"counterfactuals/{split}" for split in counterfactual_splits],
        progress=progress,
    )
