"""Hard-negative batching: a BiAug pair (two rows sharing a ``group_id``) trains in one batch.

BiAug (biaug paper §3.3, §5.1) writes each synthetic positive with its hard negative: the same
image and caption but another attribute value. Put in the same batch, each is the other's
in-batch hard negative. The training table is packed into one row per *group*
(:func:`pack_groups`): a pair is a group of two, every other row of D and D′ a group of one.
Ray Data shards and shuffles those packed rows, so a group always goes whole to one worker;
each worker unpacks its groups (:func:`unpack_groups`) and fills batches of ``batch_size`` rows
without splitting a group (:func:`batch_groups`). Every step is plain Python over Arrow and
lists: the Ray side lives in :mod:`xmr.train.loop`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

GROUP_COLUMN = "group_id"
"""The column of the training table that links a positive to its hard negative ("": none)."""
CHUNK_GROUPS = 1024
"""Groups per chunk of the packed table: each chunk's column is one array, whose binary data
(PNG bytes) must stay under 2 GiB (about 1 MB per row)."""
WAITING_BATCHES = 4
"""How many batches' worth of rows may wait for a place before a batch goes out short."""

Row = TypeVar("Row")
Item = TypeVar("Item")
Out = TypeVar("Out")


def groups_of(group_ids: Sequence[str], hard_negatives: bool = True) -> list[list[int]]:
    """The row indices of each group, groups in the order of their first row.

    Rows that share a non-empty group id form one group (in row order); any other row is a
    group of its own, and so is every row when ``hard_negatives`` is False (the paper's
    ablation: the same rows, shuffled freely).
    """
    groups: list[list[int]] = []
    members: dict[str, list[int]] = {}
    for row, group_id in enumerate(group_ids):
        if hard_negatives and group_id in members:
            members[group_id].append(row)
            continue
        groups.append([row])
        if hard_negatives and group_id:
            members[group_id] = groups[-1]
    return groups


def pack_groups(table: pa.Table, seed: int, hard_negatives: bool = True) -> pa.Table:
    """``table`` with one row per group (:func:`groups_of` its ``group_id`` column): each
    column becomes a list column of the same name holding the group's values, in row order.

    The groups come in a random order drawn from ``seed``, which mixes D and D′ before Ray
    Data cuts the table into per-worker shards. Returns a table of one row per group, chunked
    by :data:`CHUNK_GROUPS` groups.
    """
    groups = groups_of(table.column(GROUP_COLUMN).to_pylist(), hard_negatives)
    groups = [groups[n] for n in np.random.default_rng(seed).permutation(len(groups))]
    schema = pa.schema([pa.field(f.name, pa.list_(f.type)) for f in table.schema])
    chunks = []
    for start in range(0, len(groups), CHUNK_GROUPS):
        part = groups[start : start + CHUNK_GROUPS]
        rows = table.take(pa.array([row for group in part for row in group], pa.int64()))
        offsets = pa.array(np.cumsum([0] + [len(group) for group in part]), pa.int32())
        columns = [
            pa.ListArray.from_arrays(offsets, rows.column(name).combine_chunks())
            for name in table.column_names
        ]
        chunks.append(pa.Table.from_arrays(columns, schema=schema))
    return pa.concat_tables(chunks) if chunks else schema.empty_table()


def unpack_groups(packed: pa.Table) -> Iterator[list[dict[str, Any]]]:
    """The groups of a chunk of :func:`pack_groups` rows, each a list of row dicts."""
    for group in packed.to_pylist():
        columns = list(group)
        size = len(group[columns[0]])
        yield [{name: group[name][n] for name in columns} for n in range(size)]


def batch_groups(groups: Iterable[Sequence[Row]], batch_size: int) -> Iterator[list[Row]]:
    """Batches of ``batch_size`` rows filled from ``groups`` in order, never splitting a group.

    A group larger than what is left of the batch swaps in for the batch's latest group of the
    size that makes the batch exactly full (a pair for a single row when one slot is left);
    without one it waits, in arrival order, for a later batch. A batch goes out one row short
    only when no single row is at hand: the waiting groups hold :data:`WAITING_BATCHES`
    batches' worth of rows (an odd batch size and a long run of pairs), or the groups have run
    out. Fewer than ``batch_size`` rows left at the end are dropped, as ``drop_last`` does.
    Deterministic: the same groups give the same batches.

    Raises:
        ValueError: a group is larger than ``batch_size``.
    """
    batch: list[Sequence[Row]] = []
    waiting: deque[Sequence[Row]] = deque()
    filled = waiting_rows = 0

    def place(group: Sequence[Row]) -> None:
        nonlocal filled, waiting_rows
        gap = batch_size - filled
        if len(group) <= gap:
            batch.append(group)
            filled += len(group)
            return
        # the batch's latest group whose place the larger one fills exactly
        sizes = [len(member) for member in batch] if gap > 0 else []
        swap = next((n for n in reversed(range(len(sizes))) if sizes[n] + gap == len(group)), None)
        if swap is None:
            waiting.append(group)
            waiting_rows += len(group)
            return
        out = batch.pop(swap)
        waiting.append(out)
        waiting_rows += len(out)
        batch.append(group)
        filled = batch_size

    def emit() -> list[Row]:
        """The batch's rows; the next batch starts with the waiting groups that fit."""
        nonlocal filled, waiting_rows
        rows = [row for member in batch for row in member]
        batch.clear()
        filled = 0
        for _ in range(len(waiting)):
            again = waiting.popleft()
            waiting_rows -= len(again)
            place(again)
        return rows

    for group in groups:
        if len(group) > batch_size:
            raise ValueError(
                f"a group of {len(group)} rows does not fit in a batch of {batch_size} per worker"
            )
        place(group)
        while filled == batch_size or waiting_rows >= WAITING_BATCHES * batch_size:
            yield emit()
    while filled + waiting_rows >= batch_size:  # the waiting groups still make whole batches
        yield emit()


def rows_to_columns(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Row dicts -> ``{column: values}`` (the shape :func:`xmr.train.data.collate` takes)."""
    return {name: [row[name] for row in rows] for name in rows[0]} if rows else {}


def pairs_together(group_ids: Sequence[str]) -> tuple[int, int]:
    """In one batch: ``(rows of a group, those whose whole group is in the batch)``.

    Rows with an empty group id belong to no pair and are not counted; a batch holding both
    rows of a pair counts ``(2, 2)``, one holding a lone row of a pair ``(1, 0)``.
    """
    counts: dict[str, int] = {}
    for group_id in group_ids:
        if group_id:
            counts[group_id] = counts.get(group_id, 0) + 1
    grouped = sum(counts.values())
    return grouped, sum(n for n in counts.values() if n > 1)


def collate_ahead(items: Iterable[Item], collate: Callable[[Item], Out]) -> Iterator[Out]:
    """``collate(item)`` for each item, the next one computed in a background thread while
    the caller works on the current one (decoding overlaps the training step)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="xmr-collate") as pool:
        pending: Future[Out] | None = None
        for item in items:
            ahead = pool.submit(collate, item)
            if pending is not None:
                yield pending.result()
            pending = ahead
        if pending is not None:
            yield pending.result()
