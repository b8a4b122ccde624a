"""BiAug step 2: keep the proposed objects the detector finds, with the filters of paper §4.1.

The detector is prompted with an image's proposals as its classes and returns
:class:`~xmr.detection.grounding_dino.Detection` records naming them. Per proposal, in proposal
order (most probable first), :func:`filter_proposals` applies:

1. no detection: dropped (``not_detected``); otherwise its best-scoring box is the object's box;
2. a box or score that is not finite, or a box with no area inside the image: dropped
   (``invalid_box``);
3. box area (clipped to the image) below ``min_area_share`` or above ``max_area_share`` of the
   image, by default 5 % and 80 %: dropped (``area``), a box too small or too big to inpaint;
4. with ``min_confidence`` set (the paper's optional *filtering*, 0.9), a score not above it:
   dropped (``confidence``);
5. a box that covers more than ``max_overlap`` (70 %) of the box of an object already kept
   (intersection / area of the kept box): dropped (``overlap``), so inpainting one object does
   not paint over another.

Every proposal ends kept or dropped with its reason: ``len(kept) + len(dropped) ==
len(objects)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from xmr.detection.grounding_dino import Detection

Box = tuple[float, float, float, float]
"""``(x, y, w, h)`` in pixels, origin top-left (COCO style)."""

Corners = tuple[float, float, float, float]
"""``(x0, y0, x1, y1)`` in pixels."""

DropRule = Literal["not_detected", "invalid_box", "area", "confidence", "overlap"]


@dataclass(frozen=True)
class ProposalFilter:
    """The thresholds of the §4.1 filters (shares and scores are fractions in [0, 1]).

    ``min_confidence`` None: no confidence filter (the paper's default pipeline). Raises
    ``ValueError`` unless ``0 < min_area_share < max_area_share <= 1``,
    ``0 < max_overlap <= 1`` and ``min_confidence`` is None or in ``[0, 1)``.
    """

    min_area_share: float = 0.05
    max_area_share: float = 0.8
    max_overlap: float = 0.7
    min_confidence: float | None = None

    def __post_init__(self) -> None:
        for name in ("min_area_share", "max_area_share", "max_overlap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a number, got {value!r}")
        if not 0 < self.min_area_share < self.max_area_share <= 1:
            raise ValueError(
                "area shares need 0 < min_area_share < max_area_share <= 1, got "
                f"{self.min_area_share} and {self.max_area_share}"
            )
        if not 0 < self.max_overlap <= 1:
            raise ValueError(f"max_overlap must be in (0, 1], got {self.max_overlap}")
        confidence = self.min_confidence
        if confidence is not None and (
            isinstance(confidence, bool)
            or not isinstance(confidence, int | float)
            or not 0 <= confidence < 1
        ):
            raise ValueError(f"min_confidence must be None or in [0, 1), got {confidence!r}")


@dataclass(frozen=True)
class VerifiedObject:
    """A proposal the detector confirmed: its name, best box ``(x, y, w, h)`` px, and score."""

    name: str
    bbox: Box
    score: float


@dataclass(frozen=True)
class DroppedObject:
    """A proposal that was dropped: why (``reason``, one line; ``rule``, the filter), and its
    best box and score when the detector found it (None when not detected)."""

    name: str
    reason: str
    bbox: Box | None
    score: float | None
    rule: DropRule


def _clipped(box: Box, width: int, height: int) -> Corners:
    """``box`` as corners clipped to the image (empty when x1 <= x0 or y1 <= y0)."""
    x, y, w, h = box
    return max(0.0, x), max(0.0, y), min(float(width), x + w), min(float(height), y + h)


def _area(corners: Corners) -> float:
    x0, y0, x1, y1 = corners
    return max(0.0, x1 - x0) * max(0.0, y1 - y0)


def _intersection(a: Corners, b: Corners) -> float:
    return _area((max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])))


def _own_verdict(
    box: Box, score: float, corners: Corners, width: int, height: int, rules: ProposalFilter
) -> tuple[str, DropRule] | None:
    """Why one detected object is dropped on its own (rules 2-4), or None when it passes."""
    if not all(math.isfinite(v) for v in (*box, score)):
        return f"box {box} or score {score} is not a finite number", "invalid_box"
    area = _area(corners)
    if area == 0:
        return f"box {box} has no area inside the {width}x{height} image", "invalid_box"
    share = area / (width * height)
    if share < rules.min_area_share:
        return f"box covers {share:.1%} of the image (< {rules.min_area_share * 100:g}%)", "area"
    if share > rules.max_area_share:
        return f"box covers {share:.1%} of the image (> {rules.max_area_share * 100:g}%)", "area"
    if rules.min_confidence is not None and score <= rules.min_confidence:
        return f"score {score:.3f} is not above {rules.min_confidence}", "confidence"
    return None


def _overlap_verdict(
    corners: Corners, kept: Sequence[VerifiedObject], width: int, height: int, limit: float
) -> tuple[str, DropRule] | None:
    """Why an object is dropped for covering a kept one (rule 5), or None when it does not."""
    for other in kept:
        other_corners = _clipped(other.bbox, width, height)
        part = _intersection(corners, other_corners) / _area(other_corners)
        if part > limit:
            reason = f"box covers {part:.1%} of kept object {other.name!r} (> {limit * 100:g}%)"
            return reason, "overlap"
    return None


def filter_proposals(
    objects: Sequence[str],
    detections: Iterable[Detection],
    width: int,
    height: int,
    rules: ProposalFilter | None = None,
) -> tuple[list[VerifiedObject], list[DroppedObject]]:
    """Apply the §4.1 filters (module doc) to the proposals of one image.

    Args:
        objects: the proposed object names in proposal order (most probable first), distinct.
        detections: what the detector returned when prompted with ``objects`` as classes; each
            ``category`` is one of ``objects``, boxes in pixels of this image.
        width: the image width in pixels.
        height: the image height in pixels.
        rules: the thresholds; None for the paper's defaults (no confidence filter).

    Returns:
        The kept objects and the dropped ones, each in proposal order; together every proposal.

    Raises:
        ValueError: repeated proposals, a detection naming no proposal, or a non-positive image
            size.
    """
    rules = rules or ProposalFilter()
    if len(set(objects)) != len(objects):
        raise ValueError(f"the proposals have repeats: {list(objects)}")
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width} x {height}")
    best: dict[str, Detection] = {}
    for detection in detections:
        if detection.category not in objects:
            raise ValueError(
                f"detection of {detection.category!r} names no proposal ({', '.join(objects)})"
            )
        current = best.get(detection.category)
        if current is None or detection.score > current.score:
            best[detection.category] = detection
    kept: list[VerifiedObject] = []
    dropped: list[DroppedObject] = []
    for name in objects:
        detection = best.get(name)
        if detection is None:
            dropped.append(DroppedObject(name, "not detected", None, None, "not_detected"))
            continue
        x, y, w, h = (float(v) for v in detection.bbox)
        box = (x, y, w, h)
        score = float(detection.score)
        corners = _clipped(box, width, height)
        verdict = _own_verdict(box, score, corners, width, height, rules)
        if verdict is None:
            verdict = _overlap_verdict(corners, kept, width, height, rules.max_overlap)
        if verdict is not None:
            dropped.append(DroppedObject(name, verdict[0], box, score, verdict[1]))
            continue
        kept.append(VerifiedObject(name, box, score))
    return kept, dropped
