"""D′ on disk: the synthetic image/caption pairs that ``xmr synth`` writes, and their reader.

Layout of a D′ folder::

    data/part-00000.parquet ...  the pairs (ROW_SCHEMA, or BIAUG_ROW_SCHEMA), shards in plan order
    errors.parquet                every failed row, with its stage, reason and kind (ERROR_SCHEMA)
    manifest.json                 mode, config, its hash, counts (planned == written + errors)
    plan.parquet                  the planned rows (a rerun resumes without replanning)
    plan_retries/                 what reruns planned again after transient errors
    reasons.parquet               BiAug only: what a step left out and why

``image`` holds PNG bytes of the whole synthetic image; ``removed_boxes`` (``box`` for BiAug) are
the ``[x, y, w, h]`` pixel boxes that were filled.

The folder is a local path or an object store's (``s3://bucket/dprime``, a URI string or an
:class:`~xmr.storage.ObjectPath`): the reader takes either.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from xmr.data.error_kinds import with_kind
from xmr.data.errors import DataError
from xmr.data.images import decode_image
from xmr.storage import ObjectPath, StoragePath, filesystem_and_path, is_uri

ROW_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("image", pa.binary()),
        ("caption", pa.string()),
        ("source_image_id", pa.int64()),
        ("source_caption_id", pa.int64()),
        ("source_caption", pa.string()),
        ("removed_classes", pa.list_(pa.string())),
        ("kept_classes", pa.list_(pa.string())),
        ("removed_boxes", pa.list_(pa.list_(pa.float64()))),
        ("width", pa.int32()),
        ("height", pa.int32()),
        ("fill", pa.string()),
        ("caption_method", pa.string()),
    ]
)
BIAUG_ROW_SCHEMA = pa.schema(
    [
        ("key", pa.string()),  # "<group_id>/<role>"
        ("image", pa.binary()),  # PNG: the source image with the object inpainted
        ("caption", pa.string()),  # the source caption extended with this row's phrase
        ("source_image_id", pa.int64()),
        ("source_caption_id", pa.int64()),
        ("source_caption", pa.string()),
        ("object", pa.string()),  # the verified object, as the LLM proposed it
        ("category", pa.string()),  # color | shape | material | other
        ("phrase", pa.string()),  # the attributive phrase this image was inpainted with
        ("group_id", pa.string()),  # "<image_id>/<caption_id>/<object>/<category>": a pair
        ("role", pa.string()),  # positive | negative (the hard negative of the positive)
        ("box", pa.list_(pa.float64())),  # [x, y, w, h] pixels: the inpainted mask
        ("width", pa.int32()),
        ("height", pa.int32()),
        ("fill", pa.string()),  # sd | render
    ]
)
"""A BiAug D′ row (``xmr synth --mode biaug``): one image–caption pair of a hard-negative pair;
the positive and the negative of a group share ``group_id``, the mask and the diffusion seed."""
ERROR_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("stage", pa.string()),
        ("error_type", pa.string()),
        ("message", pa.string()),
        ("kind", pa.string()),  # transient | permanent (xmr.data.error_kinds)
    ]
)
"""A failed unit of a D′ build: its key, the stage that failed it, why, and whether a rerun
may recover it (``kind``)."""
DATA_DIR = "data"
MANIFEST = "manifest.json"
ERRORS = "errors.parquet"
ROW_SCHEMAS = {"removal": ROW_SCHEMA, "biaug": BIAUG_ROW_SCHEMA}
"""The row schema of each D′ mode (the manifest's ``mode``; none: ``removal``)."""


@dataclass(frozen=True)
class SyntheticPair:
    """One pair of D′: a synthetic image (PNG bytes) and its caption."""

    key: str
    image: bytes
    caption: str
    source_image_id: int
    source_caption_id: int
    source_caption: str
    removed_classes: tuple[str, ...]
    kept_classes: tuple[str, ...]
    fill: str
    caption_method: str

    def decode(self) -> Image.Image:
        """The synthetic image as an RGB PIL image."""
        return decode_image(self.image, f"D′ row {self.key}")


def _folder(root: str | StoragePath) -> StoragePath:
    """``root`` as a path: an :class:`~xmr.storage.ObjectPath` for a URI, else a ``Path``."""
    if isinstance(root, ObjectPath):
        return root
    return ObjectPath(str(root)) if is_uri(root) else Path(root)


def read_parquet(path: StoragePath, **options) -> pa.Table:
    """``pyarrow.parquet.read_table(path, **options)`` for a local path or an object store's."""
    filesystem, where = filesystem_and_path(path)
    return pq.read_table(where, filesystem=filesystem, **options)


def read_manifest(root: str | StoragePath) -> dict:
    """The manifest of a finished D′ build.

    Raises:
        DataError: ``root`` has no manifest (the build has not finished) or it is malformed.
    """
    path = _folder(root) / MANIFEST
    if not path.is_file():
        raise DataError(
            f"{root} is not a finished D′ folder: {MANIFEST} is missing "
            "(run `xmr synth --out` on it again to finish the build)"
        )
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: malformed JSON ({exc})") from exc


def synthetic_shards(root: str | StoragePath) -> list[StoragePath]:
    """The data shards of a finished D′ build, in key order (for ``ray.data.read_parquet``:
    ``str()`` of each)."""
    read_manifest(root)
    return sorted((_folder(root) / DATA_DIR).glob("part-*.parquet"), key=str)


def synthetic_mode(root: str | StoragePath) -> str:
    """How the finished D′ build at ``root`` was made: ``removal`` or ``biaug``.

    Raises:
        DataError: no manifest, or a ``mode`` this reader does not know.
    """
    mode = read_manifest(root).get("mode", "removal")
    if mode not in ROW_SCHEMAS:
        known = ", ".join(ROW_SCHEMAS)
        raise DataError(f"{_folder(root) / MANIFEST}: unknown D′ mode {mode!r} (known: {known})")
    return mode


def synthetic_table(root: str | StoragePath) -> pa.Table:
    """All pairs of a finished D′ build as one Arrow table (the schema of its mode:
    :data:`ROW_SCHEMA` or :data:`BIAUG_ROW_SCHEMA`)."""
    schema = ROW_SCHEMAS[synthetic_mode(root)]
    shards = synthetic_shards(root)
    if not shards:
        return schema.empty_table()
    try:
        return pa.concat_tables(read_parquet(p, schema=schema) for p in shards)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataError(f"{root}: unreadable D′ shard ({exc})") from exc


def iter_synthetic(root: str | StoragePath) -> Iterator[SyntheticPair]:
    """The pairs of a finished removal-mode D′ build, shard by shard (one shard in memory at a
    time). A BiAug D′ has other columns: read it with :func:`synthetic_table`."""
    if synthetic_mode(root) != "removal":
        raise DataError(f"{root} is a BiAug D′: read its rows with synthetic_table()")
    for shard in synthetic_shards(root):
        try:
            table = read_parquet(shard, schema=ROW_SCHEMA)
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataError(f"{shard}: unreadable D′ shard ({exc})") from exc
        for row in table.to_pylist():
            yield SyntheticPair(
                key=row["key"],
                image=row["image"],
                caption=row["caption"],
                source_image_id=row["source_image_id"],
                source_caption_id=row["source_caption_id"],
                source_caption=row["source_caption"],
                removed_classes=tuple(row["removed_classes"]),
                kept_classes=tuple(row["kept_classes"]),
                fill=row["fill"],
                caption_method=row["caption_method"],
            )


def read_synthetic(root: str | StoragePath) -> list[SyntheticPair]:
    """Every pair of a finished D′ build, in key order."""
    return list(iter_synthetic(root))


def read_synthetic_errors(root: str | StoragePath) -> pa.Table:
    """The failed rows of a finished D′ build (ERROR_SCHEMA)."""
    read_manifest(root)
    return read_error_table(_folder(root) / ERRORS)


def read_error_table(path: StoragePath) -> pa.Table:
    """An ERROR_SCHEMA Parquet file; one written before errors had a ``kind`` gets it from
    :func:`~xmr.data.error_kinds.error_kind`."""
    table = read_parquet(path)
    if "kind" not in table.column_names:
        rows = [with_kind(row) for row in table.to_pylist()]
        return pa.Table.from_pylist(rows, schema=ERROR_SCHEMA)
    return table.select(ERROR_SCHEMA.names).cast(ERROR_SCHEMA)
