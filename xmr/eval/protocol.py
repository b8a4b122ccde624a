"""The evaluation protocol: which images and texts are queries and galleries for each metric.

- Recall@K (both ways) on the evaluated split: an image's captions are its positives (i2t), a
  caption's image is its positive (t2i).
- ODmAP@K (odmap paper §3.2): queries are images with the objects of a removal plan removed
  (ToyWorld: exact counterfactual renders; other datasets: the plan's boxes inpainted on the fly);
  the gallery is every caption of every split; a caption is relevant when it mentions a kept class
  and no removed class.
- Bias@K (gender paper §2.2): queries are the split's captions made gender-neutral, the gallery
  is the split's images labelled male / female / neutral.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from xmr.data.errors import DataIssue
from xmr.data.images import load_image
from xmr.data.records import ImageRecord
from xmr.removal.fill import fill_telea
from xmr.removal.planning import box_mask, removal_plans
from xmr.storage import StoragePath
from xmr.text import image_gender, neutralize

Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class ImageQuery:
    """An image to encode: a file, optionally with boxes to inpaint away before encoding, or
    cropped to one box (``crop``, ``(x, y, w, h)`` pixels: a benchmark's region)."""

    path: StoragePath
    inpaint_boxes: tuple[Box, ...] = ()
    crop: Box | None = None

    def render(self) -> Image.Image:
        """Load the image (RGB), crop it, Telea-inpaint the boxes, if any. Raises ``DataError``."""
        image = load_image(self.path)
        if self.crop is not None:
            x, y, w, h = self.crop
            image = image.crop((x, y, x + w, y + h))
        if not self.inpaint_boxes:
            return image
        mask = box_mask(self.inpaint_boxes, image.width, image.height)
        return Image.fromarray(fill_telea(np.asarray(image), mask))


@dataclass
class RetrievalSet:
    """The evaluated split: images, their captions, and which image each caption belongs to."""

    images: list[ImageRecord]
    captions: list[str]
    caption_image: list[int]  # caption index -> index into ``images``

    @classmethod
    def from_records(cls, records: Sequence[ImageRecord]) -> RetrievalSet:
        captions: list[str] = []
        caption_image: list[int] = []
        for i, record in enumerate(records):
            captions.extend(record.caption_texts)
            caption_image.extend([i] * len(record.captions))
        return cls(list(records), captions, caption_image)


@dataclass
class ODmAPSet:
    """ODmAP queries (one per removal plan) and the caption gallery with its class mentions."""

    queries: list[ImageQuery]
    source_image_ids: list[int]
    removed: list[frozenset[str]]
    present: list[frozenset[str]]
    gallery: list[str]
    gallery_mentions: list[set[str]] = field(default_factory=list)


def record_gender(record: ImageRecord) -> str:
    """``male`` / ``female`` / ``neutral`` for one image (gender paper §2.2 / §4.1).

    Ground truth when the objects carry a ``gender`` attribute (ToyWorld): male iff every
    gendered person is male, female likewise, neutral when mixed or nobody. Otherwise the
    paper's caption rule (:func:`xmr.text.image_gender`).
    """
    genders = {o.attributes["gender"] for o in record.objects if "gender" in o.attributes}
    if genders:
        return genders.pop() if len(genders) == 1 else "neutral"
    return image_gender(record.caption_texts)


def planned_queries(
    records: Sequence[ImageRecord],
    issues: list[DataIssue],
    *,
    alpha1: float = 0.4,
    alpha2: float = 0.8,
    alpha3: float = 0.7,
) -> tuple[list[ImageQuery], list[int], list[frozenset[str]], list[frozenset[str]]]:
    """ODmAP queries from removal plans (§3.1), to be inpainted before encoding.

    Returns ``(queries, source_image_ids, removed, present)``, one entry per plan. A record
    whose boxes cannot be planned is skipped and recorded in ``issues``.
    """
    queries, sources, removed, present = [], [], [], []
    for record in records:
        try:
            plans = removal_plans(record, alpha1, alpha2, alpha3)
        except ValueError as exc:
            issues.append(DataIssue(f"image {record.image_id} ({record.path})", str(exc)))
            continue
        for plan in plans:
            boxes = tuple(o.bbox for o in record.objects if o.category in plan)
            queries.append(ImageQuery(record.path, boxes))
            sources.append(record.image_id)
            removed.append(frozenset(plan))
            present.append(frozenset(record.categories - set(plan)))
    return queries, sources, removed, present


def neutral_queries(records: Sequence[ImageRecord]) -> tuple[list[str], list[str]]:
    """Bias@K inputs: every caption made gender-neutral, and each image's gender label."""
    texts = [neutralize(text) for record in records for text in record.caption_texts]
    return texts, [record_gender(record) for record in records]
