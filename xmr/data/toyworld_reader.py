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


@dataclass(frozen=True)
class GenderDesign:
    """What a scene ToyWorld planted for Bias@K (its ``world.json``): the ``gender_splits``
    built to measure it and the ``classes`` its ``gender_bias`` rules link to a gender."""

    splits: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()

    def split_for(self, split: str) -> str | None:
        """The gender split that measures Bias@K for ``split``: ``gender_{split}`` when the
        world has it, else None."""
        name = f"gender_{split}"
        return name if name in self.splits else None


def read_gender_design(root: str | Path | ObjectPath) -> GenderDesign:
    """The :class:`GenderDesign` of the ToyWorld at ``root``; empty for a folder without a
    scene world's ``world.json`` (another dataset, a shop world, a world made before gender
    splits). Raises :class:`DataError` naming ``world.json`` when it is malformed."""
    path = as_path(root) / "world.json"
    if not path.is_file():
        return GenderDesign()
    world = load_json(path)
    config = world.get("config") if isinstance(world, dict) else None
    if not isinstance(config, dict) or world.get("mode", "scene") != "scene":
        return GenderDesign()
    try:
        splits = tuple(str(s) for s in config.get("gender_splits", ()))
        classes = tuple(dict.fromkeys(str(g["with"]) for g in config.get("gender_bias", ())))
    except (KeyError, TypeError) as exc:
        raise DataError(f"{path}: malformed gender_splits / gender_bias ({exc})") from exc
    return GenderDesign(splits, classes)


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
