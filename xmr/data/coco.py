"""COCO-layout reader, and the annotation checks every reader shares.

Layout: ``root/annotations/instances_{split}{year}.json`` and ``captions_{split}{year}.json``,
images in ``root/{split}{year}/{file_name}`` (COCO 2014 / 2017; ToyWorld uses ``year=""``).
``root`` may be in an object store (``s3://bucket/coco``, see :mod:`xmr.data.files`): the
records' image paths are then :class:`~xmr.storage.ObjectPath` s, and the image folder is listed
once rather than each image asked for.

- The captions file decides which images exist: images only in the instances file are dropped
  (they cannot be retrieved by text); an image without instances has ``objects=()``, which is
  normal in COCO.
- Crowd annotations (``iscrowd=1``) are kept: their boxes are real object regions.
- Captions and objects keep file order; records are sorted by image id.
- An image entry's optional ``"entities"`` object (entity group -> value, as ToyWorld's shop mode
  writes) becomes :attr:`ImageRecord.entities`; it must map strings to strings.

Bad items follow :func:`xmr.data.errors.report`: a missing or malformed annotation file always
raises; a missing image file, a caption with no words, a box outside the image (see
:func:`clip_box`), an unknown category id are raised, or skipped and recorded in ``issues``.
An image left without captions is skipped as well.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pycocotools.coco import COCO

from xmr.data.errors import DataError, DataIssue, report
from xmr.data.files import FileIndex
from xmr.data.records import Caption, ImageRecord, ObjectAnnotation
from xmr.storage import ObjectPath, StoragePath, as_path

Box = tuple[float, float, float, float]

#: How far (pixels) a box may reach past the image border and still be clipped, not rejected.
BOX_TOLERANCE_PX = 1.0

_WORD = re.compile(r"\w")


def load_json(path: StoragePath) -> Any:
    """Parse a JSON file. Raises :class:`DataError` naming the file when missing or malformed."""
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        with path.open("r", encoding="utf-8") as f:
            return json.load(f)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise DataError(f"{path}: malformed JSON ({exc})") from exc


def has_words(text: str) -> bool:
    """Whether ``text`` has at least one word character (not only punctuation / whitespace)."""
    return bool(_WORD.search(text))


def clip_box(bbox: Sequence[float], width: int, height: int) -> Box:
    """Check a ``(x, y, w, h)`` box against a ``width`` x ``height`` image and clip it.

    A box that reaches at most :data:`BOX_TOLERANCE_PX` past the border is clipped to the image
    (annotation tools round); anything further out, a non-positive or non-finite size, or a value
    that is not 4 numbers raises ``ValueError`` saying why. A box already inside is returned
    unchanged (as floats).
    """
    try:
        x, y, w, h = (float(v) for v in bbox)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bbox {bbox!r} is not 4 numbers") from exc
    if not all(math.isfinite(v) for v in (x, y, w, h)) or w <= 0 or h <= 0:
        raise ValueError(f"bbox {bbox!r} has a non-positive or non-finite size")
    tol = BOX_TOLERANCE_PX
    if x < -tol or y < -tol or x + w > width + tol or y + h > height + tol:
        raise ValueError(f"bbox {bbox!r} lies outside the {width}x{height} image")
    if x < 0:
        x, w = 0.0, w + x
    if y < 0:
        y, h = 0.0, h + y
    if x + w > width:
        w = width - x
    if y + h > height:
        h = height - y
    if w <= 0 or h <= 0:
        raise ValueError(f"bbox {bbox!r} lies outside the {width}x{height} image")
    return (x, y, w, h)


def _detect_year(root: StoragePath, split: str) -> str:
    """The year suffix of the one ``instances_{split}[20NN].json`` under ``root/annotations``."""
    folder = root / "annotations"
    if not folder.is_dir():
        raise DataError(f"{folder}: annotation folder not found")
    pattern = re.compile(rf"instances_{re.escape(split)}(20\d\d)?\.json")
    found = sorted(p.name for p in folder.iterdir() if pattern.fullmatch(p.name))
    if len(found) != 1:
        present = sorted(p.name for p in folder.glob("instances_*.json"))
        raise DataError(
            f"{folder}: need exactly one of instances_{split}.json or instances_{split}20NN.json "
            f"to pick the year, found {found or 'none'} (instances files there: {present}); "
            "pass year= explicitly"
        )
    return pattern.fullmatch(found[0]).group(1) or ""


def _load_coco(path: StoragePath) -> COCO:
    """Load a COCO annotation file into pycocotools' index (its progress prints are swallowed).

    The JSON is read through ``path`` (pycocotools opens only local files), as
    ``COCO(path)`` would read it.
    """
    if not path.is_file():
        raise DataError(f"{path}: annotation file not found")
    try:
        with path.open("rb") as f:
            dataset = json.load(f)
        if not isinstance(dataset, dict):
            raise TypeError(f"annotation file format {type(dataset)} not supported")
        coco = COCO()
        coco.dataset = dataset
        with contextlib.redirect_stdout(io.StringIO()):
            coco.createIndex()
        return coco
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(
            f"{path}: malformed COCO annotation file ({type(exc).__name__}: {exc})"
        ) from exc


def _is_size(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _captions(
    anns: list[dict], image_id: int, source: StoragePath, issues: list[DataIssue] | None
) -> list[Caption]:
    """The usable captions of one image; a caption with no words is reported and skipped."""
    captions = []
    for ann in anns:
        text = ann.get("caption")
        if not isinstance(text, str) or not has_words(text):
            item = f"{source}: image {image_id}, caption {ann['id']}"
            report(DataIssue(item, f"caption {text!r} has no words", image_id), issues)
            continue
        captions.append(Caption(id=int(ann["id"]), text=text.strip()))
    return captions


def _objects(
    anns: list[dict],
    image: dict,
    categories: dict[int, str],
    source: StoragePath,
    issues: list[DataIssue] | None,
) -> list[ObjectAnnotation]:
    """The usable objects of one image; bad boxes and unknown categories are reported, skipped."""
    objects = []
    for ann in anns:
        item = f"{source}: image {image['id']}, annotation {ann['id']}"
        name = categories.get(ann.get("category_id"))
        if name is None:
            report(
                DataIssue(item, f"unknown category id {ann.get('category_id')!r}", image["id"]),
                issues,
            )
            continue
        try:
            bbox = clip_box(ann.get("bbox"), image["width"], image["height"])
        except ValueError as exc:
            report(DataIssue(item, str(exc), image["id"]), issues)
            continue
        attributes = ann.get("attributes", {})
        if not isinstance(attributes, dict):
            report(
                DataIssue(item, f"attributes {attributes!r} is not an object", image["id"]), issues
            )
            continue
        objects.append(ObjectAnnotation(category=name, bbox=bbox, attributes=dict(attributes)))
    return objects


def read_coco(
    root: str | Path | ObjectPath,
    split: str,
    *,
    year: str | int | None = None,
    issues: list[DataIssue] | None = None,
) -> list[ImageRecord]:
    """Read one split of a COCO-layout dataset into records sorted by image id.

    ``year=None`` detects it from the one ``instances_{split}.json`` /
    ``instances_{split}20NN.json`` present (ambiguity is an error listing what was found);
    ``year=""`` means no year suffix. ``issues=None`` raises :class:`DataError` on the first bad
    item; a list collects the skipped items instead. Each record's ``split`` is ``split``.
    ``root`` may be a URI (``s3://…``).
    """
    root = as_path(root)
    suffix = f"{split}{_detect_year(root, split) if year is None else year}"
    instances_file = root / "annotations" / f"instances_{suffix}.json"
    captions_file = root / "annotations" / f"captions_{suffix}.json"
    instances = _load_coco(instances_file)
    captions = _load_coco(captions_file)
    categories = {
        cid: cat["name"] for cid, cat in instances.cats.items() if isinstance(cat.get("name"), str)
    }
    image_dir = root / suffix
    files = FileIndex()

    records = []
    for image_id, image in sorted(captions.imgs.items()):
        item = f"{captions_file}: image {image_id}"
        file_name = image.get("file_name")
        if not (
            isinstance(file_name, str)
            and _is_size(image.get("width"))
            and _is_size(image.get("height"))
        ):
            report(
                DataIssue(item, "image entry needs file_name, width and height", image_id), issues
            )
            continue
        path = image_dir / file_name
        if not files.is_file(path):
            report(DataIssue(item, f"image file {path} is missing", image_id), issues)
            continue
        entities = image.get("entities", {})
        if not isinstance(entities, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in entities.items()
        ):
            report(
                DataIssue(item, f"entities {entities!r} is not a str -> str object", image_id),
                issues,
            )
            continue
        caps = _captions(captions.imgToAnns.get(image_id, []), image_id, captions_file, issues)
        if not caps:
            report(DataIssue(item, "image has no usable caption", image_id), issues)
            continue
        objects = _objects(
            instances.imgToAnns.get(image_id, []), image, categories, instances_file, issues
        )
        records.append(
            ImageRecord(
                image_id=int(image_id),
                path=path,
                width=image["width"],
                height=image["height"],
                captions=tuple(caps),
                objects=tuple(objects),
                split=split,
                entities=entities,
            )
        )
    return records
