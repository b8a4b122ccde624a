"""A removal D′'s plan on disk: the planned rows (``plan.parquet``) and the errors of the images
that yield none (``plan_errors.parquet``), and a finished row as a D′ pair."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pyarrow as pa

from xmr.data.synthetic import read_error_table, read_parquet
from xmr.pipeline.stage import Batch
from xmr.storage import StoragePath
from xmr.synth.output import PLAN, PLAN_ERRORS, write_table_atomic
from xmr.synth.removal.rows import PlannedRow

PLAN_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("source_image_id", pa.int64()),
        ("source_caption_id", pa.int64()),
        ("source_caption", pa.string()),
        ("phrases", pa.string()),
        ("path", pa.string()),
        ("width", pa.int32()),
        ("height", pa.int32()),
        ("removed", pa.string()),
        ("kept", pa.string()),
        ("boxes", pa.string()),
        ("rewritten", pa.string()),
    ]
)


def plan_table(rows: Sequence[PlannedRow]) -> pa.Table:
    """Planned rows as a PLAN_SCHEMA table."""
    return pa.Table.from_pylist([r.to_dict() for r in rows], schema=PLAN_SCHEMA)


def pair_record(batch: Batch, i: int, fill: str, caption_method: str) -> dict:
    """Row ``i`` of a finished batch as a ROW_SCHEMA dict (one pair of D′)."""
    return {
        "key": str(batch["key"][i]),
        "image": batch["image"][i],
        "caption": str(batch["caption"][i]),
        "source_image_id": int(batch["source_image_id"][i]),
        "source_caption_id": int(batch["source_caption_id"][i]),
        "source_caption": str(batch["source_caption"][i]),
        "removed_classes": json.loads(batch["removed"][i]),
        "kept_classes": json.loads(batch["kept"][i]),
        "removed_boxes": [list(b) for b in json.loads(batch["boxes"][i])],
        "width": int(batch["width"][i]),
        "height": int(batch["height"][i]),
        "fill": fill,
        "caption_method": caption_method,
    }


def read_plan(out: StoragePath) -> tuple[list[PlannedRow], pa.Table, dict[str, str]] | None:
    """The saved plan (rows, plan-stage errors, metadata), or None when there is none yet."""
    path = out / PLAN
    if not path.is_file():
        return None
    table = read_parquet(path)
    metadata = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    rows = [PlannedRow.from_dict(r) for r in table.to_pylist()]
    errors = read_error_table(out / PLAN_ERRORS)
    return rows, errors, metadata


def save_plan(
    out: StoragePath, rows: Sequence[PlannedRow], errors: pa.Table, metadata: dict[str, str]
) -> None:
    """Save the plan; its errors first, so that a plan file implies its errors file."""
    write_table_atomic(errors, out / PLAN_ERRORS)
    write_table_atomic(plan_table(rows), out / PLAN, metadata)
