"""The item forms benchmarks read into, the correctness rule, per-group accuracy and the
metrics made of group accuracies.

A benchmark item is one image (or a box of it) and K >= 2 captions, the true one first
(:class:`ContrastItem`, image -> caption), or one caption and K >= 2 images, the true one first
(:class:`CaptionContrastItem`, caption -> image; the ToyWorld binding test scores both ways). A
model answers an item right when the true candidate's similarity with the query is STRICTLY
above every other candidate's: a tie counts as wrong (so a model that scores every candidate
alike, e.g. a constant, gets 0, not 1/K or 1), and so does a NaN score.

Items of one benchmark may have different K (VG-Relation and SugarCrepe have 2; an Order item
has up to 5, fewer when a shuffle cannot change its caption), so scores are passed as one 1-D
array per item; a rectangular ``(N, K)`` array is accepted as well.

Every benchmark metric is a weighted mean of group accuracies (:func:`weighted_accuracy`): a
macro accuracy weighs each group kept by 1 (:func:`macro_weights`), a pooled (micro) one by its
item count (:func:`pooled_weights`), a group's own accuracy is the group alone. The weights are
the metric's one definition: its value, its per-item values
(:meth:`BenchmarkScore.item_values`, whose mean it is) and so its bootstrap interval, resampled
within each group (:func:`~xmr.compare.bootstrap.bootstrap_stratified_means`), all follow from
them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import NamedTuple

import numpy as np
from PIL import Image

from xmr.data.errors import DataError
from xmr.data.images import load_image
from xmr.metrics.grouped import group_weighted_values

Box = tuple[float, float, float, float]
"""``(x, y, w, h)`` in pixels: left, top, width, height."""

IMAGE_NOT_FOUND = "image not found"
IMAGE_OUTSIDE = "image outside the images folder"
EMPTY_CAPTION = "empty caption"
UNREADABLE_IMAGE = "unreadable image"
NO_SHUFFLE = "no shuffle changes the caption"
SKIP_REASONS = (IMAGE_NOT_FOUND, IMAGE_OUTSIDE, EMPTY_CAPTION, UNREADABLE_IMAGE, NO_SHUFFLE)
"""Why a benchmark row is not scored, the values of :attr:`SkippedItem.reason`. The first four
are bad data (``--strict`` stops at the first instead); the last is the Order benchmarks' rule
(:mod:`xmr.benchmarks.order`), always a skip. The readers decide the first three before any
encoding; an image's bytes are found unreadable when the encoding stage decodes them."""


class SkippedItem(NamedTuple):
    """A benchmark row that is not scored.

    Attributes:
        item: the item's id, as it would have been scored (``"add_att/12"``,
            ``"vg-relation/40"``, ``"val2014/COCO_val2014_000000391895.jpg#2"``).
        reason: one of :data:`SKIP_REASONS`: what the skips are counted by.
        detail: one line naming the file, the item and what is wrong with it (what ``--strict``
            stops with).
    """

    item: str
    reason: str
    detail: str


class Skips:
    """The rows a reader does not make into items: each bad one is recorded with its reason,
    or, ``strict``, raised as a :class:`~xmr.data.DataError` (its detail) at the first."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.items: list[SkippedItem] = []

    def bad(self, item: str, reason: str, detail: str) -> None:
        """Bad data (a missing image, an empty caption, ...): skip it, or raise when strict.

        Raises:
            DataError: ``detail``, when strict.
        """
        if self.strict:
            raise DataError(detail)
        self.items.append(SkippedItem(item, reason, detail))

    def rule(self, item: str, reason: str, detail: str) -> None:
        """A row the benchmark's own rules leave out: skipped, strict or not."""
        self.items.append(SkippedItem(item, reason, detail))


def image_problem(folder: Path, name: object, where: str) -> tuple[str, str] | None:
    """Why the image ``name`` of an annotation (a path relative to ``folder``) cannot be
    scored, as ``(reason, detail)``; None when ``folder / name`` is a file.

    The names come from the benchmark's (downloaded) files, the folder from the user: a name
    must stay inside the folder, so an absolute name or one with a ``..`` part is refused
    (:data:`IMAGE_OUTSIDE`) without looking at the filesystem; links inside the folder are the
    user's own and are followed.

    Args:
        folder: the images folder (absolute).
        name: the annotation's value: a string, else it is treated as absent.
        where: the file and the item, the detail's beginning (``"<file>: item '7'"``).
    """
    if not isinstance(name, str) or not name.strip():
        return IMAGE_NOT_FOUND, f"{where}: no image name ({name!r})"
    parts = PurePosixPath(name)
    if parts.is_absolute() or ".." in parts.parts:
        return IMAGE_OUTSIDE, (
            f"{where}: image {name!r} refused: an image name is a path inside the images "
            f"folder {folder} (not absolute, no '..')"
        )
    image = folder / name
    if not image.is_file():
        return IMAGE_NOT_FOUND, f"{where}: image not found: {image}"
    return None


def is_empty_caption(value: object, name: str, where: str) -> bool:
    """True when a caption field is absent, null or blank (an item to skip); False for a
    non-empty string.

    Raises:
        DataError: the value is neither a string nor absent (a malformed file, not a bad item;
            names the file, the item and the field).
    """
    if value is None:
        return True
    if not isinstance(value, str):
        raise DataError(f"{where}: {name!r} must be a non-empty string, got {type(value).__name__}")
    return not value.strip()


@dataclass(frozen=True)
class ContrastItem:
    """One benchmark item: an image and its captions, the true one first.

    Attributes:
        item_id: unique within its benchmark (e.g. ``"add_att/12"``, ``"vg-relation/40"``,
            ``"val2014/COCO_val2014_000000391895.jpg#2"``).
        image: absolute path of the image file.
        box: the region the image is cropped to before encoding (VG items; :func:`item_image`),
            None for the whole image.
        captions: index 0 the true caption, the others its negatives; at least 2.
        group: what the benchmark aggregates by: the relation (VG-Relation), the attribute pair
            (VG-Attribution), the category (SugarCrepe), the subset name (COCO/Flickr-Order).
    """

    item_id: str
    image: Path
    box: Box | None
    captions: tuple[str, ...]
    group: str

    def __post_init__(self) -> None:
        if len(self.captions) < 2:
            raise ValueError(f"item {self.item_id!r}: needs a true caption and a negative")
        if self.box is not None and not (self.box[2] > 0 and self.box[3] > 0):
            raise ValueError(f"item {self.item_id!r}: box {self.box} has no area")


@dataclass(frozen=True)
class CaptionContrastItem:
    """One caption -> image item: a caption and its images, the true one first.

    Attributes:
        item_id: unique within its benchmark (e.g. ``"counter/3/t2i/counter"``).
        caption: the query.
        images: absolute paths; index 0 the image the caption describes, the others its
            negatives; at least 2.
        group: what the benchmark aggregates by.
    """

    item_id: str
    caption: str
    images: tuple[Path, ...]
    group: str

    def __post_init__(self) -> None:
        if len(self.images) < 2:
            raise ValueError(f"item {self.item_id!r}: needs a true image and a negative")


@dataclass(frozen=True)
class BenchmarkData:
    """What a benchmark reader returns.

    Attributes:
        items: the image -> caption items, in file order.
        caption_items: the caption -> image items (benchmarks that score that way too).
        missing: benchmark files that were expected but absent (SugarCrepe categories), to be
            named to the user; the benchmark is scored without them.
        skipped: rows read but not made into items, each with its reason (a missing image or
            one outside the images folder, an empty caption, an Order caption that no shuffle
            can change); every input row is an item or a skip.
    """

    items: tuple[ContrastItem, ...]
    missing: tuple[str, ...] = ()
    skipped: tuple[SkippedItem, ...] = ()
    caption_items: tuple[CaptionContrastItem, ...] = ()


@dataclass(frozen=True)
class GroupAccuracy:
    """The accuracy of one group of items (a relation, an attribute pair, a category).

    Attributes:
        accuracy: share of the group's items answered right, in [0, 1].
        count: the group's items.
        excluded: why the group is left out of the benchmark's average, None when it counts.
    """

    accuracy: float
    count: int
    excluded: str | None = None


@dataclass(frozen=True)
class BenchmarkScore:
    """A benchmark's result.

    Attributes:
        metrics: MLflow metric name -> value in [0, 1] (all higher is better).
        groups: every group's accuracy, the excluded ones too (for a report), by group name.
        weights: metric name -> group -> the group's weight in it (the metric is
            :func:`weighted_accuracy` of ``groups`` with these weights; a group not named
            weighs 0).
    """

    metrics: dict[str, float]
    groups: dict[str, GroupAccuracy] = field(default_factory=dict)
    weights: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def of(
        cls, groups: dict[str, GroupAccuracy], weights: dict[str, dict[str, float]]
    ) -> BenchmarkScore:
        """The score whose metrics are :func:`weighted_accuracy` of ``groups`` by ``weights``
        (metric name -> group -> weight), in ``weights`` order."""
        metrics = {name: weighted_accuracy(groups, w) for name, w in weights.items()}
        return cls(metrics=metrics, groups=groups, weights=weights)

    def item_values(
        self, items: Sequence[ContrastItem | CaptionContrastItem], correct: np.ndarray
    ) -> dict[str, np.ndarray]:
        """Each metric's per-item values: float64 ``(N,)`` whose mean is the metric (up to
        rounding) and whose stratified bootstrap by ``item.group`` resamples it
        (:func:`~xmr.metrics.grouped.group_weighted_values`); an item of group ``g`` holds
        its correctness times ``w_g · N / (n_g · Σ w)``, 0 in a group the metric leaves out.
        Metrics without :attr:`weights`, and those that are NaN (no group kept), have none.

        Args:
            items: the scored items, those :attr:`groups` were counted from.
            correct: bool ``(N,)``, their verdicts in ``items`` order.
        """
        groups = [item.group for item in items]
        return {
            name: group_weighted_values(correct, groups, weights)
            for name, weights in self.weights.items()
            if not np.isnan(self.metrics[name])
        }


def item_image(item: ContrastItem) -> Image.Image:
    """The item's RGB image, cropped to its box when it has one.

    The crop is Pillow's ``crop((x, y, x + w, y + h))``, as the ARO authors' code does (Pillow
    rounds fractional corners; a box reaching past the border is padded with black). Raises
    :class:`~xmr.data.DataError` naming the file when it is missing or not a readable image.
    """
    image = load_image(item.image)
    if item.box is None:
        return image
    x, y, w, h = item.box
    return image.crop((x, y, x + w, y + h))


def true_caption_wins(scores: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
    """Per-item correctness: the true candidate (index 0) scores strictly above every negative.

    Args:
        scores: per item, the similarity of its query with each of its K candidates (captions
            of an image, or images of a caption), in the item's order: a sequence of N 1-D
            arrays (K may differ between items), or one ``(N, K)`` array.

    Returns:
        bool ``(N,)``. A tie with any negative is wrong, and so is a NaN anywhere in the row.

    Raises:
        ValueError: an item with fewer than 2 scores, or scores that are not 1-D per item.

    >>> true_caption_wins([np.array([0.9, 0.1]), np.array([0.5, 0.5, 0.1]), np.array([1, 2, 0])])
    array([ True, False, False])
    """
    rows = [np.asarray(row, dtype=np.float64) for row in scores]
    correct = np.zeros(len(rows), dtype=bool)
    for index, row in enumerate(rows):
        if row.ndim != 1 or row.shape[0] < 2:
            raise ValueError(
                f"item {index}: scores must be 1-D with the true caption and at least one "
                f"negative, got shape {row.shape}"
            )
        correct[index] = bool(np.all(row[0] > row[1:]))  # NaN compares False
    return correct


def group_accuracies(
    items: Sequence[ContrastItem | CaptionContrastItem], correct: np.ndarray
) -> dict[str, GroupAccuracy]:
    """The accuracy of each group of ``items``, groups in order of first appearance.

    Args:
        items: the scored items.
        correct: bool ``(N,)`` from :func:`true_caption_wins`, in ``items`` order.

    Raises:
        ValueError: ``correct`` does not have one entry per item.
    """
    correct = np.asarray(correct, dtype=bool)
    if correct.shape != (len(items),):
        raise ValueError(f"{len(items)} items but correctness of shape {correct.shape}")
    right: dict[str, int] = {}
    count: dict[str, int] = {}
    for item, is_right in zip(items, correct, strict=True):
        right[item.group] = right.get(item.group, 0) + int(is_right)
        count[item.group] = count.get(item.group, 0) + 1
    return {group: GroupAccuracy(right[group] / n, n) for group, n in count.items()}


def weighted_accuracy(groups: dict[str, GroupAccuracy], weights: dict[str, float]) -> float:
    """``Σ_g w_g · accuracy_g / Σ_g w_g`` over the ``groups`` with a positive weight (a group
    not in ``weights`` weighs 0); NaN when none has one."""
    kept = [(weights[name], g.accuracy) for name, g in groups.items() if weights.get(name, 0) > 0]
    if not kept:
        return float("nan")
    w, accuracy = np.array(kept).T
    return float(np.sum(w * accuracy) / np.sum(w))


def macro_weights(groups: dict[str, GroupAccuracy]) -> dict[str, float]:
    """Weight 1 for each group not excluded: the macro accuracy's (the mean of their
    accuracies)."""
    return {name: 1.0 for name, group in groups.items() if group.excluded is None}


def pooled_weights(groups: dict[str, GroupAccuracy]) -> dict[str, float]:
    """Each group weighted by its item count: the pooled accuracy's (the share of all their
    items answered right)."""
    return {name: float(group.count) for name, group in groups.items()}


def macro_accuracy(groups: dict[str, GroupAccuracy]) -> float:
    """The unweighted mean accuracy of the groups not excluded; NaN when none is left."""
    return weighted_accuracy(groups, macro_weights(groups))
