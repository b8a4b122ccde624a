"""SugarCrepe (Hsieh et al. 2023): the reader of its published layout and its scoring.

Layout: the data folder holds up to seven JSON files, one per hard-negative category
(:data:`SUGARCREPE_CATEGORIES`: ``add_att.json`` ... ``swap_obj.json``), each
``{"<id>": {"filename": "000000391895.jpg", "caption": "...", "negative_caption": "..."}}``;
the images are COCO val2017, by default in ``<data>/val2017/<filename>``.

An item is right when the image scores its caption strictly above the negative caption (the
authors' ``pos_score > neg_score``). Metrics: ``sugarcrepe/<category>_acc`` for each category
present and ``sugarcrepe/mean_acc``, their unweighted mean. Categories whose file is absent are
returned in :attr:`BenchmarkData.missing` and not scored; an item whose image is missing (or
named outside the images folder) or whose caption is empty is skipped with its reason
(:attr:`BenchmarkData.skipped`), or with ``strict`` stops the reading.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from xmr.benchmarks.items import (
    EMPTY_CAPTION,
    BenchmarkData,
    BenchmarkScore,
    ContrastItem,
    Skips,
    group_accuracies,
    image_problem,
    is_empty_caption,
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

_CAPTIONS = ("caption", "negative_caption")


def category_metric(category: str) -> str:
    """The MLflow metric name of one category's accuracy: ``sugarcrepe/<category>_acc``."""
    return f"sugarcrepe/{category}_acc"


def _category_items(path: Path, category: str, images: Path, skips: Skips) -> list[ContrastItem]:
    """The items of one category file; its bad rows go to ``skips`` (a missing image, one
    outside ``images``, an empty caption), a malformed file or entry raises."""
    data = load_json(path)
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected an object of items by id, got {type(data).__name__}")
    if not data:
        raise DataError(f"{path}: no items")
    items = []
    for item_id, entry in data.items():
        where = f"{path}: item {item_id!r}"
        if not isinstance(entry, dict):
            raise DataError(f"{where}: expected an object")
        full_id = f"{category}/{item_id}"
        empty = [name for name in _CAPTIONS if is_empty_caption(entry.get(name), name, where)]
        problem = image_problem(images, entry.get("filename"), where)
        if problem is not None:
            skips.bad(full_id, *problem)
        elif empty:
            skips.bad(
                full_id,
                EMPTY_CAPTION,
                f"{where}: {empty[0]!r} must be a non-empty string, got {entry.get(empty[0])!r}",
            )
        else:
            items.append(
                ContrastItem(
                    item_id=full_id,
                    image=images / entry["filename"],
                    box=None,
                    captions=(entry["caption"], entry["negative_caption"]),
                    group=category,
                )
            )
    return items


def read_sugarcrepe(
    data: Path, images: Path | None = None, *, strict: bool = True
) -> BenchmarkData:
    """The SugarCrepe items of the category files present in ``data``.

    Args:
        data: the folder of the category JSON files.
        images: the COCO val2017 images folder; default ``data/val2017``.
        strict: raise at the first bad row (a missing image, an image name outside
            ``images``, an empty caption); False: skip each, with its reason, in ``skipped``.

    Returns:
        the items (group = category, ``item_id`` = ``<category>/<id>``, captions = (caption,
        negative caption)), categories in :data:`SUGARCREPE_CATEGORIES` order and items in file
        order; ``missing`` names the absent category files; ``skipped`` the bad rows (not
        strict), by the ids their items would have had.

    Raises:
        DataError: ``data`` or the images folder is not a folder, no category file is present
            (names the seven expected files), a file is malformed or an item is not an object
            or has a field that is not a string (names the file and the item id); strict: a
            bad row (names the file, the item id and the image or the field).
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
    skips = Skips(strict)
    items = [
        item for c in present for item in _category_items(data / f"{c}.json", c, images, skips)
    ]
    missing = tuple(f"{c}.json" for c in SUGARCREPE_CATEGORIES if c not in present)
    return BenchmarkData(items=tuple(items), missing=missing, skipped=tuple(skips.items))


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
