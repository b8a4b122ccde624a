"""Stages run the same in-process and as Ray Data actor pools; rows keep their order."""

from __future__ import annotations

import numpy as np

from xmr.pipeline import Resources, Stage
from xmr.pipeline.ray_executor import run_stage


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


def test_run_stage_on_ray_keeps_order_and_every_row(local_ray) -> None:
    values = list(range(-5, 95))
    out = run_stage([{"x": v} for v in values], SquareOrFail(batch_size=7), actors=2)
    assert out["y"].tolist() == [0 if v < 0 else v * v for v in values]
    assert sum(bool(e) for e in out["error"]) == 5
    assert run_stage([], SquareOrFail(), actors=1) == {}
