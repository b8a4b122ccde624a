"""Training batches: which rows of the training table make each micro-batch of each epoch.

Every epoch visits the whole table in a fresh seeded order (:class:`EpochPlan`), cut into
micro-batches of the same size; which worker trains which micro-batch is the loader's business
(:mod:`xmr.train.loader`). BiAug (biaug paper §3.3, §5.1) writes each synthetic positive with
its hard negative: the same image and caption but another attribute value. Put in the same
batch, each is the other's in-batch hard negative, so rows sharing a ``group_id`` form a group
(:func:`groups_of`; a pair is a group of two, every other row of D and D′ a group of one), an
epoch shuffles whole groups, and micro-batches are filled from them without splitting one
(:func:`batch_groups`). Plain Python and numpy: the Ray side lives in :mod:`xmr.train.loader`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

import numpy as np
import pyarrow as pa

GROUP_COLUMN = "group_id"
"""The column of the training table that links a positive to its hard negative ("": none)."""
WAITING_BATCHES = 4
"""How many batches' worth of rows may wait for a place before a batch goes out short."""

Row = TypeVar("Row")


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


def epoch_order(count: int, seed: int, epoch: int) -> np.ndarray:
    """``[count]`` int64: the order in which epoch ``epoch`` of a run seeded ``seed`` visits
    ``count`` groups (or rows)."""
    return np.random.default_rng([seed, epoch]).permutation(count)


class EpochPlan:
    """Which rows of the training table make each micro-batch of each epoch.

    Epoch ``e`` visits the groups in the order :func:`epoch_order` and fills micro-batches of
    ``batch_size`` rows from them with :func:`batch_groups`, so a group never straddles two
    micro-batches. Without groups (``groups=None``: every row a group of one) micro-batch ``k``
    is the slice ``[k·B, (k+1)·B)`` of the epoch's permutation of the rows, which is what
    groups of one give too, and the rows left over (fewer than ``B``) wait for the next epoch's
    shuffle. The same arguments give the same plan in every process.
    """

    def __init__(
        self, rows: int, batch_size: int, seed: int, groups: list[list[int]] | None = None
    ) -> None:
        self.rows, self.batch_size, self.seed, self.groups = rows, batch_size, seed, groups
        self._cached: tuple[int, list[np.ndarray]] = (-1, [])

    @classmethod
    def for_table(
        cls, table: pa.Table, batch_size: int, seed: int, grouped: bool, hard_negatives: bool
    ) -> EpochPlan:
        """The plan of a training table: by its ``group_id`` column when ``grouped`` (a BiAug
        D′; each row a group of its own when not ``hard_negatives``), by rows otherwise."""
        groups = None
        if grouped and hard_negatives:
            groups = groups_of(table.column(GROUP_COLUMN).to_pylist())
        return cls(table.num_rows, batch_size, seed, groups)

    def batches(self, epoch: int) -> list[np.ndarray]:
        """Epoch ``epoch``'s micro-batches, each an int64 array of row indices (``batch_size``
        of them, or one fewer where :func:`batch_groups` could not fill a place)."""
        if self._cached[0] != epoch:
            if self.groups is None:
                order = epoch_order(self.rows, self.seed, epoch)
                size = self.batch_size
                batches = [order[k * size : (k + 1) * size] for k in range(self.rows // size)]
            else:
                order = epoch_order(len(self.groups), self.seed, epoch)
                filled = batch_groups((self.groups[n] for n in order), self.batch_size)
                batches = [np.array(rows, np.int64) for rows in filled]
            self._cached = (epoch, batches)
        return self._cached[1]
