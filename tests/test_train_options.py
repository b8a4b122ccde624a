"""``xmr train``'s run-length and seed flags without Ray: --steps against --epochs, the
names they give, --seeds against --seed, and the statistics over seeds."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from xmr.cli import app, main
from xmr.train.config import TrainConfig, resolve_config
from xmr.train.convergence import Convergence
from xmr.train.options import SeedOptions, TrainOptions
from xmr.train.seeds import seed_statistics


def test_steps_replace_epochs_in_the_run_name_and_exclude_them(tmp_path) -> None:
    """A --steps run's name does not depend on its epochs (they follow from the steps and the
    data); runs named before --steps existed keep their names; --epochs with it is refused."""
    by_steps = resolve_config("clip", steps=7, storage=tmp_path)
    assert replace(by_steps, epochs=3).fingerprint() == by_steps.fingerprint()
    assert resolve_config("clip", steps=8, storage=tmp_path).fingerprint() != by_steps.fingerprint()
    assert by_steps.params()["train.steps"] == "7"
    assert [by_steps.steps_in_epoch(epoch, 5) for epoch in range(2)] == [5, 2]
    by_epochs = resolve_config("clip", epochs=2, storage=tmp_path)
    assert by_epochs.total_steps(5) == 10 and by_epochs.params()["train.steps"] == "none"
    with pytest.raises(ValueError, match="--steps and --epochs exclude each other"):
        TrainConfig.from_options(TrainOptions(steps=7, epochs=2))
    with pytest.raises(ValueError, match="--steps must be >= 1"):
        TrainOptions(steps=0)


def test_epochs_auto_is_a_capped_run_evaluated_every_epoch_with_its_own_name(tmp_path) -> None:
    """``--epochs auto``: the cap is the run's epochs, the val split is evaluated every epoch
    (or every --eval-every), the stopping rule and the cadence enter the name (a fixed-epoch
    run's name does not change), and the params say ``auto``; --steps with it is refused."""
    auto = TrainConfig.from_options(TrainOptions(epochs="auto", storage=tmp_path))
    assert (auto.epochs, auto.eval_every) == (30, 1)
    assert auto.convergence == Convergence(patience=3, min_delta=0.5, max_epochs=30)
    capped = TrainConfig.from_options(
        TrainOptions(epochs="auto", max_epochs=12, patience=2, storage=tmp_path)
    )
    assert capped.epochs == 12 and capped.fingerprint() != auto.fingerprint()
    every_second = TrainConfig.from_options(
        TrainOptions(epochs="auto", eval_every=2, storage=tmp_path)
    )
    assert every_second.fingerprint() != auto.fingerprint()
    fixed = TrainConfig.from_options(TrainOptions(epochs=30, storage=tmp_path))
    assert fixed.fingerprint() != auto.fingerprint()
    assert replace(fixed, eval_every=1).fingerprint() == fixed.fingerprint()
    assert auto.params()["train.epochs"] == "auto" and auto.params()["train.max_epochs"] == "30"
    assert TrainConfig.from_dict(auto.to_dict()) == auto
    old_record = {k: v for k, v in fixed.to_dict().items() if k != "convergence"}
    assert TrainConfig.from_dict(old_record) == fixed  # a record written before the field
    with pytest.raises(ValueError, match="--steps and --epochs exclude each other"):
        TrainConfig.from_options(TrainOptions(steps=7, epochs="auto"))


def test_a_seed_group_is_named_without_its_seed(tmp_path) -> None:
    seeds = [resolve_config("clip", seed=seed, storage=tmp_path) for seed in (0, 1)]
    assert seeds[0].default_name() != seeds[1].default_name()
    assert seeds[0].default_name(seeded=False) == seeds[1].default_name(seeded=False)
    assert seeds[0].default_name(seeded=False) not in {c.default_name() for c in seeds}
    assert (
        TrainConfig.from_options(TrainOptions()).seed == 0
        and TrainConfig.from_options(TrainOptions(seed=3)).seed == 3
    )
    assert SeedOptions(seeds="2, 0").seeds == (2, 0)  # as given: the runs' order


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--seed", "1", "--seeds", "0,1"], "error: --seed and --seeds exclude each other"),
        (["--seeds", "0,0"], "error: --seeds takes comma-separated integers >= 0, each once"),
        (["--seeds", "0,-1"], "error: --seeds takes comma-separated integers >= 0, each once"),
        (["--steps", "5", "--epochs", "2"], "error: --steps and --epochs exclude each other"),
        (["--epochs", "soon"], "error: --epochs takes a number of epochs or 'auto', got 'soon'"),
        (["--patience", "2"], "error: --patience applies to --epochs auto"),
        (["--epochs", "auto", "--patience", "0"], "error: --patience must be >= 1, got 0"),
    ],
)
def test_contradicting_run_flags_are_refused_in_one_line(
    flags: list[str], error: str, tmp_path
) -> None:
    result = CliRunner().invoke(app, ["train", *flags, "--storage", str(tmp_path)])
    assert result.exit_code == 2 and error in result.output, result.output
    assert "Traceback" not in result.output


def test_seeds_take_space_separated_values_on_the_command_line(tmp_path, capfd) -> None:
    """``xmr train --seeds 0 1 2`` (the console script, :func:`xmr.cli.main`) reads as
    ``--seeds 0,1,2``: here refused with --seed, which shows both were parsed as flags (click
    alone would stop at the extra arguments)."""
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--seeds", "0", "1", "2", "--seed", "3", "--storage", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "--seed and --seeds exclude each other" in "".join(capfd.readouterr())


def test_seed_statistics_are_the_mean_and_sample_std_of_the_metrics_all_seeds_have() -> None:
    runs = [{"test/r": 0.2, "test/b": 1.0}, {"test/r": 0.4, "test/b": 0.0}, {"test/r": 0.9}]
    statistics = seed_statistics(runs)
    assert statistics.keys() == {"test/r_mean", "test/r_std"}
    values = np.array([0.2, 0.4, 0.9])
    assert statistics["test/r_mean"] == pytest.approx(values.mean())
    assert statistics["test/r_std"] == pytest.approx(values.std(ddof=1))
    assert seed_statistics(runs[:1]) == {"test/r_mean": 0.2, "test/b_mean": 1.0}  # no std
