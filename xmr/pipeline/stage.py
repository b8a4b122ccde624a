"""A stage is a plain class that declares its resources and transforms a batch of rows.

Batches are ``dict[str, np.ndarray]`` (column name -> array of length B), the format Ray Data
passes to ``map_batches(batch_format="numpy")``. A stage is built cheaply on the driver (it is
pickled to the workers), loads heavy state in :meth:`Stage.setup` once per worker, and must never
raise on a bad row: it reports the failure in an ``error`` column instead, so that no row is lost.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

Batch = dict[str, np.ndarray]


def rows_to_batch(rows: Sequence[Mapping[str, object]]) -> Batch:
    """Row dicts (all with the same keys) -> a column batch of object arrays."""
    return {key: np.array([row[key] for row in rows], dtype=object) for key in rows[0]}


def batch_rows(batch: Batch) -> list[dict[str, object]]:
    """A column batch -> row dicts of plain Python values (the inverse of :func:`rows_to_batch`).

    >>> batch_rows({"key": np.array(["a", "b"]), "n": np.array([1, 2])})
    [{'key': 'a', 'n': 1}, {'key': 'b', 'n': 2}]
    """
    columns = list(batch)
    return [
        {c: v.item() if isinstance(v, np.generic) else v for c, v in zip(columns, row, strict=True)}
        for row in zip(*(batch[c] for c in columns), strict=True)
    ]


@dataclass(frozen=True)
class Resources:
    """Resources one worker of a stage needs: CPU cores and GPUs (fractions allowed for GPUs)."""

    cpus: float = 1.0
    gpus: float = 0.0


class Stage(ABC):
    """One batch transform of a pipeline."""

    #: Short name used in progress bars, logs and error records.
    name: str = "stage"

    @property
    def needs_actor(self) -> bool:
        """True when :meth:`setup` loads state worth keeping (a model): the stage then runs in
        long-lived actors. Stateless stages run as tasks on Ray's pooled, already-warm workers,
        which start in milliseconds instead of seconds."""
        return True

    def __init__(self, resources: Resources | None = None, batch_size: int = 64) -> None:
        self.resources = resources or Resources()
        self.batch_size = batch_size

    def setup(self) -> None:  # noqa: B027 - optional hook, most stages need nothing
        """Load heavy state (models, tokenizers) once per worker. Default: nothing."""

    def teardown(self) -> None:  # noqa: B027 - optional hook, most stages need nothing
        """Release what :meth:`setup` holds (a model's memory, a client's connections) when
        this worker is done with the stage: both executors call it. Default: nothing."""

    @abstractmethod
    def process(self, batch: Batch) -> Batch:
        """Transform one batch. Per-row failures go to an ``error`` column, never an exception."""

    def run_local(self, batch: Batch) -> Batch:
        """Set up (once) and process ``batch`` in this process, without Ray."""
        if not getattr(self, "_is_set_up", False):
            self.setup()
            self._is_set_up = True
        return self.process(batch)


def numbered_batches(rows: Sequence[Mapping[str, object]], size: int) -> list[Batch]:
    """``rows`` cut into column batches of ``size``, each with a ``row`` column (int ``[B]``,
    the rows' positions in ``rows``) that a stage passes through, so that outputs finished in
    any order go back in input order (:func:`in_row_order`)."""
    starts = range(0, len(rows), size)
    return [
        {"row": np.arange(s, min(s + size, len(rows))), **rows_to_batch(rows[s : s + size])}
        for s in starts
    ]


def in_row_order(parts: Sequence[Batch]) -> Batch:
    """Output batches joined and sorted back by their ``row`` column, which is dropped."""
    columns = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    order = np.argsort(columns.pop("row"), kind="stable")
    return {key: value[order] for key, value in columns.items()}


def run_local(rows: Sequence[Mapping[str, object]], stage: Stage) -> Batch:
    """Run ``stage`` over ``rows`` in this process, batch by batch; columns in input order.

    The in-process twin of :meth:`xmr.pipeline.ray_executor.StagePool.run` (same output), for work
    that already sits inside a worker.
    """
    if not rows:
        return {}
    stage.setup()
    return in_row_order([stage.process(b) for b in numbered_batches(rows, stage.batch_size)])
