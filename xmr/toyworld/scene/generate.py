"""The scene world as a :class:`~xmr.toyworld.world.WorldMode`: COCO annotation files, PNG images,
counterfactual renders, ``world.json`` (through the driver both modes share,
:func:`xmr.toyworld.world.write_world`).

Layout under ``out_dir``::

    world.json                              mode "scene", resolved config, seed, xmr version, counts
    annotations/instances_{split}.json      COCO instances; persons carry attributes.gender
    annotations/captions_{split}.json       COCO captions, 5 per image (gender-neutral in the
                                            neutral and gender splits)
    {split}/{image_id:012d}.png             images (file_name in the JSON is the base name)
    counterfactuals/index_{split}.json      [{id, file_name, source_image_id, removed, kept}]
    counterfactuals/{split}/{source_image_id:012d}_{removed classes joined by '+'}.png
    binding/items.json, binding/*.png       the attribute-binding test, when the config asks for
                                            one (:mod:`xmr.toyworld.scene.binding`)

Image ids run from 1 across the splits in config order; annotation, caption and counterfactual
ids run from 1 across the whole world. Image ``i`` of a split draws everything from
:func:`~xmr.toyworld.world.scene_rng` ``(seed, split, i)``, so chunks of images render in
parallel processes and the output is byte-identical for a seed whatever the process count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from xmr.removal.planning import plan_removals
from xmr.toyworld.scene.binding import write_binding
from xmr.toyworld.scene.captions import make_captions
from xmr.toyworld.scene.classes import CLASSES
from xmr.toyworld.scene.config import WorldConfig, load_config
from xmr.toyworld.scene.render import render
from xmr.toyworld.scene.sample import Scene, gender_scene_counts, sample_scene
from xmr.toyworld.world import (
    Item,
    Items,
    WorldMode,
    image_entry,
    save_png,
    scene_rng,
    write_coco,
    write_json,
)


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


def render_scene_image(cfg: WorldConfig, out: Path, split: str, index: int, image_id: int) -> Item:
    """Render image ``index`` of ``split`` and its counterfactuals into ``out``; return its item
    (:data:`~xmr.toyworld.world.Item`, with the ``counterfactuals`` index entries, ids not set)."""
    scene, rng = image_scene(cfg, split, index)
    neutral = split in (*cfg.captions.neutral_splits, *cfg.gender_splits)
    captions = make_captions(
        scene,
        rng,
        omit_prob=cfg.captions.omit_prob,
        colour_prob=cfg.captions.colour_prob,
        gendered_word_prob=cfg.captions.gendered_word_prob,
        neutral=neutral,
    )
    image = image_entry(image_id, cfg.image_size, background=scene.background)
    save_png(render(scene), out / split / image["file_name"])
    objects = scene_objects(scene)
    counterfactuals = []
    cf = cfg.counterfactuals
    if split in cf.splits:
        size = cfg.image_size
        for plan in plan_removals(objects, size, size, cf.alpha1, cf.alpha2, cf.alpha3):
            name = f"counterfactuals/{split}/{counterfactual_name(image_id, plan)}"
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
    return {
        "image": image,
        "objects": [
            (category, box, {} if o.gender is None else {"gender": o.gender})
            for (category, box), o in zip(objects, scene.objects, strict=True)
        ],
        "captions": captions,
        "counterfactuals": counterfactuals,
    }


def write_scene_annotations(
    out: Path, cfg: WorldConfig, items: Items, info: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """The COCO files and counterfactual indexes of every split, and the binding test when the
    config asks for one; returns the per-split counts (and ``binding``'s)."""
    categories = [
        {"id": CLASSES[c].coco_id, "name": c, "supercategory": CLASSES[c].supercategory}
        for c in sorted(cfg.classes, key=lambda c: CLASSES[c].coco_id)
    ]
    coco = write_coco(out, items, categories, info)
    cf_id = 1
    counts: dict[str, dict[str, Any]] = {}
    for split, split_items in items.items():
        per_class = dict.fromkeys(sorted(cfg.classes), 0)
        index = []
        for item in split_items:
            for category, _, _ in item["objects"]:
                per_class[category] += 1
            for entry in item["counterfactuals"]:
                index.append({"id": cf_id, **entry})
                cf_id += 1
        counts[split] = {
            "images": len(coco[split].images),
            "objects": len(coco[split].annotations),
            "captions": len(coco[split].captions),
            "objects_per_class": per_class,
        }
        if split in cfg.counterfactuals.splits:
            write_json(out / "counterfactuals" / f"index_{split}.json", index)
            counts[split]["counterfactuals"] = len(index)
    if cfg.binding.swap_items or cfg.binding.counter_items:
        counts["binding"] = write_binding(out, cfg)
    return counts


def _counterfactual_folders(cfg: WorldConfig) -> list[str]:
    return [
        f"counterfactuals/{split}" for split in cfg.splits if split in cfg.counterfactuals.splits
    ]


SCENE = WorldMode(
    name="scene",
    config_type=WorldConfig,
    load_config=load_config,
    render_image=render_scene_image,
    write_annotations=write_scene_annotations,
    description="ToyWorld (xmr)",
    folders=_counterfactual_folders,
)
"""The scene world, for :func:`xmr.toyworld.generate`."""
