"""Flickr30k reader: Karpathy splits, with Flickr30k Entities phrases and boxes where present.

Layout under ``root``:

- ``dataset_flickr30k.json``: Karpathy's split file, ``{"images": [{"filename", "imgid",
  "split", "sentids", "sentences": [{"raw", "tokens", "sentid", "imgid"}]}], "dataset"}``;
- ``flickr30k-images/{filename}``: the images;
- ``Sentences/{stem}.txt`` (Flickr30k Entities, optional): one caption per line, phrases marked
  ``[/EN#<entity id>/<type 1>/.../<type n> <words>]``; entity id 0 (type ``notvisual``) has no
  box;
- ``Annotations/{stem}.xml`` (Flickr30k Entities, optional): PASCAL-VOC-like; each ``<object>``
  lists one or more ``<name>`` entity ids and either a ``<bndbox>`` or ``<nobndbox>`` /
  ``<scene>`` flags; the image size is in ``<size>``.

Conventions:

- Splits are ``train``, ``val``, ``test``; Karpathy's ``restval`` images count as ``train``.
- Image id: the integer filename stem. Caption id: the Karpathy ``sentid``.
- Captions: line *i* of the Sentences file is Karpathy sentence *i* (both keep the original
  Flickr30k caption order). Its text is the line without markup, in the Entities tokenisation
  (``a man 's arm``), and ``Caption.phrases`` holds its :class:`EntityPhrase` s. Without a
  Sentences file the caption is Karpathy's ``raw`` text with no phrases; a Sentences file whose
  line count differs from Karpathy's is reported and the image falls back the same way.
- Boxes: VOC coordinates are 1-based and inclusive (the Entities toolkit subtracts 1 from each),
  so ``x = xmin - 1``, ``w = xmax - xmin + 1`` (same for y). There is one
  :class:`ObjectAnnotation` per (box, entity id): an ``<object>`` naming two ids gives two
  annotations with the same box. ``category`` is the first type of the first phrase that mentions
  the entity, ``attributes={"entity_id": id}``. Scene / no-box entities have no object. Types
  come from the Sentences file, so an image without one has ``objects=()``.
- Width and height: the XML ``<size>``, else the image header (no pixel decode).
- ``root`` may be in an object store (``s3://…``, see :mod:`xmr.data.files`): each folder is
  listed once; the Sentences and XML files of the split's images are still one read each.

Bad items follow :func:`xmr.data.errors.report` (see :mod:`xmr.data.coco` for the box rule).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from xmr.data.coco import clip_box, has_words, load_json
from xmr.data.errors import DataError, DataIssue, report
from xmr.data.files import FileIndex
from xmr.data.images import image_size
from xmr.data.records import Caption, EntityPhrase, ImageRecord, ObjectAnnotation
from xmr.storage import ObjectPath, StoragePath, as_path

KARPATHY_FILE = "dataset_flickr30k.json"
SPLITS = ("train", "val", "test")
_SPLIT_ALIASES = {"restval": "train"}

_PHRASE = re.compile(r"\[/EN#(\d+)((?:/[^\s/\[\]]+)+)\s+([^\[\]]+?)\s*\]")

Parsed = tuple[str, tuple[EntityPhrase, ...]]
VocBox = tuple[str | None, str | None, str | None, str | None]


def parse_entity_sentence(line: str) -> Parsed:
    """Plain text and phrases of one Flickr30k Entities Sentences line.

    >>> parse_entity_sentence("[/EN#7/people/other A man] sits .")
    ('A man sits .', (EntityPhrase(text='A man', types=('people', 'other'), entity_id='7'),))

    Raises ``ValueError`` when a ``[/EN#`` phrase is not well formed.
    """
    pieces: list[str] = []
    phrases: list[EntityPhrase] = []
    end = 0
    for match in _PHRASE.finditer(line):
        text = " ".join(match.group(3).split())
        types = tuple(match.group(2).split("/")[1:])
        phrases.append(EntityPhrase(text=text, types=types, entity_id=match.group(1)))
        pieces += [line[end : match.start()], text]
        end = match.end()
    pieces.append(line[end:])
    text = " ".join(" ".join(pieces).split())
    if "[/EN#" in text:
        raise ValueError(f"malformed entity markup in {line!r}")
    return text, tuple(phrases)


def _read_sentences(
    path: StoragePath, count: int, item: str, files: FileIndex, issues: list[DataIssue] | None
) -> list[Parsed | None] | None:
    """The parsed Sentences lines (``None`` for a malformed line, reported), or ``None`` when
    the file is absent or does not have ``count`` captions (reported)."""
    if not files.is_file(path):
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        report(DataIssue(f"{path}: {item}", f"not UTF-8 text ({exc})"), issues)
        return None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if len(lines) != count:
        reason = (
            f"{len(lines)} captions but {KARPATHY_FILE} lists {count}; "
            "using the Karpathy captions without entities"
        )
        report(DataIssue(f"{path}: {item}", reason), issues)
        return None
    parsed: list[Parsed | None] = []
    for n, line in lines:
        try:
            parsed.append(parse_entity_sentence(line))
        except ValueError as exc:
            report(DataIssue(f"{path}:{n}: {item}", str(exc)), issues)
            parsed.append(None)
    return parsed


def _read_annotation(
    path: StoragePath,
) -> tuple[tuple[int, int] | None, list[tuple[list[str], VocBox]]]:
    """The ``<size>`` (``None`` when absent) and every box with its entity ids, file order.

    Raises ``ValueError`` when the XML or its size is malformed.
    """
    try:
        with path.open("rb") as f:
            root = ET.parse(f).getroot()
    except ET.ParseError as exc:
        raise ValueError(f"malformed XML ({exc})") from exc
    size = root.find("size")
    dims = None
    if size is not None:
        try:
            dims = (int(size.findtext("width", "")), int(size.findtext("height", "")))
        except ValueError as exc:
            raise ValueError(f"malformed <size> ({exc})") from exc
    boxes = []
    for obj in root.iter("object"):
        bndbox = obj.find("bndbox")
        if bndbox is None:  # a scene / no-box entity
            continue
        ids = [name.text.strip() for name in obj.findall("name") if name.text and name.text.strip()]
        coords = tuple(bndbox.findtext(k) for k in ("xmin", "ymin", "xmax", "ymax"))
        boxes.append((ids, coords))
    return dims, boxes


def _voc_to_coco(coords: VocBox) -> tuple[float, float, float, float]:
    """1-based inclusive ``(xmin, ymin, xmax, ymax)`` strings -> ``(x, y, w, h)``."""
    try:
        xmin, ymin, xmax, ymax = (float(c) for c in coords)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"VOC box {coords} is not 4 numbers") from exc
    return (xmin - 1, ymin - 1, xmax - xmin + 1, ymax - ymin + 1)


def _objects(
    boxes: list[tuple[list[str], VocBox]],
    entity_types: dict[str, str],
    size: tuple[int, int],
    image_id: int,
    item: str,
    issues: list[DataIssue] | None,
) -> list[ObjectAnnotation]:
    """One annotation per (box, entity id); untyped entities and bad boxes are reported."""
    objects = []
    for index, (ids, coords) in enumerate(boxes):
        if not ids:
            report(DataIssue(f"{item}, box {index}", "box has no entity id"), issues)
        for entity_id in ids:
            entity = f"{item}, entity {entity_id}"
            category = entity_types.get(entity_id)
            if category is None:
                report(DataIssue(entity, "entity has a box but no phrase gives its type"), issues)
                continue
            try:
                bbox = clip_box(_voc_to_coco(coords), *size)
            except ValueError as exc:
                report(DataIssue(entity, str(exc), image_id=image_id), issues)
                continue
            objects.append(ObjectAnnotation(category, bbox, {"entity_id": entity_id}))
    return objects


def _image_record(
    root: StoragePath,
    entry: dict,
    source: str,
    split: str,
    files: FileIndex,
    issues: list[DataIssue] | None,
) -> ImageRecord | None:
    """One Karpathy image entry as a record, or ``None`` when it is skipped (reported)."""
    try:
        filename = str(entry["filename"])
        stem = Path(filename).stem
        image_id = int(stem)
        sentences = [(int(s["sentid"]), str(s.get("raw", ""))) for s in entry["sentences"]]
    except (KeyError, TypeError, ValueError) as exc:
        report(DataIssue(source, f"malformed image entry ({type(exc).__name__}: {exc})"), issues)
        return None
    item = f"image {image_id}"
    path = root / "flickr30k-images" / filename
    if not files.is_file(path):
        report(DataIssue(f"{source}: {item}", f"image file {path} is missing", image_id), issues)
        return None

    sentences_file = root / "Sentences" / f"{stem}.txt"
    entity_lines = _read_sentences(sentences_file, len(sentences), item, files, issues)
    captions = []
    for i, (sent_id, raw) in enumerate(sentences):
        if entity_lines is None:
            text, phrases = raw.strip(), ()
        elif entity_lines[i] is None:  # malformed line, already reported
            continue
        else:
            text, phrases = entity_lines[i]
        if not has_words(text):
            where = source if entity_lines is None else sentences_file
            report(DataIssue(f"{where}: {item}, caption {sent_id}", "caption has no words"), issues)
            continue
        captions.append(Caption(id=sent_id, text=text, phrases=phrases))
    if not captions:
        report(DataIssue(f"{source}: {item}", "image has no usable caption", image_id), issues)
        return None

    xml_file = root / "Annotations" / f"{stem}.xml"
    size, boxes = None, []
    try:
        if files.is_file(xml_file):
            size, boxes = _read_annotation(xml_file)
        size = size or image_size(path)
    except (ValueError, DataError) as exc:
        report(DataIssue(f"{xml_file}: {item}", str(exc), image_id), issues)
        return None
    objects: list[ObjectAnnotation] = []
    if entity_lines is not None:
        entity_types: dict[str, str] = {}
        for caption in captions:
            for phrase in caption.phrases:
                entity_types.setdefault(phrase.entity_id, phrase.types[0])
        objects = _objects(boxes, entity_types, size, image_id, f"{xml_file}: {item}", issues)
    return ImageRecord(
        image_id=image_id,
        path=path,
        width=size[0],
        height=size[1],
        captions=tuple(captions),
        objects=tuple(objects),
        split=split,
    )


def read_flickr30k(
    root: str | Path | ObjectPath, split: str, *, issues: list[DataIssue] | None = None
) -> list[ImageRecord]:
    """Read one Karpathy split (``train`` incl. ``restval``, ``val``, ``test``) of Flickr30k.

    Records are sorted by image id. ``issues=None`` raises :class:`DataError` on the first bad
    item; a list collects the skipped items instead. See the module docstring for conventions.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown Flickr30k split {split!r}; choose one of {', '.join(SPLITS)}")
    root = as_path(root)
    karpathy_file = root / KARPATHY_FILE
    data = load_json(karpathy_file)
    images = data.get("images") if isinstance(data, dict) else None
    if not isinstance(images, list):
        raise DataError(f"{karpathy_file}: no 'images' list")
    records = []
    files = FileIndex()
    for index, entry in enumerate(images):
        source = f"{karpathy_file}: images[{index}]"
        if not isinstance(entry, dict):
            report(DataIssue(source, "image entry is not an object"), issues)
            continue
        entry_split = str(entry.get("split"))
        if _SPLIT_ALIASES.get(entry_split, entry_split) != split:
            continue
        record = _image_record(root, entry, source, split, files, issues)
        if record is not None:
            records.append(record)
    return sorted(records, key=lambda r: r.image_id)
