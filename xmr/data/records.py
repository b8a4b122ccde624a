"""The one record schema every reader yields (COCO, Flickr30k, ToyWorld, Fashion-Gen).

Boxes are COCO-style ``(x, y, w, h)`` in pixels, origin at the top-left corner.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field

from xmr.storage import StoragePath, as_path


@dataclass(frozen=True)
class EntityPhrase:
    """An annotated noun phrase of a caption (Flickr30k Entities).

    ``types`` are the entity types of the phrase (e.g. ``("people",)``); ``entity_id`` links the
    phrase to boxes of the same entity in :attr:`ImageRecord.objects`.
    """

    text: str
    types: tuple[str, ...]
    entity_id: str = ""


@dataclass(frozen=True)
class Caption:
    """One caption of an image. ``id`` is unique within its dataset (COCO: the annotation id)."""

    id: int
    text: str
    phrases: tuple[EntityPhrase, ...] = ()


@dataclass(frozen=True)
class ObjectAnnotation:
    """One object instance: a category name and a box ``(x, y, w, h)`` in pixels.

    ``attributes`` carries extra ground truth where a dataset has it (ToyWorld persons:
    ``{"gender": "male" | "female"}``; Flickr30k: ``{"entity_id": "..."}``).
    """

    category: str
    bbox: tuple[float, float, float, float]
    attributes: Mapping[str, str] = field(default_factory=dict)


_SPACE = re.compile(r"\s+")


def normalise_entity(value: str) -> str:
    """The one form an entity value takes in :attr:`ImageRecord.entities`.

    NFKC-normalised, whitespace runs (including no-break spaces) collapsed to one space, stripped,
    lower-cased: ``"  Comme des  GARÇONS "`` -> ``"comme des garçons"``. Matching and vocabularies
    use this form; no separate display form is kept (CLIP's tokenizer lower-cases anyway).
    """
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", value)).strip().lower()


@dataclass(frozen=True)
class ImageRecord:
    """One image with its captions and objects.

    ``entities`` maps an entity group to the product's value in it (EI-CLIP's tag entities, e.g.
    ``{"brand": "horse", "category": "tops", "subcategory": "sweater", "season": "fw2024",
    "composition": "100% wool"}``), each value one whole entity (never split into sub-words) in
    :func:`normalise_entity` form. Datasets without metadata leave it empty; a group whose value
    is unknown for an image is absent.

    ``path`` is the image file: a ``Path``, or an :class:`~xmr.storage.ObjectPath` when the
    dataset is in an object store; :meth:`to_dict` (and every row that carries records)
    holds it as a string, the URI for an object.
    """

    image_id: int
    path: StoragePath
    width: int
    height: int
    captions: tuple[Caption, ...]
    objects: tuple[ObjectAnnotation, ...]
    split: str
    entities: Mapping[str, str] = field(default_factory=dict)

    @property
    def caption_texts(self) -> tuple[str, ...]:
        return tuple(c.text for c in self.captions)

    @property
    def categories(self) -> frozenset[str]:
        """The distinct object categories of the image."""
        return frozenset(o.category for o in self.objects)

    def to_dict(self) -> dict:
        """A JSON-ready dict (how records travel between pipeline workers)."""
        return {
            "image_id": self.image_id,
            "path": str(self.path),
            "width": self.width,
            "height": self.height,
            "captions": [
                {
                    "id": c.id,
                    "text": c.text,
                    "phrases": [[p.text, list(p.types), p.entity_id] for p in c.phrases],
                }
                for c in self.captions
            ],
            "objects": [
                {"category": o.category, "bbox": list(o.bbox), "attributes": dict(o.attributes)}
                for o in self.objects
            ],
            "split": self.split,
            "entities": dict(self.entities),
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> ImageRecord:
        """The inverse of :meth:`to_dict`."""
        return cls(
            image_id=data["image_id"],
            path=as_path(data["path"]),
            width=int(data["width"]),
            height=int(data["height"]),
            captions=tuple(
                Caption(
                    id=int(c["id"]),
                    text=c["text"],
                    phrases=tuple(EntityPhrase(t, tuple(types), e) for t, types, e in c["phrases"]),
                )
                for c in data["captions"]
            ),
            objects=tuple(
                ObjectAnnotation(o["category"], tuple(o["bbox"]), dict(o["attributes"]))
                for o in data["objects"]
            ),
            split=data["split"],
            entities=dict(data.get("entities", {})),
        )
