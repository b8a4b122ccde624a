"""The learning-rate path of a step-matched control: the same rate as its matched run at
every optimiser step, whatever each run's epochs (issue 45)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from xmr.jobs.commands import GLOBAL_STEP, matched_config
from xmr.jobs.odmap import CONTROL, TREATED
from xmr.jobs.steps import StepContext, StepOutcome
from xmr.train.config import TrainConfig, resolve_config
from xmr.train.optim import LR_STEP_PERIOD, make_optimizer, make_scheduler, step_period


def _rates(config: TrainConfig, steps_per_epoch: int) -> list[float]:
    """The rate of every optimiser step of ``config``'s run, from the schedulers training
    builds (:func:`make_scheduler` over the run's total steps)."""
    total = config.total_steps(steps_per_epoch)
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = make_optimizer([weight], config.optim)
    scheduler = make_scheduler(optimizer, config.optim, steps_per_epoch, total)
    rates = []
    for _ in range(total):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def _context(tmp_path: Path, outcome: StepOutcome) -> StepContext:
    return StepContext(tmp_path, "xmr/jobs/odmap", "parent", "sqlite:///x.db", None,
                       {TREATED: outcome})  # fmt: skip


@pytest.mark.parametrize("family", ["clip", "eiclip"])
@pytest.mark.parametrize("pretrained", [None, "toy"])
def test_the_step_matched_control_has_its_matched_runs_rate_at_every_step(
    tmp_path: Path, family: str, pretrained: str | None
) -> None:
    """The default world: D ∪ D′ has 195 steps an epoch, D 156. The ``step`` schedule used to
    halve each run's rate after ``step_epochs`` of its *own* epochs (D at step 312, D ∪ D′ at
    390); the control now takes the matched run's period, and cosine already spans the same
    total. So both runs see one rate at every step."""
    treated = resolve_config(family, pretrained=pretrained, epochs=3, name=TREATED)
    per_epoch_treated, per_epoch_control = 195, 156
    total = treated.total_steps(per_epoch_treated)
    outcome = StepOutcome(
        metrics={GLOBAL_STEP: total,
                 LR_STEP_PERIOD: step_period(treated.optim, per_epoch_treated)},
    )  # fmt: skip
    planned = resolve_config(family, pretrained=pretrained, name=CONTROL)
    control = matched_config(planned, _context(tmp_path, outcome), TREATED)

    assert control.steps == total
    assert _rates(control, per_epoch_control) == _rates(treated, per_epoch_treated)
    if treated.optim.schedule == "step":  # the control's own epochs would give another path
        unmatched = replace(planned, steps=total)
        assert _rates(unmatched, per_epoch_control) != _rates(treated, per_epoch_treated)


def test_a_matched_record_without_a_period_keeps_the_runs_own_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    planned = resolve_config("clip", name=CONTROL)
    control = matched_config(planned, _context(tmp_path, StepOutcome(metrics={GLOBAL_STEP: 585})),
                             TREATED)  # fmt: skip
    assert control.steps == 585 and control.optim.step_period is None
    assert "recorded no learning-rate period" in capsys.readouterr().out


def test_the_period_enters_the_runs_name_only_when_set() -> None:
    """Runs named before ``--lr-step-period`` keep their names; a matched control is another
    run than an unmatched one."""
    plain = resolve_config("clip")
    assert plain.fingerprint() == "88b42893"
    matched = resolve_config("clip", lr_step_period=390)
    assert matched.optim.step_period == 390
    assert matched.fingerprint() != plain.fingerprint()
    assert TrainConfig.from_dict(matched.to_dict()) == matched
    assert matched.params()["optim.step_period"] == "390"
    assert plain.params()["optim.step_period"] == "none"


def test_the_optimiser_flags_replace_only_what_they_set() -> None:
    """``--weight-decay``, ``--lr-schedule`` and ``--warmup-steps`` (the EI-CLIP job's baseline
    takes EI-CLIP's recipe with them) change those fields of the family's preset, no other."""
    preset = resolve_config("clip", pretrained="toy")
    recipe = resolve_config("eiclip", pretrained="toy").optim
    baseline = resolve_config("clip", pretrained="toy", lr=recipe.lr,
                              weight_decay=recipe.weight_decay, lr_schedule=recipe.schedule,
                              warmup_steps=recipe.warmup_steps).optim  # fmt: skip
    assert replace(baseline, step_epochs=recipe.step_epochs) == recipe  # cosine: no step epochs
    assert replace(baseline, weight_decay=0.0, schedule="step", warmup_steps=0) == preset.optim
    with pytest.raises(ValueError, match=r"^--lr-schedule 'linear' is not one of step, cosine"):
        resolve_config("clip", lr_schedule="linear")
