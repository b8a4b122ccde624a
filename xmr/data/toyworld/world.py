"""Writing a ToyWorld of either mode: folders, chunked parallel rendering, COCO files, world.json.

:func:`write_world` is the driver both generators run (:func:`xmr.data.toyworld.generate.
generate` for scenes, :func:`xmr.data.toyworld.shop.generate_shop` for products). A mode gives
it a function that renders one :class:`Chunk` of images (writing the PNGs, returning one
JSON-ready item per image) and one that writes the annotation files from every split's items;
the driver makes the folders, runs the chunks (in spawned processes for large worlds) and writes
``world.json``::

    world.json                              mode, resolved config, seed, xmr version, format, counts
    annotations/instances_{split}.json      COCO instances (:func:`write_coco_split`)
    annotations/captions_{split}.json       COCO captions
    {split}/{image_id:012d}.png             images

Image ids run from 1 across the splits in config order. A mode's renderer draws image ``i`` of a
split from :func:`~xmr.data.toyworld.scene.scene_rng` ``(seed, split, i)`` alone, so the output
is byte-identical for a seed whatever the process count.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from PIL import Image

from xmr.data.toyworld.config import WorldConfig
from xmr.data.toyworld.shop_config import ShopConfig
from xmr.progress import console_progress

WORLD_FORMAT = 2
"""Bumped whenever a config renders other files than before (2: the gender split), so a cached
default world of an older xmr is made again (:func:`xmr.data.default_world.default_toyworld`)."""
CHUNK = 100  # images per parallel task
PNG_COMPRESS_LEVEL = 1  # fast; the images are small

AnyConfig = TypeVar("AnyConfig", WorldConfig, ShopConfig)

Items = dict[str, list[dict[str, Any]]]
"""Split -> the JSON-ready item of each of its images, in image order (what renderers return)."""


@dataclass(frozen=True)
class Chunk:
    """Images ``start .. stop - 1`` of ``split``; the first gets image id ``first_id``.

    Attributes:
        config: the world's resolved config.
        out_dir: the world's folder (a string: chunks are pickled to worker processes).
    """

    config: WorldConfig | ShopConfig
    out_dir: str
    split: str
    start: int
    stop: int
    first_id: int


def resolve_config(
    config: AnyConfig | str | Path | None,
    seed: int | None,
    config_type: type[AnyConfig],
    load: Callable[[str | Path | None], AnyConfig],
) -> AnyConfig:
    """``load(config)`` for a world YAML path or None (the packaged defaults), else ``config``
    re-validated as a ``config_type``; ``seed``, when given, replaces the config's seed.

    Raises:
        ValueError: an invalid config.
        FileNotFoundError: the config file does not exist.
    """
    if config is None or isinstance(config, str | Path):
        cfg = load(config)
    else:  # re-validate a programmatic config
        cfg = config_type.from_dict(config.to_dict(), source=config_type.__name__)
    return cfg if seed is None else replace(cfg, seed=seed)


def save_png(pixels: np.ndarray, path: Path) -> None:
    """Write ``[H, W, 3]`` uint8 ``pixels`` as a PNG (fast compression: the images are small)."""
    Image.fromarray(pixels).save(path, compress_level=PNG_COMPRESS_LEVEL)


def write_json(path: Path, data: Any, *, indent: int | None = None) -> None:
    """``data`` as JSON and a newline: compact, or indented by ``indent`` spaces."""
    separators = None if indent else (",", ":")
    path.write_text(json.dumps(data, indent=indent, separators=separators) + "\n")


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


def empty_world_dir(out_dir: str | Path) -> Path:
    """``out_dir`` with an ``annotations`` folder; it must be new or empty. Raises ValueError."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out}: output folder exists and is not empty")
    (out / "annotations").mkdir(parents=True, exist_ok=True)
    return out


def _workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_chunks(
    run: Callable[[Chunk], list[dict[str, Any]]],
    chunks: Sequence[Chunk],
    splits: list[str],
    *,
    progress: bool,
) -> Items:
    """``run`` every chunk; return each split's results in chunk order.

    Worlds of more than :data:`CHUNK` images run in spawned processes, one per core: ``run`` must
    be a module-level function (it is pickled to the workers).
    """
    total = sum(c.stop - c.start for c in chunks)
    processes = min(_workers(), math.ceil(total / CHUNK))  # small worlds: no pool to start
    results: Items = {split: [] for split in splits}
    with console_progress(total, "toyworld", unit="img", enabled=progress) as bar:
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


def write_world(
    out_dir: str | Path,
    cfg: AnyConfig,
    render_chunk: Callable[[Chunk], list[dict[str, Any]]],
    write_annotations: Callable[[Path, AnyConfig, Items, dict[str, Any]], dict[str, Any]],
    *,
    description: str,
    folders: Iterable[str] = (),
    progress: bool = False,
) -> Path:
    """Generate a world of ``cfg.mode`` into ``out_dir`` (created; must be empty if it exists).

    Args:
        out_dir: output folder.
        cfg: the resolved config (:func:`resolve_config`).
        render_chunk: renders and writes the images of one :class:`Chunk`, returning a JSON-ready
            item per image; a module-level function (it may run in another process).
        write_annotations: ``(out, cfg, items, info)`` writes the annotation files from every
            split's items (``info``: the COCO ``info`` block) and returns the per-split counts
            ``world.json`` records.
        description: the COCO ``info.description``.
        folders: further folders to make under ``out_dir`` before rendering.
        progress: show progress (images; a bar on a terminal, else a line per tenth).

    Returns:
        ``out_dir`` as a Path.

    Raises:
        ValueError: ``out_dir`` is not empty.
    """
    from xmr import __version__

    out = empty_world_dir(out_dir)
    for folder in (*cfg.splits, *folders):
        (out / folder).mkdir(parents=True)
    chunks = []
    first_id = 1
    for split, count in cfg.splits.items():
        for start in range(0, count, CHUNK):
            stop = min(count, start + CHUNK)
            chunks.append(Chunk(cfg, str(out), split, start, stop, first_id + start))
        first_id += count
    items = run_chunks(render_chunk, chunks, list(cfg.splits), progress=progress)
    info = {"description": description, "version": __version__, "seed": cfg.seed}
    world = {
        "xmr_version": __version__,
        "format": WORLD_FORMAT,
        "mode": cfg.mode,
        "seed": cfg.seed,
        "config": cfg.to_dict(),
        "counts": write_annotations(out, cfg, items, info),
    }
    write_json(out / "world.json", world, indent=2)
    return out
