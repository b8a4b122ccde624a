"""What runs a list of stages over rows: the :class:`Executor` protocol and
:class:`LocalExecutor`, which runs them in this process.

The Ray Data executor (:class:`~xmr.pipeline.ray_executor.RayExecutor`) has the same shape; a
command or job chooses one and hands it to the code that maps stages (a D′ build,
:mod:`xmr.synth.runner`), which never picks one itself.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from xmr.pipeline.stage import Batch, Stage, in_row_order, numbered_batches, rows_to_batch


class Pool(Protocol):
    """A stage set up ahead of its rows and kept warm across runs (an evaluation's encoder
    between epochs): made before the rows exist, it starts while the caller prepares them."""

    wait_s: float
    """Seconds the last :meth:`run` waited for the stage to be ready."""
    setup_s: dict[int, float]
    """Seconds each worker that has been ready took to set the stage up, by worker."""

    @property
    def size(self) -> int:
        """Workers in the pool (started or starting)."""
        ...

    def grow(self, actors: int) -> None:
        """Start more workers until the pool has ``actors`` (where it can run more than one)."""
        ...

    def run(self, rows: list[dict], *, desc: str | None = None) -> Batch:
        """The stage's output columns for ``rows``, in input order (``{}`` for no rows); each
        row gets a ``row`` column the stage passes through. ``desc``: show progress under
        that name."""
        ...

    def close(self) -> None:
        """Tear the stage down and end the workers."""
        ...


class Executor(Protocol):
    """Runs stages over rows: a list of them streamed (:meth:`stream`), or one kept warm for
    repeated runs (:meth:`pool`). Rows come back in input order."""

    @property
    def cpus(self) -> int:
        """CPU cores the executor has now."""
        ...

    @property
    def gpus(self) -> int:
        """GPUs the executor has now (0 without)."""
        ...

    def stream(
        self, rows: list[dict], stages: Sequence[tuple[Stage, int]], *, blocks: int
    ) -> Iterator[Batch]:
        """Run ``stages`` (each with its number of parallel workers) in order over ``rows``
        (cut into ``blocks`` blocks) and yield the output batches as they finish."""
        ...

    def pool(self, stage: Stage, actors: int = 1) -> Pool:
        """``stage`` set up in ``actors`` workers from now on (:class:`Pool`)."""
        ...

    def transform(
        self, rows: list[dict], transform: Callable[[Any], Any], *, blocks: int
    ) -> Iterator[Batch]:
        """Apply a ready-made Ray Data transform (a ``ray.data.llm`` processor) to ``rows``."""
        ...


def batch_length(batch: Batch) -> int:
    """Rows in ``batch`` (0 for a batch without columns)."""
    return len(next(iter(batch.values()))) if batch else 0


def rebatched(batches: Iterable[Batch], size: int) -> Iterator[Batch]:
    """``batches`` cut and joined into batches of ``size`` rows (the last may be shorter),
    rows in order; empty batches are dropped."""
    pending: list[Batch] = []
    count = 0
    for batch in batches:
        if not batch_length(batch):
            continue
        pending.append(batch)
        count += batch_length(batch)
        while count >= size:
            joined = {key: np.concatenate([p[key] for p in pending]) for key in pending[0]}
            yield {key: value[:size] for key, value in joined.items()}
            rest = {key: value[size:] for key, value in joined.items()}
            count -= size
            pending = [rest] if count else []
    if pending:
        yield {key: np.concatenate([p[key] for p in pending]) for key in pending[0]}


class LocalExecutor:
    """Runs the stages in this process, one after another, batch by batch: each stage is set
    up once, processes batches of its ``batch_size`` and is torn down when its input is done.
    Worker counts are ignored. For tests, small builds and work that already sits inside a
    worker; Ray is never started.
    """

    def __init__(self, cpus: int | None = None, gpus: int = 0) -> None:
        """``cpus``: what :attr:`cpus` reports (default: this machine's cores); ``gpus``: what
        :attr:`gpus` reports, so that stages placed on a GPU get ``cuda``."""
        self._cpus = cpus or os.cpu_count() or 1
        self._gpus = gpus

    @property
    def cpus(self) -> int:
        return self._cpus

    @property
    def gpus(self) -> int:
        return self._gpus

    def stream(
        self, rows: list[dict], stages: Sequence[tuple[Stage, int]], *, blocks: int = 1
    ) -> Iterator[Batch]:
        """Run ``stages`` over ``rows`` here; ``blocks`` and the worker counts are ignored."""
        if not rows:
            return
        batches: Iterable[Batch] = [rows_to_batch(rows)]
        for stage, _ in stages:
            batches = _run_stage(stage, batches)
        yield from batches

    def pool(self, stage: Stage, actors: int = 1) -> LocalPool:
        """``stage`` in this process (:class:`LocalPool`); ``actors`` is ignored."""
        return LocalPool(stage)

    def transform(
        self, rows: list[dict], transform: Callable[[Any], Any], *, blocks: int
    ) -> Iterator[Batch]:
        """Not available here: a Ray Data transform needs Ray Data.

        Raises:
            ValueError: always.
        """
        raise ValueError("a Ray Data transform (--llm vllm) needs the Ray executor")


class LocalPool:
    """A :class:`Pool` of one: the stage in this process, set up on the first :meth:`run` and
    kept until :meth:`close`."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self.wait_s = 0.0
        self.setup_s: dict[int, float] = {}
        self._set_up = False

    @property
    def size(self) -> int:
        return 1

    def grow(self, actors: int) -> None:
        """Nothing: this process is the one worker."""

    def run(self, rows: list[dict], *, desc: str | None = None) -> Batch:
        """The stage over ``rows`` here, batch by batch; ``desc`` is not shown."""
        if not rows:
            return {}
        if not self._set_up:
            start = time.perf_counter()
            self.stage.setup()
            self._set_up, self.setup_s[0] = True, time.perf_counter() - start
            self.wait_s = self.setup_s[0]
        else:
            self.wait_s = 0.0
        batches = numbered_batches(rows, self.stage.batch_size)
        return in_row_order([self.stage.process(batch) for batch in batches])

    def close(self) -> None:
        """Tear the stage down if it was set up."""
        if self._set_up:
            self.stage.teardown()
            self._set_up = False


def _run_stage(stage: Stage, batches: Iterable[Batch]) -> Iterator[Batch]:
    """``stage`` over ``batches`` re-cut to its batch size: set up on the first batch, torn
    down after the last."""
    set_up = False
    try:
        for batch in rebatched(batches, stage.batch_size):
            if not set_up:
                stage.setup()
                set_up = True
            yield stage.process(batch)
    finally:
        if set_up:
            stage.teardown()
