"""One training epoch as a plain function (xmr.train.epoch): it learns without Ray, and its
throughput leaves out the wait for the first batch and the loader's head start."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pyarrow as pa
import pytest
import torch

from xmr.data import read_dataset
from xmr.models import Corpus, create_model
from xmr.models.batch import TrainBatch
from xmr.models.losses import LossConfig
from xmr.train.config import OptimConfig
from xmr.train.data import collate, training_data
from xmr.train.epoch import steady_rate, train_one_epoch
from xmr.train.optim import make_optimizer, make_scheduler
from xmr.train.precision import grad_scaler

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def table(small_toyworld) -> pa.Table:
    return training_data(read_dataset("toyworld", small_toyworld, "train")).table


def _setup(table: pa.Table, lr: float = 1e-3):
    model = create_model(
        "clip", arch="xmr-tiny", seed=0, corpus=Corpus(table["caption"].to_pylist())
    )
    objective = model.objective(LossConfig(), seed=0)
    objective.train()
    optim = OptimConfig("adam", lr)
    optimizer = make_optimizer(objective.parameters(), optim)
    scheduler = make_scheduler(optimizer, optim, steps_per_epoch=10, total_steps=100)
    return model, objective, optimizer, scheduler, grad_scaler("fp32", CPU)


def _batches(table: pa.Table, model, size: int, count: int) -> list[TrainBatch]:
    return [collate(table.slice(k * size, size).to_pydict(), model, seed=0) for k in range(count)]


def test_the_epoch_module_imports_no_ray() -> None:
    code = "import sys, xmr.train.epoch; print(any(m.split('.')[0] == 'ray' for m in sys.modules))"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "False"


@pytest.mark.slow
def test_the_epoch_function_learns_without_ray(table) -> None:
    model, objective, optimizer, scheduler, scaler = _setup(table)
    batches = _batches(table, model, size=32, count=4)
    steps: list[int] = []
    first = train_one_epoch(
        objective, optimizer, scheduler, scaler, batches, device=CPU,
        on_step=lambda: steps.append(1),
    )  # fmt: skip
    for _ in range(4):
        last = train_one_epoch(objective, optimizer, scheduler, scaler, batches, device=CPU)
    assert first.steps == last.steps == len(steps) == 4 and first.samples == 4 * 32
    assert scheduler.last_epoch == 5 * 4  # the scheduler stepped once per optimiser step
    assert last.losses["loss"] < first.losses["loss"]  # it learns (by how much varies)
    assert first.seconds > 0 and first.steady_samples_per_s > 0


def test_accumulation_steps_over_groups_of_micro_batches(table) -> None:
    model, objective, optimizer, scheduler, scaler = _setup(table)
    batches = _batches(table, model, size=16, count=5)
    result = train_one_epoch(
        objective, optimizer, scheduler, scaler, batches, device=CPU, accum_steps=2
    )
    # 5 micro-batches make 2 steps of 2; the fifth, alone, is dropped
    assert result.steps == 2 and result.samples == 64 and scheduler.last_epoch == 2


class _SlowStartLoader:
    """Batches as a loader hands them over, on a fake clock (on which the steps themselves take
    no time): ``warmup`` seconds before the first, then ``backlog`` batches decoded ahead, then
    one every ``period`` seconds."""

    def __init__(self, batches, *, warmup: float, backlog: int, period: float):
        self.batches, self.now = batches, 0.0
        self.warmup, self.backlog, self.period = warmup, backlog, period

    def clock(self) -> float:
        return self.now

    def __iter__(self) -> Iterator[TrainBatch]:
        for k, batch in enumerate(self.batches):
            if k == 0:
                self.now += self.warmup
            elif k > self.backlog:
                self.now += self.period
            yield batch


def test_steady_throughput_leaves_out_the_warmup_and_the_backlog(table) -> None:
    model, objective, optimizer, scheduler, scaler = _setup(table)
    batches = _batches(table, model, size=8, count=12)
    loader = _SlowStartLoader(batches, warmup=30.0, backlog=4, period=2.0)
    result = train_one_epoch(
        objective, optimizer, scheduler, scaler, loader, device=CPU, clock=loader.clock
    )
    # the loader's pace, 8 pairs every 2 s, whatever the 30 s start and the 4 quick batches
    assert result.steady_samples_per_s == pytest.approx(4.0)
    assert result.first_step_s == pytest.approx(30.0)
    assert result.loader_wait_s == pytest.approx(7 * 2.0)  # batches 5–11 were waited for
    assert result.seconds == pytest.approx(30.0 + 7 * 2.0)
    assert result.samples_per_s_incl_warmup == pytest.approx(96 / 44.0)


def test_steady_rate_of_short_epochs() -> None:
    assert steady_rate([], []) == steady_rate([8], [3.0]) == 0.0
    assert steady_rate([8, 8], [5.0, 7.0]) == pytest.approx(4.0)  # after the first step
    assert steady_rate([8, 8, 8, 8], [1.0, 2.0, 3.0, 5.0], last_end=6.0) == pytest.approx(4.0)
