"""Ray Data's scheduling loop paused while it only spins (xmr.pipeline.ray_idle): a real
execution behind a slow consumer pauses, delivers every row in order, and a training dataset
carries the pause into its streaming split."""

from __future__ import annotations

import time

import numpy as np
import pytest
import ray.data
from ray.data._internal.execution.interfaces import ExecutionResources

from xmr.pipeline.ray_idle import PauseWhenIdle, pause_when_idle, progress_of

PAUSES: list[CountingPause] = []


class CountingPause(PauseWhenIdle):
    """:class:`PauseWhenIdle` that keeps itself and counts the loop's steps, for the test to
    read (the executor builds it in this process)."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = 0
        PAUSES.append(self)

    def on_execution_step(self, executor) -> None:
        super().on_execution_step(executor)
        self.steps += 1
        assert len(progress_of(executor)) % 5 == 0


class MegabyteRows:
    """An actor stage: each id becomes a 1 MB row."""

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"id": batch["id"], "payload": np.zeros((len(batch["id"]), 2**18), np.float32)}


@pytest.mark.slow
def test_a_backpressured_execution_pauses_and_delivers_every_row_in_order(local_ray) -> None:
    """24 one-megabyte rows in a 6 MB budget, taken 20 ms apart: the stage fills its budget
    and waits for the consumer, and the loop pauses instead of spinning."""
    PAUSES.clear()
    dataset = ray.data.range(24, override_num_blocks=24).map_batches(
        MegabyteRows, batch_size=1, compute=ray.data.ActorPoolStrategy(size=1)
    )
    dataset.context.execution_options.preserve_order = True
    dataset.context.execution_options.resource_limits = ExecutionResources(
        object_store_memory=6 * 2**20
    )
    dataset.context.custom_execution_callback_classes.append(CountingPause)
    ids = []
    for batch in dataset.iter_batches(batch_size=1, batch_format="numpy"):
        ids.extend(batch["id"].tolist())
        time.sleep(0.02)
    assert ids == list(range(24))
    (pause,) = PAUSES
    assert pause.pauses > 0, f"{pause.steps} loop steps, none paused"


def test_pause_when_idle_registers_once_and_a_stage_keeps_it(local_ray) -> None:
    dataset = pause_when_idle(pause_when_idle(ray.data.range(4)))
    mapped = dataset.map_batches(lambda batch: batch)
    assert mapped.context.custom_execution_callback_classes.count(PauseWhenIdle) == 1
    assert ray.data.range(4).context.custom_execution_callback_classes == []  # not global
