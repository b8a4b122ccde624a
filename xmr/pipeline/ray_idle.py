"""Ray Data's scheduling loop, paused while it only spins.

Ray Data (2.60) runs an execution as a loop in one thread: wait up to 0.1 s for a running task's
output (``ray.wait``), read what the backpressure policies allow, dispatch what they allow,
repeat. When a consumer is slower than the stage that feeds it (a training worker behind its
loader), every operator is backpressured: no task is running, or a task's next output is ready
but may not be read, so ``ray.wait`` returns at once (or is skipped) and the loop goes round
without blocking, a few thousand times a second, until the consumer takes a batch. For a
training run that is the steady state: the actor that runs the loop (Ray Train's
``SplitCoordinator``) used 40–60 % of a core for the whole run, on a 2-core machine where the
worker had the rest (bench/RESULTS.md, "The data path's CPU"). It is upstream behaviour; Ray
Data offers a hook per loop step (an :class:`ExecutionCallback`), and :class:`PauseWhenIdle`
uses it.
"""

from __future__ import annotations

import time

import ray.data
from ray.data._internal.execution.execution_callback import ExecutionCallback
from ray.data._internal.execution.streaming_executor import StreamingExecutor

IDLE_PAUSE_S = 0.2
"""The longest a spinning loop pauses: it goes on at once when the consumer takes a block."""
POLL_S = 0.005
"""How often a paused loop looks whether the consumer took a block: its delay in dispatching
the next task, where a spinning loop had none (a few microseconds of CPU a look)."""
SPIN_STEP_S = 0.005
"""A step that ends sooner than this after the last one did not block in ``ray.wait``."""


def progress_of(executor: StreamingExecutor) -> tuple[int, ...]:
    """What a loop step can change, per operator: tasks submitted and finished, outputs made
    and taken, and the blocks waiting for the consumer. Equal before and after a step: the step
    did nothing."""
    return tuple(
        count
        for op in _operators(executor)
        for count in (
            op.metrics.num_tasks_submitted,
            op.metrics.num_tasks_finished,
            op.metrics.num_task_outputs_generated,
            op.metrics.num_outputs_taken,
            op.metrics.num_external_outqueue_blocks,
        )
    )


def waiting_blocks(executor: StreamingExecutor) -> int:
    """The blocks the consumer has not taken yet (it takes them from another thread)."""
    return sum(op.metrics.num_external_outqueue_blocks for op in _operators(executor))


def _operators(executor: StreamingExecutor) -> list:
    return list(executor._topology or {})


class PauseWhenIdle(ExecutionCallback):
    """After a loop step that neither blocked nor changed anything (:func:`progress_of`), waits
    until the consumer takes a block (:func:`waiting_blocks`, looked at every :data:`POLL_S`)
    or :data:`IDLE_PAUSE_S` has passed, so a backpressured execution sleeps instead of
    spinning. A step that waited on a task, or moved a block, is not slowed."""

    def __init__(self) -> None:
        self._last_progress: tuple[int, ...] | None = None
        self._last_step_end = 0.0
        self.pauses = 0
        """Pauses so far (how often the loop would have spun)."""

    def on_execution_step(self, executor: StreamingExecutor) -> None:
        progress, now = progress_of(executor), time.perf_counter()
        if progress == self._last_progress and now - self._last_step_end < SPIN_STEP_S:
            self.pauses += 1
            waiting, until = waiting_blocks(executor), now + IDLE_PAUSE_S
            while waiting_blocks(executor) == waiting and time.perf_counter() < until:
                time.sleep(POLL_S)
        self._last_progress, self._last_step_end = progress, time.perf_counter()


def pause_when_idle(dataset: ray.data.Dataset) -> ray.data.Dataset:
    """``dataset``, whose executions (and those of its streaming splits) run
    :class:`PauseWhenIdle` at every loop step. Returns the same dataset."""
    callbacks = dataset.context.custom_execution_callback_classes
    if PauseWhenIdle not in callbacks:
        callbacks.append(PauseWhenIdle)
    return dataset
