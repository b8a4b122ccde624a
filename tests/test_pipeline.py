"""Stages run the same in-process and in Ray actors; rows keep their order."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from xmr.pipeline import Resources, Stage
from xmr.pipeline.ray_executor import StagePool


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
