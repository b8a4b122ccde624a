"""Read any supported dataset by name."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from xmr.data.coco import read_coco
from xmr.data.errors import DataIssue
from xmr.data.fashiongen import check_fashiongen_root, fashiongen_splits, read_fashiongen
from xmr.data.flickr30k import read_flickr30k
from xmr.data.records import ImageRecord
from xmr.data.toyworld_reader import read_toyworld
from xmr.storage import ObjectPath, UnreachableStorage, as_path

_READERS: dict[str, Callable[..., list[ImageRecord]]] = {
    "toyworld": read_toyworld,
    "coco": read_coco,
    "flickr30k": read_flickr30k,
    "fashiongen": read_fashiongen,
}

DATASETS = tuple(_READERS)


def read_dataset(
    name: str, root: str | Path | ObjectPath, split: str, *, issues: list[DataIssue] | None = None
) -> list[ImageRecord]:
    """Read ``split`` of dataset ``name`` (one of :data:`DATASETS`) from ``root``.

    ``root`` may be in an object store (``s3://bucket/coco``; not Fashion-Gen's HDF5 files):
    the records' image paths are then :class:`~xmr.storage.ObjectPath` s (see
    :mod:`xmr.data.files`). COCO's year is auto-detected. Raises ``ValueError`` for an unknown
    name; bad input follows :func:`xmr.data.errors.report`.
    """
    if name not in _READERS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    return _READERS[name](root, split, issues=issues)


def check_data_root(name: str, root: str | Path | ObjectPath | None) -> None:
    """Refuse, naming ``--data``, a root that dataset ``name``'s reader cannot read:
    Fashion-Gen in an object store (its HDF5 files are read in place). For options to call
    before anything runs; the reader refuses it too."""
    if name == "fashiongen" and root is not None:
        check_fashiongen_root(root)


def check_data_folder(name: str, root: str | Path | ObjectPath | None) -> None:
    """:func:`check_data_root`, and ``root`` is a folder that exists (None, the default
    dataset, passes): for a command's own ``--data``, checked before it writes anything or
    starts Ray. A job's steps may read a folder an earlier step writes, and options are built
    without reaching an object store, so options check :func:`check_data_root` only.

    Raises:
        FileNotFoundError: ``--data ROOT is not a folder``.
        ValueError: Fashion-Gen in an object store, or an object store that cannot be
            reached (naming ``--data``).
    """
    check_data_root(name, root)
    if root is None:
        return
    try:
        found = as_path(root).is_dir()
    except UnreachableStorage as exc:
        raise ValueError(f"--data {exc}") from None
    if not found:
        raise FileNotFoundError(f"--data {root} is not a folder")


def dataset_splits(name: str, root: str | Path | ObjectPath) -> list[str]:
    """The splits of dataset ``name`` at ``root``, sorted (the ODmAP gallery spans all of them).

    COCO and ToyWorld: every ``annotations/captions_{split}[year].json``; Flickr30k: the Karpathy
    splits; Fashion-Gen: ``train`` / ``validation`` where their file exists.
    """
    if name == "flickr30k":
        return ["test", "train", "val"]
    if name == "fashiongen":
        return fashiongen_splits(root)
    pattern = re.compile(r"captions_([a-z]+?)(?:\d{4})?\.json")
    found = {
        m.group(1)
        for p in (as_path(root) / "annotations").glob("captions_*.json")
        if (m := pattern.fullmatch(p.name))
    }
    return sorted(found)
