"""ARO (Yuksekgonul et al. 2022): the readers of its published layouts and its scoring rules.

The four subsets (:data:`ARO_SUBSETS`) and the files they read, in the authors' names (their
``dataset_zoo/aro_datasets.py``), so that one folder can hold them all:

- ``vg-relation``: ``visual_genome_relation.json``, images in ``images/``;
- ``vg-attribution``: ``visual_genome_attribution.json``, images in ``images/``;
- ``coco-order``: ``coco_karpathy_test.json`` (BLIP's Karpathy test split: a list of
  ``{"image": "val2014/COCO_val2014_....jpg", "caption": [...]}``), image paths relative to the
  folder (``val2014/`` inside it);
- ``flickr-order``: ``flickr30k_test.json`` (likewise, ``{"image": "flickr30k-images/....jpg"}``).

A VG file is a JSON list of items with ``image_path`` (under ``images/``), ``bbox_x``,
``bbox_y``, ``bbox_w``, ``bbox_h`` (pixels; the image is cropped to the box), ``true_caption``,
``false_caption`` and ``relation_name`` (VG-Relation) or ``attributes`` (VG-Attribution: a pair
of attribute words); other keys are ignored. The Order subsets are built from the captions
(:mod:`xmr.benchmarks.order`). In every subset an item whose image is missing (or named
outside its images folder) or whose caption is empty is skipped with its reason
(:attr:`~xmr.benchmarks.items.BenchmarkData.skipped`), or with ``strict`` stops the reading; a
malformed file or entry always does.

Scoring (an item is right when its true caption scores strictly above every negative):

- ``aro/vg_relation_acc``: the mean of the per-relation accuracies over the relations NOT in
  :data:`EXCLUDED_RELATIONS` (macro accuracy; every other relation counts, however few items);
- ``aro/vg_attribution_acc``: the mean of the per-attribute-pair accuracies over the pairs with
  at least :data:`MIN_ATTRIBUTE_PAIR_ITEMS` items; a pair is the key ``"<first>_<second>"`` of
  the item's ``attributes`` in their order;
- ``aro/coco_order_acc``, ``aro/flickr_order_acc``: the share of items right (micro accuracy,
  the authors' ``Precision@1``).

Ties: the authors take ``argmax`` over the captions, which breaks a tie towards the first one:
their VG items list the false caption first (a tie is wrong, as here) but their Order items the
true caption first (a tie is right there, wrong here; see :mod:`xmr.benchmarks.order` for how
the shuffles avoid unchanged negatives).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from xmr.benchmarks.items import (
    EMPTY_CAPTION,
    BenchmarkData,
    BenchmarkScore,
    ContrastItem,
    GroupAccuracy,
    Skips,
    group_accuracies,
    image_problem,
    is_empty_caption,
    macro_weights,
    pooled_weights,
)
from xmr.benchmarks.order import MAX_WORDS, read_order
from xmr.data.coco import load_json
from xmr.data.errors import DataError

ARO_SUBSETS = ("vg-relation", "vg-attribution", "coco-order", "flickr-order")
"""The ARO subsets, in the authors' order; ``all`` (:func:`aro_subsets`) is every one."""

ARO_FILES = {
    "vg-relation": "visual_genome_relation.json",
    "vg-attribution": "visual_genome_attribution.json",
    "coco-order": "coco_karpathy_test.json",
    "flickr-order": "flickr30k_test.json",
}
"""The annotation file each subset reads from its folder (the authors' file names)."""

VG_IMAGES_FOLDER = "images"
"""The VG subsets' images folder inside their folder; ``image_path`` is relative to it."""

ARO_METRICS = {
    "vg-relation": "aro/vg_relation_acc",
    "vg-attribution": "aro/vg_attribution_acc",
    "coco-order": "aro/coco_order_acc",
    "flickr-order": "aro/flickr_order_acc",
}
"""The MLflow metric of each subset."""

MIN_ATTRIBUTE_PAIR_ITEMS = 25
"""VG-Attribution averages over the attribute pairs with at least this many items: the authors'
``VG_Attribution.evaluate_scores`` drops a pair ``if attr_mask.sum() < 25``."""

EXCLUDED_RELATIONS: tuple[str, ...] = (
    "adjusting", "attached to", "between", "bigger than", "biting", "boarding", "brushing",
    "chewing", "cleaning", "climbing", "close to", "coming from", "coming out of", "contain",
    "crossing", "dragging", "draped over", "drinking", "drinking from", "driving", "driving down",
    "driving on", "eating from", "eating in", "enclosing", "exiting", "facing", "filled with",
    "floating in", "floating on", "flying", "flying above", "flying in", "flying over",
    "flying through", "full of", "going down", "going into", "going through", "grazing in",
    "growing in", "growing on", "guiding", "hanging from", "hanging in", "hanging off",
    "hanging over", "higher than", "holding onto", "hugging", "in between", "jumping off",
    "jumping on", "jumping over", "kept in", "larger than", "leading", "leaning over", "leaving",
    "licking", "longer than", "looking in", "looking into", "looking out", "looking over",
    "looking through", "lying next to", "lying on top of", "making", "mixed with", "mounted on",
    "moving", "on the back of", "on the edge of", "on the front of", "on the other side of",
    "opening", "painted on", "parked at", "parked beside", "parked by", "parked in",
    "parked in front of", "parked near", "parked next to", "perched on", "petting", "piled on",
    "playing", "playing in", "playing on", "playing with", "pouring", "reaching for", "reading",
    "reflected on", "riding on", "running in", "running on", "running through", "seen through",
    "sitting behind", "sitting beside", "sitting by", "sitting in front of", "sitting near",
    "sitting next to", "sitting under", "skiing down", "skiing on", "sleeping in", "sleeping on",
    "smiling at", "sniffing", "splashing", "sprinkled on", "stacked on", "standing against",
    "standing around", "standing behind", "standing beside", "standing in front of",
    "standing near", "standing next to", "staring at", "stuck in", "surrounding", "swimming in",
    "swinging", "talking to", "topped with", "touching", "traveling down", "traveling on", "tying",
    "typing on", "underneath", "wading in", "waiting for", "walking across", "walking by",
    "walking down", "walking next to", "walking through", "working in", "working on", "worn on",
    "wrapped around", "wrapped in", "by", "of", "near", "next to", "with", "beside",
    "on the side of", "around",
)  # fmt: skip
"""The relations VG-Relation's macro accuracy leaves out, verbatim and in order from the authors'
notebook ``notebooks/Replicate ARO! VG-Relation, VG-Attribution.ipynb`` (repository
mertyg/vision-language-models-are-bows, commit 81fdd20), where the list is named ``symmetric``
and applied as ``df = df[~df.Relation.isin(symmetric)]`` before ``df.Accuracy.mean()``.

Why: the code says no more than that name. In the repository's issue #37 (which points to the
paper's appendix A.1, step 6, removing symmetric relations) an author confirms they are kept in
the JSON and dropped when computing results. Our reading: VG-Relation's false caption swaps
subject and object, which for a symmetric relation ("the cup next to the plate") need not make
it false.
The list holds more than strictly symmetric relations (e.g. "eating from", "hanging from"); it
is copied as the authors apply it.

No item count threshold applies to relations in their code: ``VG_Relation.evaluate_scores``
keeps every relation present (its ``if relation_mask.sum() == 0`` never fires), unlike
VG-Attribution's :data:`MIN_ATTRIBUTE_PAIR_ITEMS`. (In issues #4 and #8 the authors say
their paper's tables also dropped rare relations; the notebook, which this follows, does not.)
"""

_EXCLUDED = frozenset(EXCLUDED_RELATIONS)

_BOX_FIELDS = ("bbox_x", "bbox_y", "bbox_w", "bbox_h")


def aro_subsets(choice: str) -> tuple[str, ...]:
    """The subsets a ``--subset`` choice names: ``all`` is every one of :data:`ARO_SUBSETS`.

    Raises:
        ValueError: ``choice`` is neither a subset nor ``all`` (names the choices).
    """
    if choice == "all":
        return ARO_SUBSETS
    if choice not in ARO_SUBSETS:
        raise ValueError(f"ARO subset {choice!r}: expected one of {', '.join(ARO_SUBSETS)}, all")
    return (choice,)


def _require_subset(subset: str) -> None:
    if subset not in ARO_SUBSETS:
        raise ValueError(f"ARO subset {subset!r}: expected one of {', '.join(ARO_SUBSETS)}")


def _vg_item(
    path: Path, index: int, entry: Any, images: Path, subset: str, skips: Skips
) -> ContrastItem | None:
    """One VG item, or None when it is skipped (recorded in ``skips``: a missing image, one
    outside ``images``, an empty caption). A malformed entry (its box, its group, a field of
    the wrong type) raises whatever ``skips`` is."""
    where = f"{path}: item {index}"
    if not isinstance(entry, dict):
        raise DataError(f"{where}: expected an object")
    empty = [
        name
        for name in ("true_caption", "false_caption")
        if is_empty_caption(entry.get(name), name, where)
    ]
    box = tuple(entry.get(name) for name in _BOX_FIELDS)
    if not all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in box
    ):
        raise DataError(f"{where}: {', '.join(_BOX_FIELDS)} must be numbers, got {box}")
    if not (box[2] > 0 and box[3] > 0):
        raise DataError(f"{where}: the box has no area (bbox_w={box[2]}, bbox_h={box[3]})")
    if subset == "vg-relation":
        group = entry.get("relation_name")
        if not isinstance(group, str) or not group:
            raise DataError(f"{where}: 'relation_name' must be a non-empty string")
    else:
        pair = entry.get("attributes")
        if not (
            isinstance(pair, list) and len(pair) == 2 and all(isinstance(a, str) for a in pair)
        ):
            raise DataError(f"{where}: 'attributes' must be a list of two strings, got {pair!r}")
        group = f"{pair[0]}_{pair[1]}"
    item_id = f"{subset}/{index}"
    problem = image_problem(images, entry.get("image_path"), where)
    if problem is not None:
        skips.bad(item_id, *problem)
        return None
    if empty:
        detail = f"{where}: {empty[0]!r} must be a non-empty string, got {entry.get(empty[0])!r}"
        skips.bad(item_id, EMPTY_CAPTION, detail)
        return None
    captions = (entry["true_caption"], entry["false_caption"])
    x, y, w, h = (float(v) for v in box)
    return ContrastItem(item_id, images / entry["image_path"], (x, y, w, h), captions, group)


def _read_vg(path: Path, images: Path, subset: str, strict: bool) -> BenchmarkData:
    if not images.is_dir():
        raise DataError(
            f"{images}: VG images folder not found (the ARO layout: {path.name} and "
            f"{VG_IMAGES_FOLDER}/)"
        )
    entries = load_json(path)
    if not isinstance(entries, list):
        raise DataError(f"{path}: expected a list of items, got {type(entries).__name__}")
    if not entries:
        raise DataError(f"{path}: no items")
    skips = Skips(strict)
    read = [_vg_item(path, i, entry, images, subset, skips) for i, entry in enumerate(entries)]
    items = tuple(item for item in read if item is not None)
    return BenchmarkData(items=items, skipped=tuple(skips.items))


def read_aro(
    subset: str,
    folder: Path,
    *,
    seed: int = 0,
    max_words: int = MAX_WORDS,
    strict: bool = True,
) -> BenchmarkData:
    """The items of one ARO subset, read from ``folder`` in the authors' layout.

    Args:
        subset: one of :data:`ARO_SUBSETS`.
        folder: holds the subset's file (:data:`ARO_FILES`) and its images (``images/`` for
            VG; the paths the Karpathy file names for Order).
        seed: the Order shuffles' seed (VG items have none).
        max_words: Order captions are cut to this many words.
        strict: raise at the first bad row (a missing image, an image name outside the
            images folder, an empty caption); False: skip each, with its reason, in
            ``skipped``.

    Returns:
        the items in file order. VG: ``item_id`` = ``<subset>/<index in the file>``, captions =
        (true, false), box = the item's box, group = the relation or ``"<attr1>_<attr2>"``.
        Order: see :func:`xmr.benchmarks.order.read_order` (group = the subset name; captions
        no shuffle can change are in ``skipped``, strict or not). ``skipped`` also holds the
        bad rows (not strict), by the ids their items would have had.

    Raises:
        ValueError: not one of :data:`ARO_SUBSETS`.
        DataError: the subset's file is missing (names it and the layout), a malformed file or
            item (names the file and the item); strict: a bad row (names the file, the item and
            the image or the field).
    """
    _require_subset(subset)
    folder = Path(folder).resolve()
    path = folder / ARO_FILES[subset]
    if not path.is_file():
        raise DataError(f"{path}: ARO {subset} file not found")
    if subset in ("vg-relation", "vg-attribution"):
        return _read_vg(path, folder / VG_IMAGES_FOLDER, subset, strict)
    return read_order(path, folder, subset, seed=seed, max_words=max_words, strict=strict)


def score_aro(subset: str, items: Sequence[ContrastItem], correct: np.ndarray) -> BenchmarkScore:
    """The subset's metric (:data:`ARO_METRICS`) and its per-group accuracies.

    Args:
        subset: one of :data:`ARO_SUBSETS`.
        items: the subset's items (:func:`read_aro`).
        correct: bool ``(N,)`` from :func:`~xmr.benchmarks.items.true_caption_wins`.

    Returns:
        VG-Relation: groups by relation, the :data:`EXCLUDED_RELATIONS` marked excluded;
        VG-Attribution: groups by attribute pair, those under :data:`MIN_ATTRIBUTE_PAIR_ITEMS`
        items marked excluded; the metric is the macro accuracy of the groups kept (NaN when
        none is). Order: one group, the subset; the metric is the share of items right.
    """
    _require_subset(subset)
    groups = group_accuracies(items, correct)
    if subset == "vg-relation":
        reason = "symmetric relation (the ARO authors' list)"
        groups = {
            name: GroupAccuracy(g.accuracy, g.count, reason if name in _EXCLUDED else None)
            for name, g in groups.items()
        }
    elif subset == "vg-attribution":
        reason = f"fewer than {MIN_ATTRIBUTE_PAIR_ITEMS} items"
        groups = {
            name: GroupAccuracy(
                g.accuracy, g.count, reason if g.count < MIN_ATTRIBUTE_PAIR_ITEMS else None
            )
            for name, g in groups.items()
        }
    else:
        return BenchmarkScore.of(groups, {ARO_METRICS[subset]: pooled_weights(groups)})
    return BenchmarkScore.of(groups, {ARO_METRICS[subset]: macro_weights(groups)})
