"""SugarCrepe (Hsieh et al. 2023): the reader of its published layout and its scoring.

Layout: the data folder holds up to seven JSON files, one per hard-negative category
(:data:`SUGARCREPE_CATEGORIES`: ``add_att.json`` ... ``swap_obj.json``), each
``{"<id>": {"filename": "000000391895.jpg", "caption": "...", "negative_caption": "..."}}``;
the images are COCO val2017, by default in ``<data>/val2017/<filename>``.

An item is right when the image scores its caption strictly above the negative caption (the
authors' ``pos_score > neg_score``). Metrics: ``sugarcrepe/<category>_acc`` for each category
present and ``sugarcrepe/mean_acc``, their unweighted mean. Categories whose file is absent are
returned in :attr:`BenchmarkData.missing` and not scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from xmr.benchmarks.items import (
    BenchmarkData,
    BenchmarkScore,
    ContrastItem,
    group_accuracies,
    macro_weights,
)
from xmr.data.coco import load_json
from xmr.data.errors import DataError

SUGARCREPE_CATEGORIES = (
    "add_att",
    "add_obj",
    "replace_att",
    "replace_obj",
    "replace_rel",
    "swap_att",
    "swap_obj",
)
"""The hard-negative categories; each is read from ``<category>.json``."""

IMAGES_FOLDER = "val2017"
"""The default images folder, inside the data folder."""

SUGARCREPE_MEAN_METRIC = "sugarcrepe/mean_acc"

_FIELDS = ("filename", "caption", "negative_caption")


def category_metric(category: str) -> str:
    """The MLflow metric name of one category's accuracy: ``sugarcrepe/<category>_acc``."""
    return f"sugarcrepe/{category}_acc"


def _category_items(path: Path, category: str, images: Path) -> list[ContrastItem]:
    data = load_json(path)
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected an object of items by id, got {type(data).__name__}")
    if not data:
        raise DataError(f"{path}: no items")
    items = []
    for item_id, entry in data.items():
        if not isinstance(entry, dict):
            raise DataError(f"{path}: item {item_id!r}: expected an object")
        for name in _FIELDS:
            value = entry.get(name)
            if not isinstance(value, str) or not value.strip():
                raise DataError(f"{path}: item {item_id!r}: {name!r} must be a non-empty string")
        image = images / entry["filename"]
        if not image.is_file():
            raise DataError(f"{path}: item {item_id!r}: image not found: {image}")
        items.append(
            ContrastItem(
                item_id=f"{category}/{item_id}",
                image=image,
                box=None,
                captions=(entry["caption"], entry["negative_caption"]),
                group=category,
            )
        )
    return items


def read_sugarcrepe(data: Path, images: Path | None = None) -> BenchmarkData:
    """The SugarCrepe items of the category files present in ``data``.

    Args:
        data: the folder of the category JSON files.
        images: the COCO val2017 images folder; default ``data/val2017``.

    Returns:
        the items (group = category, ``item_id`` = ``<category>/<id>``, captions = (caption,
        negative caption)), categories in :data:`SUGARCREPE_CATEGORIES` order and items in file
        order; ``missing`` names the absent category files.

    Raises:
        DataError: ``data`` or the images folder is not a folder, no category file is present
            (names the seven expected files), a file is malformed or an item lacks a field (names
            the file and the item id), an image is missing (names it).
    """
    data = Path(data).resolve()
    images = (data / IMAGES_FOLDER) if images is None else Path(images).resolve()
    if not data.is_dir():
        raise DataError(f"{data}: SugarCrepe data folder not found")
    present = [c for c in SUGARCREPE_CATEGORIES if (data / f"{c}.json").is_file()]
    if not present:
        expected = ", ".join(f"{c}.json" for c in SUGARCREPE_CATEGORIES)
        raise DataError(f"{data}: no SugarCrepe file (expected one or more of {expected})")
    if not images.is_dir():
        raise DataError(f"{images}: images folder not found (the COCO val2017 images)")
    items = [item for c in present for item in _category_items(data / f"{c}.json", c, images)]
    missing = tuple(f"{c}.json" for c in SUGARCREPE_CATEGORIES if c not in present)
    return BenchmarkData(items=tuple(items), missing=missing)


def score_sugarcrepe(items: Sequence[ContrastItem], correct: np.ndarray) -> BenchmarkScore:
    """Accuracy per category and their mean.

    Args:
        items: the items of :func:`read_sugarcrepe`.
        correct: bool ``(N,)`` from :func:`~xmr.benchmarks.items.true_caption_wins`.

    Returns:
        metrics ``sugarcrepe/<category>_acc`` (the categories present, in
        :data:`SUGARCREPE_CATEGORIES` order) and ``sugarcrepe/mean_acc`` (their unweighted mean);
        groups by category.
    """
    groups = group_accuracies(items, correct)
    ordered = {c: groups[c] for c in SUGARCREPE_CATEGORIES if c in groups}
    unknown = sorted(set(groups) - set(ordered))
    if unknown:
        raise ValueError(f"not SugarCrepe categories: {unknown}")
    weights = {category_metric(c): {c: 1.0} for c in ordered}
    weights[SUGARCREPE_MEAN_METRIC] = macro_weights(ordered)
    return BenchmarkScore.of(ordered, weights)
