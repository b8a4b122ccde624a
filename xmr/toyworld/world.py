"""Writing a ToyWorld of either mode: folders, chunked parallel rendering, COCO files, world.json.

:func:`write_world` is the driver every mode runs. A mode (a :class:`WorldMode`:
:data:`xmr.toyworld.scene.generate.SCENE`, :data:`xmr.toyworld.shop.generate.SHOP`) gives it a
function that renders one image (writing its PNGs, returning its JSON-ready item) and one that
writes the annotation files from every split's items (most of them with :func:`write_coco`);
the driver makes the folders, renders the images in chunks (in spawned processes for large
worlds) and writes ``world.json``::

    world.json                              mode, resolved config, seed, xmr version, format, counts
    annotations/instances_{split}.json      COCO instances (:func:`write_coco_split`)
    annotations/captions_{split}.json       COCO captions
    {split}/{image_id:012d}.png             images

Image ids run from 1 across the splits in config order. A mode draws image ``i`` of a split
from :func:`scene_rng` ``(seed, split, i)`` alone, so the output is byte-identical for a seed
whatever the process count.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from xmr.progress import console_progress
from xmr.toyworld.config import ModeConfig

WORLD_FORMAT = 2
"""Bumped whenever a config renders other files than before (2: the gender split), so a cached
default world of an older xmr is made again (:func:`~xmr.toyworld.default_world.
default_toyworld`)."""
CHUNK = 100  # images per parallel task
PNG_COMPRESS_LEVEL = 1  # fast; the images are small

Item = dict[str, Any]
"""One image's JSON-ready record, as a mode's renderer returns it. :func:`write_coco` reads
``image`` (its COCO image entry, :func:`image_entry`), ``objects`` (``(category, [x, y, w, h],
attributes)`` per object, boxes in pixels) and ``captions`` (texts); a mode may add more."""
Items = dict[str, list[Item]]
"""Split -> the item of each of its images, in image order."""
RenderImage = Callable[[Any, Path, str, int, int], Item]
"""``(config, out, split, index, image_id) -> item``: renders image ``index`` of ``split`` and
writes its files under the world's folder ``out``."""


def scene_rng(seed: int, split: str, index: int) -> np.random.Generator:
    """The RNG of image ``index`` of ``split``: independent of every other image (parallel-safe)."""
    return np.random.default_rng([seed, zlib.crc32(split.encode()), index])


@dataclass(frozen=True)
class WorldMode:
    """What a kind of world gives :func:`write_world` and :func:`xmr.toyworld.generate`.

    Attributes:
        name: the ``mode`` of its configs and of ``world.json``.
        config_type: its config class (``from_dict`` / ``to_dict``).
        load_config: its packaged defaults (None) or a world YAML merged over them.
        render_image: renders one image (:data:`RenderImage`); a module-level function, as it
            runs in worker processes.
        write_annotations: ``(out, cfg, items, info)`` writes the annotation files from every
            split's items (``info``: the COCO ``info`` block) and returns the per-split counts
            ``world.json`` records.
        description: the COCO ``info.description``.
        folders: the further folders of a config's world, made before rendering.
    """

    name: str
    config_type: type[ModeConfig]
    load_config: Callable[[str | Path | None], ModeConfig]
    render_image: RenderImage
    write_annotations: Callable[[Path, Any, Items, dict[str, Any]], dict[str, Any]]
    description: str
    folders: Callable[[Any], Iterable[str]] = field(default=lambda cfg: ())


@dataclass(frozen=True)
class Chunk:
    """Images ``start .. stop - 1`` of ``split``; the first gets image id ``first_id``.

    Attributes:
        config: the world's resolved config.
        out_dir: the world's folder (a string: chunks are pickled to worker processes).
        render_image: the mode's renderer of one image.
    """

    config: ModeConfig
    out_dir: str
    split: str
    start: int
    stop: int
    first_id: int
    render_image: RenderImage


def save_png(pixels: np.ndarray, path: Path) -> None:
    """Write ``[H, W, 3]`` uint8 ``pixels`` as a PNG (fast compression: the images are small)."""
    Image.fromarray(pixels).save(path, compress_level=PNG_COMPRESS_LEVEL)


def write_json(path: Path, data: Any, *, indent: int | None = None) -> None:
    """``data`` as JSON and a newline: compact, or indented by ``indent`` spaces."""
    separators = None if indent else (",", ":")
    path.write_text(json.dumps(data, indent=indent, separators=separators) + "\n")


def image_entry(image_id: int, size: int, **extra: Any) -> dict[str, Any]:
    """The COCO image entry of a ``size`` x ``size`` image ``image_id`` (file
    ``{image_id:012d}.png`` in its split's folder), then the mode's ``extra`` keys."""
    return {
        "id": image_id,
        "file_name": f"{image_id:012d}.png",
        "width": size,
        "height": size,
        **extra,
    }


def box_annotation(
    ann_id: int, image_id: int, category_id: int, bbox: Sequence[int]
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


def write_coco_split(
    out: Path,
    split: str,
    info: dict[str, Any],
    images: list[dict[str, Any]],
    annotations: list[dict[str, Any]],
    categories: list[dict[str, Any]],
    captions: list[dict[str, Any]],
) -> None:
    """``annotations/instances_{split}.json`` (``images``, instance ``annotations``,
    ``categories``) and ``annotations/captions_{split}.json`` (``images``, ``captions``)."""
    write_json(
        out / "annotations" / f"instances_{split}.json",
        {
            "info": info,
            "licenses": [],
            "images": images,
            "annotations": annotations,
            "categories": categories,
        },
    )
    write_json(
        out / "annotations" / f"captions_{split}.json",
        {"info": info, "licenses": [], "images": images, "annotations": captions},
    )


@dataclass(frozen=True)
class CocoSplit:
    """What :func:`write_coco` wrote for one split: COCO image entries, instance annotations
    and caption annotations."""

    images: list[dict[str, Any]]
    annotations: list[dict[str, Any]]
    captions: list[dict[str, Any]]


def write_coco(
    out: Path, items: Items, categories: list[dict[str, Any]], info: dict[str, Any]
) -> dict[str, CocoSplit]:
    """The COCO files of every split (:func:`write_coco_split`) from its :data:`Item` s.

    ``categories`` are the COCO categories (``id``, ``name``, ``supercategory``); an object's
    category is a ``name`` of them. Annotation and caption ids run from 1 across the whole world
    in split order; an object's non-empty ``attributes`` go into its annotation.
    """
    category_ids = {c["name"]: c["id"] for c in categories}
    ann_id = caption_id = 1
    written: dict[str, CocoSplit] = {}
    for split, split_items in items.items():
        coco = CocoSplit([], [], [])
        for item in split_items:
            image = item["image"]
            coco.images.append(image)
            for category, box, attributes in item["objects"]:
                ann = box_annotation(ann_id, image["id"], category_ids[category], box)
                if attributes:
                    ann["attributes"] = attributes
                coco.annotations.append(ann)
                ann_id += 1
            for text in item["captions"]:
                coco.captions.append({"id": caption_id, "image_id": image["id"], "caption": text})
                caption_id += 1
        write_coco_split(out, split, info, coco.images, coco.annotations, categories, coco.captions)
        written[split] = coco
    return written


def empty_world_dir(out_dir: str | Path) -> Path:
    """``out_dir`` with an ``annotations`` folder; it must be new or empty. Raises ValueError."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out}: output folder exists and is not empty")
    (out / "annotations").mkdir(parents=True, exist_ok=True)
    return out


def _workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def render_chunk(chunk: Chunk) -> list[Item]:
    """Render and write the images of ``chunk``; their items in image order."""
    out = Path(chunk.out_dir)
    return [
        chunk.render_image(chunk.config, out, chunk.split, i, chunk.first_id + i - chunk.start)
        for i in range(chunk.start, chunk.stop)
    ]


def run_chunks(chunks: Sequence[Chunk], splits: list[str], *, progress: bool) -> Items:
    """:func:`render_chunk` every chunk; return each split's items in chunk order.

    Worlds of more than :data:`CHUNK` images run in spawned processes, one per core (a chunk's
    ``render_image`` is pickled to them by name).
    """
    total = sum(c.stop - c.start for c in chunks)
    processes = min(_workers(), math.ceil(total / CHUNK))  # small worlds: no pool to start
    results: Items = {split: [] for split in splits}
    with console_progress(total, "toyworld", unit="img", enabled=progress) as bar:
        if processes > 1:
            with multiprocessing.get_context("spawn").Pool(processes) as pool:
                for chunk, part in zip(chunks, pool.imap(render_chunk, chunks), strict=True):
                    results[chunk.split] += part
                    bar.update(len(part))
        else:
            for chunk in chunks:
                part = render_chunk(chunk)
                results[chunk.split] += part
                bar.update(len(part))
    return results


def write_world(
    out_dir: str | Path, cfg: ModeConfig, mode: WorldMode, *, progress: bool = False
) -> Path:
    """Generate a world of ``mode`` into ``out_dir`` (created; must be empty if it exists).

    Args:
        out_dir: output folder.
        cfg: the resolved config (:func:`~xmr.toyworld.config.resolve_config`), of
            ``mode.config_type``.
        mode: what renders the images and writes the annotations.
        progress: show progress (images; a bar on a terminal, else a line per tenth).

    Returns:
        ``out_dir`` as a Path.

    Raises:
        ValueError: ``out_dir`` is not empty.
    """
    from xmr import __version__

    out = empty_world_dir(out_dir)
    for folder in (*cfg.splits, *mode.folders(cfg)):
        (out / folder).mkdir(parents=True)
    chunks = []
    first_id = 1
    for split, count in cfg.splits.items():
        for start in range(0, count, CHUNK):
            stop = min(count, start + CHUNK)
            chunks.append(
                Chunk(cfg, str(out), split, start, stop, first_id + start, mode.render_image)
            )
        first_id += count
    items = run_chunks(chunks, list(cfg.splits), progress=progress)
    info = {"description": mode.description, "version": __version__, "seed": cfg.seed}
    world = {
        "xmr_version": __version__,
        "format": WORLD_FORMAT,
        "mode": cfg.mode,
        "seed": cfg.seed,
        "config": cfg.to_dict(),
        "counts": mode.write_annotations(out, cfg, items, info),
    }
    write_json(out / "world.json", world, indent=2)
    return out
