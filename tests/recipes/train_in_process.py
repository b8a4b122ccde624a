"""A whole training in this process, with no Ray: ``fit`` over local hooks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xmr.train.config import resolve_config
from xmr.train.fit import FitData, LocalHooks, fit
from xmr.train.plan import local_batches, plan_run


def train_in_process(world: Path, runs: Path, **options: Any) -> dict[str, float]:
    """CLIP on the ToyWorld in ``world`` until its val RSUM levels off, tested with its best
    epoch's weights; ``options``: any other ``xmr train`` option. Returns the last epoch's
    metrics, the test split's included."""
    plan = plan_run(resolve_config("clip", data=world, epochs="auto", storage=runs, **options))
    data = FitData(
        plan.root,
        plan.corpus,
        plan.steps_per_epoch,
        plan.grouped,
        batches=lambda start_epoch: local_batches(plan, start_epoch),
    )
    hooks = LocalHooks(runs / "in-process")  # epoch_NNNN/, last.pt, best.pt; run again: resumes
    return fit(plan.config, data, hooks)
