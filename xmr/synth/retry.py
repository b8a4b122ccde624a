"""Asking again what failed transiently: a rerun into the same ``--out`` retries the transient
errors of the runs before it (:mod:`xmr.data.error_kinds`), and only those.

A build's failures live in two places, and each is retried where it lives:

- **In the plan** (``plan_errors.parquet``): a source unit whose planning failed, such as an
  image the detector ran out of memory on or a BiAug source example whose LLM call was rate
  limited. It is planned again, and what it yields is saved as a *plan retry*,
  ``plan_retries/NNNNN.parquet`` (the new plan units, the retried keys in its metadata) with
  ``NNNNN_errors.parquet`` (what failed again, or failed for good this time) and, for BiAug,
  ``NNNNN_reasons.parquet``. Files of a retry are written before its plan file, so a plan file
  implies the rest. The new units come after the plan's and are cut into shards of their own
  (:func:`segment_shards`): no committed shard changes.
- **In a committed shard** (``shard_errors/part-N.parquet``): a row whose fill or inpainting
  failed. It goes through the synthesis stages again, and the shard is rewritten with what it
  became (:func:`~xmr.synth.output.commit_shard` with ``rewrite``).

A row's output depends only on its key and the build's seed, so a recovered row is the row an
undisturbed build would have written; recovered units of the plan sit in later shards.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from xmr.data.error_kinds import transient_keys
from xmr.data.synthetic import read_error_table, read_parquet
from xmr.storage import StoragePath
from xmr.synth.output import (
    error_table,
    shard_errors,
    split_shards,
    write_table_atomic,
)

PLAN_RETRIES = "plan_retries"
"""The folder of the plan's retries in ``--out``."""


@dataclass(frozen=True)
class PlanRetry:
    """One saved retry of the plan's transient errors.

    Attributes:
        units: the plan units it added (the mode's plan schema: planned rows, BiAug groups).
        errors: what the retried keys failed with this time (ERROR_SCHEMA dicts).
        reasons: BiAug: what its steps dropped (REASON_SCHEMA dicts); removal: empty.
        retried: the keys of the errors it retried.
        metadata: the rest of its plan file's metadata (BiAug: ``statistics``).
    """

    units: pa.Table
    errors: list[dict]
    retried: list[str]
    reasons: list[dict] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass
class RetryCounts:
    """A run's retries: units retried, and those that are not errors any more."""

    retried: int = 0
    recovered: int = 0

    def add(self, retried: Sequence[str], still_failing: Sequence[str]) -> None:
        """Count ``retried`` keys, of which ``still_failing`` failed again."""
        self.retried += len(retried)
        self.recovered += len(set(retried) - set(still_failing))


def _retry_path(out: StoragePath, index: int, suffix: str = "") -> StoragePath:
    return out / PLAN_RETRIES / f"{index:05d}{suffix}.parquet"


def _retry_count(out: StoragePath) -> int:
    """How many plan retries ``out`` holds (their plan files, without reading them)."""
    count = 0
    while _retry_path(out, count + 1).is_file():
        count += 1
    return count


def saved_retries(out: StoragePath) -> list[PlanRetry]:
    """The plan retries saved in ``out``, in the order they were made."""
    retries = []
    for index in range(1, _retry_count(out) + 1):
        units = read_parquet(_retry_path(out, index))
        metadata = {k.decode(): v.decode() for k, v in (units.schema.metadata or {}).items()}
        reasons_path = _retry_path(out, index, "_reasons")
        retries.append(
            PlanRetry(
                units=units,
                errors=read_error_table(_retry_path(out, index, "_errors")).to_pylist(),
                retried=json.loads(metadata.pop("retried")),
                reasons=read_parquet(reasons_path).to_pylist() if reasons_path.is_file() else [],
                metadata=metadata,
            )
        )
    return retries


def save_retry(out: StoragePath, retry: PlanRetry, reason_schema: pa.Schema | None = None) -> None:
    """Save ``retry`` as the next plan retry of ``out``: its errors and (with
    ``reason_schema``) reasons first, its units last."""
    index = _retry_count(out) + 1
    write_table_atomic(error_table(retry.errors), _retry_path(out, index, "_errors"))
    if reason_schema is not None:
        reasons = pa.Table.from_pylist(retry.reasons, schema=reason_schema)
        write_table_atomic(reasons, _retry_path(out, index, "_reasons"))
    metadata = {**retry.metadata, "retried": json.dumps(list(retry.retried))}
    write_table_atomic(retry.units, _retry_path(out, index), metadata)


def apply_retry(errors: Sequence[dict], retried: Sequence[str], new: Sequence[dict]) -> list[dict]:
    """The plan's errors after a retry: those of ``retried`` keys replaced by ``new``."""
    asked = set(retried)
    return [e for e in errors if e["key"] not in asked] + list(new)


def plan_retry_keys(errors: Sequence[dict], retry: bool) -> list[str]:
    """The plan's transient error keys to plan again (none when ``retry`` is off)."""
    return transient_keys(errors) if retry else []


def segment_shards(segments: Sequence[Sequence[str]], rows_per_shard: int) -> list[list[str]]:
    """Shards of row keys: each segment (the plan, then each retry) cut on its own, in order."""
    return [shard for keys in segments for shard in split_shards(keys, rows_per_shard)]


def shard_retries(
    out: StoragePath, shards: Sequence[Sequence[str]], done: set[int], retry: bool
) -> dict[int, list[str]]:
    """Committed shard -> the keys of its transient errors, in plan order (empty when ``retry``
    is off)."""
    if not retry:
        return {}
    found = {}
    for index in sorted(done):
        keys = set(transient_keys(shard_errors(out, index)))
        if keys:
            found[index] = [k for k in shards[index] if k in keys]
    return found
