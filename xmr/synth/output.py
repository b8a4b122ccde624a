"""Writing D′: shards committed atomically, resume checks, errors and the manifest.

Planned rows are cut, in plan order, into shards of ``rows_per_shard``. A shard is committed by
writing its failed rows to ``shard_errors/part-N.parquet`` and then its pairs to
``data/part-N.parquet``, each through a temporary file and a rename: a shard's data file exists
only when the whole shard is on disk, so a rerun redoes exactly the shards without one. In an
object store (``--out s3://…``) each file is one upload instead, which appears whole or not at
all. The format itself (schemas, reader) lives in :mod:`xmr.data.synthetic`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from xmr.data.error_kinds import with_kind
from xmr.data.errors import DataError
from xmr.data.synthetic import (
    DATA_DIR,
    ERROR_SCHEMA,
    ERRORS,
    MANIFEST,
    ROW_SCHEMA,
    read_error_table,
    read_parquet,
)
from xmr.pipeline.stage import Batch
from xmr.storage import (
    StoragePath,
    check_bucket,
    filesystem_and_path,
    write_atomic,
)

PLAN = "plan.parquet"
PLAN_ERRORS = "plan_errors.parquet"
SHARD_ERRORS_DIR = "shard_errors"
REASONS = "reasons.parquet"
PLAN_REASONS = "plan_reasons.parquet"
LLM_CACHE = "llm_cache"
_OURS = {
    DATA_DIR, SHARD_ERRORS_DIR, PLAN, PLAN_ERRORS, ERRORS, MANIFEST, REASONS, PLAN_REASONS,
    LLM_CACHE, "plan_retries",
    "samples.png",
}  # fmt: skip


def write_table_atomic(
    table: pa.Table, path: StoragePath, metadata: dict[str, str] | None = None
) -> None:
    """Write a Parquet file that is never seen half-written (:func:`~xmr.storage.write_atomic`
    of the finished file's bytes)."""
    if metadata:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
    buffer = pa.BufferOutputStream()
    pq.write_table(table, buffer, row_group_size=64)
    write_atomic(path, buffer.getvalue().to_pybytes())


def write_json_atomic(data: dict, path: StoragePath) -> None:
    """Write JSON that is never seen half-written (:func:`~xmr.storage.write_atomic`)."""
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def check_out_dir(out: StoragePath) -> None:
    """Refuse an output folder that holds anything but an xmr synth build (in an object store:
    also one whose bucket does not exist).

    Raises:
        DataError: ``out`` is a file, or a non-empty folder with files of its own, or its
            bucket does not exist or cannot be reached.
    """
    check_bucket(out, "--out")
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out} is a file, not a folder")
    if out.is_dir():
        foreign = sorted(
            p.name for p in out.iterdir() if p.name not in _OURS and not p.name.startswith(".")
        )
        if foreign:
            raise DataError(
                f"--out {out} is not empty and is not an xmr synth output (it holds "
                f"{', '.join(foreign[:5])}); choose a new or empty folder"
            )


def error_record(batch: Batch, i: int) -> dict:
    """Row ``i`` of a batch, which a stage failed, as an ERROR_SCHEMA dict (with its kind)."""
    return with_kind(
        {
            "key": str(batch["key"][i]),
            "stage": str(batch["error_stage"][i]),
            "error_type": str(batch["error_type"][i]),
            "message": str(batch["error"][i]),
        }
    )


def error_table(errors: Iterable[dict]) -> pa.Table:
    """``{key, stage, error_type, message[, kind]}`` dicts as an ERROR_SCHEMA table (a missing
    ``kind`` is classified, :func:`~xmr.data.error_kinds.error_kind`)."""
    return pa.Table.from_pylist([with_kind(e) for e in errors], schema=ERROR_SCHEMA)


def shard_path(out: StoragePath, index: int) -> StoragePath:
    return out / DATA_DIR / f"part-{index:05d}.parquet"


def shard_errors_path(out: StoragePath, index: int) -> StoragePath:
    return out / SHARD_ERRORS_DIR / f"part-{index:05d}.parquet"


def split_shards(keys: Sequence[str], rows_per_shard: int) -> list[list[str]]:
    """Consecutive chunks of ``rows_per_shard`` keys (the last may be shorter)."""
    return [list(keys[i : i + rows_per_shard]) for i in range(0, len(keys), rows_per_shard)]


def finished_shards(out: StoragePath, shards: Sequence[Sequence[str]]) -> set[int]:
    """Indices of shards already committed, each checked against the plan.

    Raises:
        DataError: a committed shard holds other keys than the plan gives it (the folder was
            written by another plan), or a shard beyond the plan exists.
    """
    done = set()
    for index, keys in enumerate(shards):
        path = shard_path(out, index)
        if not path.is_file():
            continue
        found = read_parquet(path, columns=["key"])["key"].to_pylist()
        errors_path = shard_errors_path(out, index)
        if errors_path.is_file():
            written = set(found)
            found += [
                key
                for key in read_parquet(errors_path, columns=["key"])["key"].to_pylist()
                if key not in written  # a retried row recovered before its error was cleared
            ]
        if sorted(found) != sorted(keys):
            raise DataError(
                f"{path} does not hold the rows this plan gives shard {index}; "
                "the folder was written by another build: use a new --out"
            )
        done.add(index)
    extra = (
        sorted(
            p
            for p in (out / DATA_DIR).glob("part-*.parquet")
            if int(p.stem.split("-")[1]) >= len(shards)
        )
        if (out / DATA_DIR).is_dir()
        else []
    )
    if extra:
        raise DataError(f"{extra[0]} is beyond this plan's {len(shards)} shards: use a new --out")
    return done


def commit_shard(
    out: StoragePath,
    index: int,
    rows: list[dict],
    errors: list[dict],
    schema: pa.Schema = ROW_SCHEMA,
    *,
    rewrite: bool = False,
) -> None:
    """Write one shard: its errors, then its pairs (``schema`` dicts, in plan order).

    ``rewrite``: the shard is on disk and some of its failed rows were retried. Its pairs go
    first, then its errors: a run stopped in between leaves a recovered row both written and
    listed as an error, which the readers resolve for the row (:func:`finished_shards`,
    :func:`shard_errors`), never a row in neither file.
    """
    data = pa.Table.from_pylist(rows, schema=schema)
    if rewrite:
        write_table_atomic(data, shard_path(out, index))
    write_table_atomic(error_table(errors), shard_errors_path(out, index))
    if not rewrite:
        write_table_atomic(data, shard_path(out, index))


def shard_errors(out: StoragePath, index: int) -> list[dict]:
    """The failed rows of committed shard ``index`` (less any that a retry wrote since)."""
    errors = read_error_table(shard_errors_path(out, index)).to_pylist()
    if not errors:
        return errors
    written = set(read_parquet(shard_path(out, index), columns=["key"])["key"].to_pylist())
    return [e for e in errors if e["key"] not in written]


def read_shard(out: StoragePath, index: int, schema: pa.Schema) -> list[dict]:
    """The pairs of committed shard ``index`` as ``schema`` dicts, in plan order."""
    return read_parquet(shard_path(out, index), schema=schema).to_pylist()


def merge_errors(out: StoragePath, plan_errors: Sequence[dict], shard_count: int) -> pa.Table:
    """``errors.parquet``: the plan's errors (retries applied) then every shard's, in plan
    order."""
    errors = list(plan_errors)
    for index in range(shard_count):
        errors += shard_errors(out, index)
    merged = error_table(errors)
    write_table_atomic(merged, out / ERRORS)
    return merged


def count_written(out: StoragePath, shard_count: int) -> int:
    """Pairs across all committed shards (read from the Parquet footers only)."""
    total = 0
    for index in range(shard_count):
        filesystem, where = filesystem_and_path(shard_path(out, index))
        total += pq.read_metadata(where, filesystem=filesystem).num_rows
    return total
