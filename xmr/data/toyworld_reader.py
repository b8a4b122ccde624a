"""ToyWorld reader: ToyWorld is written in COCO layout, plus an index of counterfactual renders.

Layout under ``root``: ``annotations/instances_{split}.json``, ``annotations/captions_{split}.json``
(no year suffix), images in ``{split}/``; person annotations carry
``"attributes": {"gender": "male" | "female"}``. ``counterfactuals/index_{split}.json`` lists the
exact renders of each scene with some object classes removed: ``[{"id", "file_name"`` (relative
to ``root``) ``, "source_image_id", "removed": [class, ...], "kept": [class, ...]}]``. ``root``
may be in an object store (``s3://…``, see :mod:`xmr.data.files`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from xmr.data.coco import load_json, read_coco
from xmr.data.errors import DataError, DataIssue, report
from xmr.data.files import FileIndex
from xmr.data.records import ImageRecord
from xmr.storage import ObjectPath, StoragePath, as_path


@dataclass(frozen=True)
class Counterfactual:
    """A render of scene ``source_image_id`` with the ``removed`` classes taken out.

    ``kept`` are the classes still in the picture.
    """

    id: int
    path: StoragePath
    source_image_id: int
    removed: frozenset[str]
    kept: frozenset[str]


def read_toyworld(
    root: str | Path | ObjectPath, split: str, *, issues: list[DataIssue] | None = None
) -> list[ImageRecord]:
    """Read one ToyWorld split: :func:`xmr.data.coco.read_coco` with no year suffix."""
    return read_coco(root, split, year="", issues=issues)


def _class_names(value: object) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"{value!r} is not a list of class names")
    return frozenset(value)


def read_counterfactuals(
    root: str | Path | ObjectPath, split: str, *, issues: list[DataIssue] | None = None
) -> list[Counterfactual]:
    """Read ``counterfactuals/index_{split}.json``, sorted by id.

    A missing or malformed index raises :class:`DataError`. A malformed entry or a missing render
    is raised (``issues=None``) or skipped and recorded in ``issues``.
    """
    root = as_path(root)
    index_file = root / "counterfactuals" / f"index_{split}.json"
    entries = load_json(index_file)
    if not isinstance(entries, list):
        raise DataError(f"{index_file}: expected a list of counterfactuals")
    counterfactuals = []
    files = FileIndex()
    for n, entry in enumerate(entries):
        try:
            counterfactual = Counterfactual(
                id=int(entry["id"]),
                path=root / str(entry["file_name"]),
                source_image_id=int(entry["source_image_id"]),
                removed=_class_names(entry["removed"]),
                kept=_class_names(entry["kept"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            reason = f"malformed counterfactual ({type(exc).__name__}: {exc})"
            report(DataIssue(f"{index_file}: entry {n}", reason), issues)
            continue
        if not files.is_file(counterfactual.path):
            item = f"{index_file}: counterfactual {counterfactual.id}"
            report(DataIssue(item, f"image file {counterfactual.path} is missing"), issues)
            continue
        counterfactuals.append(counterfactual)
    return sorted(counterfactuals, key=lambda c: c.id)
