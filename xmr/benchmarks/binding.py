"""The ToyWorld binding test: its reader and its scoring (the items are described in
:mod:`xmr.toyworld.scene.binding`).

Decisions, each right when the true candidate scores strictly above the other:

- a **swap** item: its image -> the true caption against the colours-swapped one;
- a **counter** item, four decisions: each of its two images (stereotyped colour, counter
  colour) -> its own caption against the other's, and each caption -> its own image against the
  other. The groups are ``stereotype/i2t``, ``stereotype/t2i``, ``counter/i2t`` and
  ``counter/t2i``.

Metrics (higher is better): ``binding/swap_acc``; ``binding/counter_acc`` and
``binding/stereotype_acc``, each over its side's decisions in both directions. A model that
learned the planted colour bias rather than the colours it sees is right on the stereotyped side
and wrong on the counter side: counter below stereotype accuracy is the bias, measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from xmr.benchmarks.items import (
    BenchmarkData,
    BenchmarkScore,
    CaptionContrastItem,
    ContrastItem,
    group_accuracies,
    pooled_weights,
)
from xmr.data.coco import load_json
from xmr.data.errors import DataError
from xmr.storage import ObjectPath, as_path
from xmr.toyworld.scene.binding import ITEMS_FILE, SIDES

SWAP_METRIC = "binding/swap_acc"
COUNTER_METRIC = "binding/counter_acc"
STEREOTYPE_METRIC = "binding/stereotype_acc"
BINDING_METRICS = (SWAP_METRIC, COUNTER_METRIC, STEREOTYPE_METRIC)

BINDING_GROUPS = (
    "swap",
    "stereotype/i2t",
    "stereotype/t2i",
    "counter/i2t",
    "counter/t2i",
)
"""The groups of the test, in report order."""


def _text(entry: dict[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: {key!r} must be a non-empty string")
    return value


def _sides(entry: dict[str, Any], key: str, where: str) -> dict[str, str]:
    value = entry.get(key)
    if not isinstance(value, dict):
        raise DataError(f"{where}: {key!r} must be an object with {' and '.join(SIDES)}")
    return {side: _text(value, side, f"{where}: {key}") for side in SIDES}


def read_binding(world: str | Path | ObjectPath) -> BenchmarkData:
    """The binding items of the scene ToyWorld in ``world`` (its ``binding/items.json``), a
    local folder or one in an object store (``s3://…``: image paths are then object paths).

    Returns:
        ``items``: per swap item its image -> (caption, swapped caption), group ``swap``; per
        counter item its two image -> caption items (groups ``stereotype/i2t``,
        ``counter/i2t``). ``caption_items``: per counter item its two caption -> image items
        (``stereotype/t2i``, ``counter/t2i``). Image paths are absolute.

    Raises:
        DataError: no ``items.json`` (the message says how to make a world with one), or a
            malformed entry (names the file and the entry).
    """
    world = as_path(world).resolve()
    path = world / ITEMS_FILE
    if not path.is_file():
        raise DataError(
            f"{path}: not found; this world has no binding test (make one with "
            "`xmr data toyworld --config binding --out DIR`)"
        )
    entries = load_json(path)
    if not isinstance(entries, list) or not entries:
        raise DataError(f"{path}: expected a non-empty list of items")
    items: list[ContrastItem] = []
    caption_items: list[CaptionContrastItem] = []
    for index, entry in enumerate(entries):
        where = f"{path}: item {index}"
        if not isinstance(entry, dict):
            raise DataError(f"{where}: expected an object")
        item_id = _text(entry, "id", where)
        kind = entry.get("kind")
        if kind == "swap":
            items.append(
                ContrastItem(
                    item_id=item_id,
                    image=world / _text(entry, "image", where),
                    box=None,
                    captions=(
                        _text(entry, "caption", where),
                        _text(entry, "negative_caption", where),
                    ),
                    group="swap",
                )
            )
        elif kind == "counter":
            images = {s: world / p for s, p in _sides(entry, "images", where).items()}
            captions = _sides(entry, "captions", where)
            for side, other in (SIDES, SIDES[::-1]):
                items.append(
                    ContrastItem(
                        item_id=f"{item_id}/i2t/{side}",
                        image=images[side],
                        box=None,
                        captions=(captions[side], captions[other]),
                        group=f"{side}/i2t",
                    )
                )
                caption_items.append(
                    CaptionContrastItem(
                        item_id=f"{item_id}/t2i/{side}",
                        caption=captions[side],
                        images=(images[side], images[other]),
                        group=f"{side}/t2i",
                    )
                )
        else:
            raise DataError(f"{where}: 'kind' must be 'swap' or 'counter', got {kind!r}")
    return BenchmarkData(items=tuple(items), caption_items=tuple(caption_items))


def score_binding(
    items: Sequence[ContrastItem],
    correct: np.ndarray,
    caption_items: Sequence[CaptionContrastItem] = (),
    caption_correct: np.ndarray | None = None,
) -> BenchmarkScore:
    """The test's metrics from per-decision correctness.

    Args:
        items: image -> caption items of :func:`read_binding`.
        correct: bool ``(N,)``, ``items``' verdicts (:func:`~xmr.benchmarks.items.
            true_caption_wins`).
        caption_items: caption -> image items.
        caption_correct: bool ``(M,)``, their verdicts.

    Returns:
        metrics :data:`BINDING_METRICS` that have decisions (no swap item: no ``swap_acc``);
        groups :data:`BINDING_GROUPS` present, in that order.
    """
    caption_correct = np.zeros(0, bool) if caption_correct is None else caption_correct
    groups = group_accuracies([*items, *caption_items], np.concatenate([correct, caption_correct]))
    unknown = sorted(set(groups) - set(BINDING_GROUPS))
    if unknown:
        raise ValueError(f"not binding groups: {unknown}")
    ordered = {g: groups[g] for g in BINDING_GROUPS if g in groups}
    weights = {}
    if "swap" in ordered:
        weights[SWAP_METRIC] = {"swap": 1.0}
    for side, metric in (("stereotype", STEREOTYPE_METRIC), ("counter", COUNTER_METRIC)):
        parts = {g: ordered[g] for g in (f"{side}/i2t", f"{side}/t2i") if g in ordered}
        if parts:  # every decision of the side, both directions pooled
            weights[metric] = pooled_weights(parts)
    return BenchmarkScore.of(ordered, weights)
