"""Which classes to remove from an image: the removal plans of the ODmAP paper (§3.1, eqs. 1-3).

An image's objects are ``(category, [x, y, w, h])`` pairs in pixels (COCO boxes, origin at the
top-left corner). A box covers the pixel columns ``floor(x) .. ceil(x + w) - 1`` and rows
``floor(y) .. ceil(y + h) - 1``, clipped to the image (zero-area boxes cover nothing); a class's
mask ``M_c`` is the union of its boxes, and classes whose mask is empty are ignored everywhere.

For every class ``q`` the plan is ``R = {q} ∪ {g ≠ q : area(M_q ∩ M_g) / area(M_g) > α2}`` (the
classes mostly hidden under ``q`` go with it, eq. 2). ``R`` is kept iff

- ``area(M_R) / area(image) < α3`` with ``M_R`` the union of the masks of ``R`` (eq. 3),
- at least one class is kept (not in ``R``), and
- every kept class ``k`` has ``area(M_R ∩ M_k) / area(M_k) < α1`` (eq. 1).

Where this contract deliberately differs from the paper's pseudo-code (Appendix C):

- The pseudo-code checks α3 on ``mask_q`` alone, with ``>`` (a region of exactly α3 passes), even
  when more classes are removed; here α3 bounds the whole removed region ``M_R`` with ``<`` as
  eq. 3 says (``B'`` is the removed region of all removed classes).
- The pseudo-code's branches are exclusive: a single-class removal when every overlap is ``< α1``,
  *else* a multi-class removal when any overlap is ``> α2`` — with no α1 check on the classes left
  in the image and no requirement that any class is left. Here eq. 1 is checked for every kept
  class against the union ``M_R`` in both cases, and removing every class is not a plan (it would
  not decorrelate anything). Where ``R = {q}`` both agree exactly.
- The pseudo-code yields one synthetic image per ``q``, so two classes with the same ``R`` give two
  identical images; here plans are deduplicated. Empty masks (a division by zero in the
  pseudo-code) are ignored.

Areas are exact: they are computed on the grid spanned by the clipped box edges (at most
``2n + 1`` cells a side for ``n`` boxes), each cell weighted by its pixel count, so planning never
touches full-resolution masks. :func:`class_masks` and :func:`removal_mask` rasterise the same
boxes at full resolution for the fill stage.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from xmr.data.records import ImageRecord

Box = Sequence[float]
Objects = Sequence[tuple[str, Box]]
PixelBox = tuple[int, int, int, int]  # x0, y0, x1, y1: half-open pixel ranges


def pixel_box(box: Box, width: int, height: int) -> PixelBox | None:
    """Rasterise one ``[x, y, w, h]`` box to half-open pixel ranges ``(x0, y0, x1, y1)``.

    ``x0 = floor(x)``, ``x1 = ceil(x + w)`` (likewise ``y``), clipped to ``[0, width]`` and
    ``[0, height]``. Returns None for a zero-area box (``w`` or ``h`` is 0: floor/ceil would
    otherwise give a zero-width box at a fractional ``x`` a pixel column) and for a box wholly
    outside the image.

    Raises:
        ValueError: the box is not 4 finite numbers with ``w, h >= 0``.
    """
    try:
        x, y, w, h = (float(v) for v in box)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"a box must be 4 numbers [x, y, w, h], got {box!r}") from exc
    if not all(math.isfinite(v) for v in (x, y, w, h)) or w < 0 or h < 0:
        raise ValueError(f"a box must be finite [x, y, w, h] with w, h >= 0, got {box!r}")
    if w == 0 or h == 0:
        return None
    x0, x1 = max(math.floor(x), 0), min(math.ceil(x + w), width)
    y0, y1 = max(math.floor(y), 0), min(math.ceil(y + h), height)
    if x0 >= x1 or y0 >= y1:
        return None
    return x0, y0, x1, y1


def _check_size(width: int, height: int) -> None:
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got width={width} height={height}")


def _pixel_boxes(objects: Objects, width: int, height: int) -> dict[str, list[PixelBox]]:
    """Non-empty pixel boxes per class, classes in first-appearance order (empty ones dropped)."""
    _check_size(width, height)
    boxes: dict[str, list[PixelBox]] = {}
    for category, box in objects:
        pixels = pixel_box(box, width, height)
        if pixels is not None:
            boxes.setdefault(category, []).append(pixels)
    return boxes


def class_masks(objects: Objects, width: int, height: int) -> dict[str, np.ndarray]:
    """Full-resolution mask of every class with a non-empty mask.

    Args:
        objects: ``(category, [x, y, w, h])`` pairs.
        width, height: the image size in pixels.

    Returns:
        ``{category: [height, width] bool}``, True on the union of the class's boxes; classes whose
        boxes all fall outside the image (or have zero area) are absent.
    """
    masks: dict[str, np.ndarray] = {}
    for category, boxes in _pixel_boxes(objects, width, height).items():
        mask = np.zeros((height, width), dtype=bool)
        for x0, y0, x1, y1 in boxes:
            mask[y0:y1, x0:x1] = True
        masks[category] = mask
    return masks


def box_mask(boxes: Sequence[Box], width: int, height: int) -> np.ndarray:
    """``[height, width]`` bool: the union of ``[x, y, w, h]`` boxes (see :func:`pixel_box`).

    Raises:
        ValueError: a malformed box or a non-positive image size.
    """
    _check_size(width, height)
    mask = np.zeros((height, width), dtype=bool)
    for box in boxes:
        pixels = pixel_box(box, width, height)
        if pixels is not None:
            x0, y0, x1, y1 = pixels
            mask[y0:y1, x0:x1] = True
    return mask


def removal_mask(objects: Objects, classes: Collection[str], width: int, height: int) -> np.ndarray:
    """The region to fill when removing ``classes``: the union of their boxes.

    Returns:
        ``[height, width]`` bool, True where a box of one of ``classes`` covers the pixel.
    """
    if isinstance(classes, str):  # "person" would match every substring of it
        raise TypeError(f"classes must be a collection of class names, got the str {classes!r}")
    return box_mask([box for category, box in objects if category in classes], width, height)


def _grid_masks(
    boxes: dict[str, list[PixelBox]], width: int, height: int
) -> tuple[np.ndarray, np.ndarray]:
    """Class masks on the grid spanned by the box edges.

    Returns:
        ``masks`` ``[C, G]`` (one flattened 0/1 grid mask per class, in ``boxes`` order) and
        ``cells`` ``[G]``, the number of image pixels in each grid cell. Both are float64 so
        that areas are BLAS matrix products; every sum is an integer below 2**53, hence exact.
    """
    owner = np.array([c for c, bs in enumerate(boxes.values()) for _ in bs])  # [n]
    pixels = np.array([b for bs in boxes.values() for b in bs], dtype=np.int64)  # [n, 4]
    xs = np.unique(np.concatenate(([0, width], pixels[:, 0], pixels[:, 2])))
    ys = np.unique(np.concatenate(([0, height], pixels[:, 1], pixels[:, 3])))
    cols = np.searchsorted(xs, pixels[:, [0, 2]])  # [n, 2] grid column ranges
    rows = np.searchsorted(ys, pixels[:, [1, 3]])  # [n, 2] grid row ranges
    masks = np.zeros((len(boxes), len(ys) - 1, len(xs) - 1), dtype=bool)
    for c, (i0, i1), (j0, j1) in zip(owner, rows, cols, strict=True):
        masks[c, i0:i1, j0:j1] = True
    cells = np.outer(np.diff(ys), np.diff(xs)).astype(np.float64)
    return masks.reshape(len(boxes), -1).astype(np.float64), cells.ravel()


def _check_alpha(name: str, value: float) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"{name} must be in (0, 1], got {value}")


def plan_removals(
    objects: Objects,
    width: int,
    height: int,
    alpha1: float = 0.4,
    alpha2: float = 0.8,
    alpha3: float = 0.7,
) -> list[tuple[str, ...]]:
    """The distinct removal plans of one image (see the module docstring for the rules).

    Args:
        objects: ``(category, [x, y, w, h])`` pairs, boxes in pixels.
        width, height: the image size in pixels.
        alpha1: a kept class may lose less than this fraction of its area (eq. 1).
        alpha2: a class with more than this fraction under the removed class goes too (eq. 2).
        alpha3: the removed region must cover less than this fraction of the image (eq. 3).

    Returns:
        Sorted list of plans, each a sorted tuple of the class names to remove together. Empty
        when fewer than 2 classes have a non-empty mask.

    Raises:
        ValueError: non-positive image size, a malformed box, or an alpha outside (0, 1].
    """
    for name, value in (("alpha1", alpha1), ("alpha2", alpha2), ("alpha3", alpha3)):
        _check_alpha(name, value)
    boxes = _pixel_boxes(objects, width, height)
    if len(boxes) < 2:
        return []
    names = list(boxes)
    grid, cells = _grid_masks(boxes, width, height)  # [C, G], [G]
    areas = grid @ cells  # [C]
    overlap = (grid * cells) @ grid.T / areas  # [q, g]: |M_q ∩ M_g| / |M_g|
    removed = overlap > alpha2  # [q, c]: c is removed with q (eq. 2)
    np.fill_diagonal(removed, True)
    regions = (removed.astype(np.float64) @ grid > 0).astype(np.float64)  # [q, G]: M_R per q
    region_share = regions @ cells / (width * height)  # [q] (eq. 3)
    hidden = (regions * cells) @ grid.T / areas  # [q, k]: |M_R ∩ M_k| / |M_k| (eq. 1)
    valid = (
        (region_share < alpha3)
        & ~removed.all(axis=1)
        & np.where(removed, True, hidden < alpha1).all(axis=1)
    )
    plans = {
        tuple(sorted(names[c] for c in np.flatnonzero(removed[q]))) for q in np.flatnonzero(valid)
    }
    return sorted(plans)


def removal_plans(
    record: ImageRecord, alpha1: float, alpha2: float, alpha3: float
) -> list[tuple[str, ...]]:
    """:func:`plan_removals` on the objects of ``record`` (an image of a dataset, its size and
    boxes in pixels). Raises ValueError on malformed boxes."""
    objects = [(o.category, list(o.bbox)) for o in record.objects]
    return plan_removals(objects, record.width, record.height, alpha1, alpha2, alpha3)
