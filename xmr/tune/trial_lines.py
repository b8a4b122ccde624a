"""A sweep's progress in a log: one line when a trial starts and one when it ends.

Ray Tune's own console output (its status table every 30 s, a result table of every reported
metric per trial, the TensorBoard hint) is off (``verbose=0``); :class:`TrialLines`, a Tune
callback in the sweep's driver, says instead which trial started, how many are running, and
how each ended, in how long, with the space's metrics.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ray import tune

from xmr.progress import summary_line
from xmr.tracking import is_finite_number
from xmr.tune.trials import SweepContext


class TrialLines(tune.Callback):
    """Prints ``sweep <name>: trial <values> started (k running, n/N ended)`` and the trial's
    :func:`~xmr.progress.summary_line` when it finishes or fails."""

    def __init__(self, context: SweepContext, metrics: Sequence[str], trials: int) -> None:
        """``metrics``: the space's metrics, shown for each finished trial; ``trials``: how many
        the sweep runs in all."""
        self.context = context
        self.metrics = tuple(metrics)
        self.total = trials
        self.started: dict[str, float] = {}
        self.ended = 0

    def _name(self, trial: Any) -> str:
        return self.context.run_name(trial.config)

    def _prefix(self) -> str:
        return f"sweep {self.context.sweep_id}"

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.started[trial.trial_id] = time.monotonic()
        running = sum(1 for t in trials if t.status == "RUNNING")
        print(
            f"{self._prefix()}: trial {self._name(trial)} started "
            f"({running} running, {self.ended}/{self.total} ended)",
            flush=True,
        )

    def _seconds(self, trial: Any) -> float:
        return time.monotonic() - self.started.get(trial.trial_id, time.monotonic())

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.ended += 1
        result = trial.last_result or {}
        numbers = {
            name.split("/", 1)[-1]: float(result[name])
            for name in self.metrics
            if is_finite_number(result.get(name))
        }
        line = summary_line(f"trial {self._name(trial)}", self._seconds(trial), numbers)
        print(f"{self._prefix()}: {line} ({self.ended}/{self.total} ended)", flush=True)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.ended += 1
        line = summary_line(f"trial {self._name(trial)}", self._seconds(trial), verb="failed")
        print(f"{self._prefix()}: {line} ({self.ended}/{self.total} ended)", flush=True)
