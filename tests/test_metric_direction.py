"""Metric directions, declared once in ``xmr.metrics.direction``, and the places that read them:
the sweeps' default ``mode`` / ``abs``, the demo's Δ colours, the eval report and the RSUM that
picks the best training checkpoint."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from rich.console import Console

from xmr.metrics import Direction, UnknownMetricError, find_direction, metric_direction
from xmr.tune import SpaceError
from xmr.tune.space import parse_space

HIGHER, LOWER, TOWARD_ZERO = Direction.HIGHER, Direction.LOWER, Direction.TOWARD_ZERO
NONE = Direction.NONE


@pytest.mark.parametrize(
    ("name", "direction"),
    [
        ("test/recall_t2i_at_10", HIGHER),
        ("final/test/recall_i2t_at_1", HIGHER),
        ("val/subcat_recall_i2t_at_5", HIGHER),
        ("test/odmap_at_1", HIGHER),
        ("map_at_5", HIGHER),
        ("val/rsum", HIGHER),
        ("test/sumr", HIGHER),
        ("val/subcat_sumr", HIGHER),
        ("best/test/recall_t2i_at_10", HIGHER),
        ("train/loss", LOWER),
        ("train/loss_itc", LOWER),
        ("test/medr_i2t", LOWER),  # MedR: a rank, 1 is best
        ("final/test/medr_t2i", LOWER),
        ("final/test/bias_at_5", TOWARD_ZERO),
        ("test/bias_at_10", TOWARD_ZERO),
        ("test/bias_at_10_cup", TOWARD_ZERO),  # over the queries that mention a class
        ("final/test/bias_at_1_sports_ball", TOWARD_ZERO),
        ("similarity_bias", TOWARD_ZERO),
        ("test/gendered_share_at_10", NONE),  # Bias@K's diagnostics: no value is better
        ("final/test/male_share_at_1", NONE),
        ("test/male_share_at_10_sports_ball", NONE),
    ],
)
def test_every_metric_xmr_logs_declares_its_direction(name: str, direction: Direction) -> None:
    assert metric_direction(name) is direction is find_direction(name)


@pytest.mark.parametrize(
    "name",
    [
        "train/samples_per_s",
        "lr",
        "test/recall",
        "test/recall_at_10x",
        "data/images",
        "test/bias_at_10_ci_low",  # an interval's end is not a metric to judge
        "test/male_share_at_10_ci_high",
    ],
)
def test_an_unknown_metric_is_refused_not_guessed(name: str) -> None:
    assert find_direction(name) is None
    with pytest.raises(UnknownMetricError, match=f"metric '{name}': its direction is not known"):
        metric_direction(name)


def test_signed_metrics_are_judged_by_their_size() -> None:
    assert TOWARD_ZERO.better(-0.1, than=0.2) and not TOWARD_ZERO.better(0.3, than=-0.2)
    assert TOWARD_ZERO.judged(-0.25) == 0.25 and TOWARD_ZERO.mode == "min" and TOWARD_ZERO.signed
    assert HIGHER.better(0.3, than=0.2) and not HIGHER.better(0.2, than=0.2)
    assert LOWER.better(0.1, than=0.2) and LOWER.judged(-1.0) == -1.0 and LOWER.mode == "min"
    assert HIGHER.mode == "max" and not HIGHER.signed
    assert not any(d.better(math.nan, than=0.0) for d in Direction)
    assert [d.symbol for d in Direction] == ["↑", "↓", "→0", "·"]


def test_a_diagnostic_is_never_better_and_never_optimised() -> None:
    assert not NONE.better(0.9, than=0.1) and not NONE.better(0.1, than=0.9)
    assert not NONE.judges and not NONE.signed and HIGHER.judges and TOWARD_ZERO.judges
    with pytest.raises(ValueError, match="diagnostic metric has no better value"):
        NONE.mode  # noqa: B018
    with pytest.raises(SpaceError, match=r"'test/male_share_at_10': give its mode .*diagnostic"):
        _space(metrics=[{"name": "test/male_share_at_10"}])
    stated = _space(metrics=[{"name": "test/gendered_share_at_10", "mode": "max"}]).metrics[0]
    assert (stated.mode, stated.abs) == ("max", False)


def test_reading_a_direction_loads_no_torch() -> None:
    """``xmr compare`` and a sweep space read directions: that must not cost a torch import."""
    import subprocess
    import sys

    code = (
        "import sys, xmr.metrics.direction, xmr.compare.table, xmr.tune.space\n"
        "from xmr.metrics import metric_direction\n"
        "assert metric_direction('test/bias_at_10').signed\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- the sweeps ------------------------------------------------------------------------------

_SPACE = {"command": "train", "params": {"fair_alpha": {"grid": [0.0, 1.0]}}}


def _space(**changes):
    return parse_space({**_SPACE, **changes}, name="space.yaml")


def test_a_sweep_metric_defaults_to_its_declared_direction() -> None:
    space = _space(
        metrics=[
            {"name": "test/bias_at_10"},  # was: max of the raw bias
            "val/loss",  # was: max
            {"name": "test/recall_t2i_at_10"},
            {"name": "test/bias_at_5", "mode": "max", "abs": False},  # stated: kept
            {"name": "train/samples_per_s", "mode": "max"},  # unknown, but its mode is stated
        ]
    )
    judged = [(m.name, m.mode, m.abs) for m in space.metrics]
    assert judged == [
        ("test/bias_at_10", "min", True),
        ("val/loss", "min", False),
        ("test/recall_t2i_at_10", "max", False),
        ("test/bias_at_5", "max", False),
        ("train/samples_per_s", "max", False),
    ]


def test_a_metric_of_unknown_direction_needs_its_mode() -> None:
    with pytest.raises(SpaceError, match=r"space.yaml: metric 'test/speed': give its mode"):
        _space(metrics=[{"name": "test/speed"}])
    with pytest.raises(SpaceError, match="mode must be max or min"):
        _space(metrics=[{"name": "test/recall_t2i_at_1", "mode": "up"}])


def test_the_scheduler_mode_defaults_to_the_metric_direction() -> None:
    fixed, metrics = {"eval_every": 1}, ["test/recall_t2i_at_10"]
    asha = {"name": "asha", "metric": "val/loss"}
    assert _space(fixed=fixed, metrics=metrics, scheduler=asha).scheduler.mode == "min"  # was max
    asha = {"name": "asha", "metric": "val/recall_t2i_at_10"}
    assert _space(fixed=fixed, metrics=metrics, scheduler=asha).scheduler.mode == "max"
    with pytest.raises(SpaceError, match="'val/bias_at_10' is signed and ASHA compares it"):
        _space(fixed=fixed, metrics=metrics, scheduler={"name": "asha", "metric": "val/bias_at_10"})
    with pytest.raises(SpaceError, match="mode must be max or min"):
        _space(fixed=fixed, metrics=metrics, scheduler={**asha, "mode": "maximum"})


# --- the tables and the checkpoint choice ----------------------------------------------------


def test_the_odmap_comparison_colours_a_bias_closer_to_zero_green() -> None:
    from xmr.jobs.odmap import odmap_report
    from xmr.jobs.steps import StepOutcome

    base = {"test/recall_t2i_at_1": 0.30, "test/bias_at_10": 0.20}
    mixed = {"test/recall_t2i_at_1": 0.25, "test/bias_at_10": -0.10}  # Δ bias -0.30: better
    table = odmap_report({"train-d": StepOutcome(metrics=base),
                          "train-d-dprime": StepOutcome(metrics=mixed)})  # fmt: skip
    deltas = dict(zip(table.columns[0]._cells, table.columns[-1]._cells, strict=True))
    assert deltas == {
        "recall_t2i@1 ↑": "[red]-0.050 (no interval)[/red]",
        "bias@10 →0": "[green]-0.300 (no interval)[/green]",
    }  # fmt: skip


def test_the_eval_report_labels_each_row_with_its_direction(tmp_path: Path) -> None:
    from xmr.eval.report import metrics_table
    from xmr.eval.score import EvalResult

    metrics = {"test/recall_i2t_at_1": 0.25, "test/odmap_at_1": 0.5, "test/bias_at_1": -0.125,
               "test/gendered_share_at_1": 0.4, "test/male_share_at_1": 0.4375}  # fmt: skip
    result = EvalResult(metrics, {}, [], {}, tmp_path)
    console = Console(record=True, width=80)
    console.print(metrics_table(result, (1,)))
    rows = [line.split("│")[1:3] for line in console.export_text().splitlines() if "│" in line]
    cells = {label.strip(): value.strip() for label, value in rows}
    assert cells == {"Recall i2t ↑": "25.0", "ODmAP ↑": "50.0", "Bias →0": "-0.125",
                     "Gendered share ·": "0.400", "Male share ·": "0.438"}  # fmt: skip


def test_the_best_checkpoint_is_chosen_by_the_summed_recall_in_percent() -> None:
    from xmr.train.evaluation import selection_score

    metrics = {
        "val/recall_i2t_at_1": 0.1,
        "val/recall_t2i_at_1": 0.2,
        "val/recall_i2t_at_5": 0.4,
        "val/recall_t2i_at_5": 0.5,
        "val/recall_t2i_at_5_ci_low": 0.45,  # an interval's ends are not recalls
        "val/recall_t2i_at_5_ci_high": 0.55,
        "val/bias_at_5": 0.9,
        "test/recall_i2t_at_1": 0.7,
        "train/loss": 3.0,
    }
    fractions = 0.1 + 0.2 + 0.4 + 0.5  # what training summed before, in this order
    assert selection_score(metrics, "val") == 100 * fractions == pytest.approx(120.0)
    assert selection_score(metrics, "test") == pytest.approx(70.0)
    assert selection_score({"val/bias_at_5": 0.1}, "val") is None
