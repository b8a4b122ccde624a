"""Read any supported dataset by name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from xmr.data.coco import read_coco
from xmr.data.errors import DataIssue
from xmr.data.flickr30k import read_flickr30k
from xmr.data.records import ImageRecord
from xmr.data.toyworld_reader import read_toyworld

DATASETS = ("toyworld", "coco", "flickr30k")

_READERS: dict[str, Callable[..., list[ImageRecord]]] = {
    "toyworld": read_toyworld,
    "coco": read_coco,
    "flickr30k": read_flickr30k,
}


def read_dataset(
    name: str, root: str | Path, split: str, *, issues: list[DataIssue] | None = None
) -> list[ImageRecord]:
    """Read ``split`` of dataset ``name`` (one of :data:`DATASETS`) from ``root``.

    COCO's year is auto-detected. Raises ``ValueError`` for an unknown name; bad input follows
    :func:`xmr.data.errors.report`.
    """
    if name not in _READERS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    return _READERS[name](root, split, issues=issues)
