"""Stages run the same in-process and in Ray actors; rows keep their order."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from xmr.pipeline import LocalExecutor, Resources, Stage
from xmr.pipeline.ray_executor import RayExecutor, StagePool


class SquareOrFail(Stage):
    """Squares ``x``; negative inputs fail per row (reported, not raised)."""

    name = "square"

    def setup(self) -> None:
        self.calls = 0

    def process(self, batch):
        self.calls += 1
        x = batch["x"]
        errors = np.array(["negative input" if v < 0 else "" for v in x], dtype=object)
        return {"row": batch["row"], "y": np.where(x < 0, 0, x * x), "error": errors}


def test_stage_runs_locally_without_ray() -> None:
    stage = SquareOrFail(Resources(cpus=1), batch_size=4)
    out = stage.run_local({"row": np.arange(3), "x": np.array([1, -2, 3])})
    assert out["y"].tolist() == [1, 0, 9]
    assert out["error"].tolist() == ["", "negative input", ""]
    stage.run_local({"row": np.arange(1), "x": np.array([2])})
    assert stage.calls == 2  # set up once, then reused


def test_a_stage_pool_on_ray_keeps_order_and_every_row(local_ray) -> None:
    values = list(range(-5, 95))
    pool = StagePool(SquareOrFail(batch_size=7), actors=2)
    try:
        out = pool.run([{"x": v} for v in values])
        assert out["y"].tolist() == [0 if v < 0 else v * v for v in values]
        assert sum(bool(e) for e in out["error"]) == 5
        assert pool.run([]) == {}
    finally:
        pool.close()


class Counted(Stage):
    """Adds ``add`` to ``x``; counts its setups, batches and teardowns in a file per process
    (``marks``, a folder) as ``setup``, ``batch <size>`` and ``teardown`` lines."""

    name = "counted"
    needs_actor = True

    def __init__(self, add: int, batch_size: int, marks: str) -> None:
        super().__init__(Resources(cpus=0.5), batch_size)
        self.add, self.marks = add, marks

    def _note(self, line: str) -> None:
        with (Path(self.marks) / f"{self.add}-{os.getpid()}").open("a") as log:
            log.write(line + "\n")

    def setup(self) -> None:
        self._note("setup")

    def teardown(self) -> None:
        self._note("teardown")

    def process(self, batch):
        self._note(f"batch {len(batch['x'])}")
        return {**batch, "x": np.asarray(batch["x"]) + self.add}


def _notes(marks: Path, add: int) -> list[str]:
    return [line for log in sorted(marks.glob(f"{add}-*")) for line in log.read_text().splitlines()]


def test_the_local_executor_recuts_batches_keeps_order_and_tears_down(tmp_path) -> None:
    executor = LocalExecutor(cpus=3)
    assert (executor.cpus, executor.gpus) == (3, 0)
    stages = [(Counted(1, 4, str(tmp_path)), 2), (Counted(10, 7, str(tmp_path)), 1)]
    out = list(executor.stream([{"x": i} for i in range(10)], stages, blocks=3))
    assert [len(b["x"]) for b in out] == [7, 3]
    assert np.concatenate([b["x"] for b in out]).tolist() == [i + 11 for i in range(10)]
    assert _notes(tmp_path, 1) == ["setup", "batch 4", "batch 4", "batch 2", "teardown"]
    assert _notes(tmp_path, 10) == ["setup", "batch 7", "batch 3", "teardown"]
    assert list(executor.stream([], stages, blocks=1)) == []
    with pytest.raises(ValueError, match="needs the Ray executor"):
        next(executor.transform([{"x": 1}], lambda ds: ds, blocks=1))


@pytest.mark.parametrize("where", ["local", "ray"])
def test_an_executors_pool_keeps_its_stage_warm_across_runs(where, request, tmp_path) -> None:
    """``Executor.pool``: the same stage, set up once, run twice, in order, every row kept (the
    per-row errors included); closing tears it down. In this process or in Ray actors."""
    if where == "ray":
        request.getfixturevalue("local_ray")
    executor = LocalExecutor() if where == "local" else RayExecutor(progress=False)
    pool = executor.pool(SquareOrFail(batch_size=4), actors=1)
    try:
        for values in (list(range(-2, 9)), [5, -1]):
            out = pool.run([{"x": v} for v in values])
            assert out["y"].tolist() == [0 if v < 0 else v * v for v in values]
            assert [bool(e) for e in out["error"]] == [v < 0 for v in values]
        assert pool.run([]) == {} and pool.size == 1 and len(pool.setup_s) == 1
    finally:
        pool.close()
    counted = LocalExecutor().pool(Counted(1, 3, str(tmp_path)))
    counted.run([{"x": i} for i in range(4)])
    counted.run([{"x": 0}])
    counted.close()
    assert _notes(tmp_path, 1) == ["setup", "batch 3", "batch 1", "batch 1", "teardown"]


def test_ray_data_actors_tear_their_stage_down(local_ray, tmp_path) -> None:
    executor = RayExecutor(progress=False)
    stages = [(Counted(1, 4, str(tmp_path)), 1)]
    out = list(executor.stream([{"x": i} for i in range(10)], stages, blocks=2))
    assert np.concatenate([b["x"] for b in out]).tolist() == [i + 1 for i in range(10)]
    deadline = time.monotonic() + 60
    while "teardown" not in _notes(tmp_path, 1) and time.monotonic() < deadline:
        time.sleep(0.2)  # the pool's actors end when the stream is done
    assert _notes(tmp_path, 1).count("setup") == _notes(tmp_path, 1).count("teardown") == 1


class Marked(Stage):
    """Passes ``x`` through with its actor's process id; its setup leaves a file named after
    that process in ``marks`` (a folder)."""

    name = "marked"

    def __init__(self, batch_size: int, marks: str = "", fail: str = "") -> None:
        super().__init__(Resources(cpus=0.5), batch_size)
        self.marks, self.fail = marks, fail

    def setup(self) -> None:
        if self.fail:
            raise RuntimeError(self.fail)
        (Path(self.marks) / str(os.getpid())).touch()

    def process(self, batch):
        return {"row": batch["row"], "x": batch["x"], "pid": np.full(len(batch["x"]), os.getpid())}


@pytest.mark.slow
def test_a_stage_pool_is_set_up_before_its_rows_come_and_grows(local_ray, tmp_path) -> None:
    pool = StagePool(Marked(batch_size=5, marks=str(tmp_path)), actors=1)
    try:
        deadline = time.monotonic() + 120
        while not any(tmp_path.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.2)  # the driver's own work (reading, planning) would go here
        ready = {int(p.name) for p in tmp_path.iterdir()}
        assert len(ready) == 1  # the actor was set up before any row was asked for
        out = pool.run([{"x": i} for i in range(23)])
        assert out["x"].tolist() == list(range(23))
        assert set(out["pid"].tolist()) == ready  # ... and it did the work
        assert len(pool.setup_s) == 1

        pool.grow(2)
        assert pool.size == 2
        out = pool.run([{"x": i} for i in range(200)])
        assert out["x"].tolist() == list(range(200))  # input order, whichever actor did it
    finally:
        pool.close()


@pytest.mark.slow
def test_a_stage_pool_whose_setup_fails_says_why(local_ray) -> None:
    pool = StagePool(Marked(batch_size=5, fail="no weights at /models/x.pt"), actors=1)
    try:
        with pytest.raises(Exception, match=r"no weights at /models/x\.pt"):
            pool.run([{"x": 1}])
    finally:
        pool.close()
