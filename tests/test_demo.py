"""`xmr demo`: its plan, and end to end on a small ToyWorld: the ODmAP job (D′, the D ∪ D′
run, the D run matched to its optimiser steps, the comparison) as one MLflow run with a child
per step, and its resumption."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pandas as pd
import pytest
from typer.testing import CliRunner

from xmr.cli import app
from xmr.data.synthetic import read_manifest
from xmr.demo import DEMO_EPOCHS, demo_job
from xmr.toyworld import generate


def test_the_demo_is_the_odmap_job_at_laptop_size(tmp_path: Path) -> None:
    config = tmp_path / "world.yaml"
    config.write_text("splits: {train: 8, val: 2, test: 2}\n")
    world = generate(tmp_path / "world", config, seed=0)
    job = demo_job(tmp_path / "demo", data=world)
    assert (job.kind, job.name) == ("odmap", "demo-seed0")
    steps = {step.name: step.command for step in job.steps}
    assert list(steps) == ["synth", "train-d-dprime", "train-d", "compare"]
    assert (
        f"--epochs {DEMO_EPOCHS} --synth {tmp_path / 'demo' / 'dprime'}" in steps["train-d-dprime"]
    )
    assert "--steps <train-d-dprime's steps>" in steps["train-d"]  # D gets D ∪ D′'s steps
    converged = {
        s.name: s.command for s in demo_job(tmp_path / "c", data=world, converged=True).steps
    }
    assert "--epochs auto" in converged["train-d"] and "--steps" not in converged["train-d"]
    toy = {
        s.name: s.command
        for s in demo_job(tmp_path / "t", data=world, pretrained="toy", epochs=None).steps
    }
    assert all("--pretrained toy" in toy[name] for name in ("train-d-dprime", "train-d"))
    assert "--epochs" not in toy["train-d-dprime"]  # the finetuning preset's


@pytest.mark.slow
def test_demo_runs_the_odmap_job_and_a_rerun_skips_every_step(
    local_ray, small_toyworld, nltk_tagger, tmp_path
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    workdir = tmp_path / "demo"
    args = ["demo", "--data", str(small_toyworld), "--epochs", "1", "--workdir", str(workdir),
            "--tracking-uri", uri, "--cpus-per-worker", "1"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    for text in ("odmap@1", "recall_t2i@10", "bias@10", "D ∪ D′", "Δ"):
        assert text in result.output
    manifest = read_manifest(workdir / "dprime")
    assert manifest["planned"] == manifest["written"] + manifest["errors"]

    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("xmr/jobs/odmap")
    runs = client.search_runs([experiment.experiment_id])
    (job,) = [r for r in runs if r.data.tags.get("xmr.command") == "job"]
    children = {r.info.run_name: r for r in runs if r is not job}
    assert set(children) == {"synth", "train-d", "train-d-dprime"}
    assert all(r.data.tags["mlflow.parentRunId"] == job.info.run_id for r in children.values())
    assert all(r.info.status == "FINISHED" for r in runs)
    assert children["train-d"].data.params["data.synth"] == "none"
    # The control trains as many optimiser steps as the D ∪ D′ run took (read from that run).
    treated = children["train-d-dprime"].data
    steps = int(treated.metrics["train/global_step"])
    assert treated.params["train.epochs"] == "1" and treated.params["train.total_steps"] == str(
        steps
    )
    control = children["train-d"].data
    assert control.params["train.steps"] == control.params["train.total_steps"] == str(steps)
    assert control.metrics["train/global_step"] == steps
    # ... on the same learning-rate path: D ∪ D′'s step-schedule period, not D's own epochs'.
    period = treated.params["train.lr_step_period"]
    assert control.params["train.lr_step_period"] == control.params["optim.step_period"] == period
    assert f"D ∪ D′ vs D at equal optimiser steps ({steps} each)" in result.output
    assert "D, same steps" in result.output and "D, same epochs" not in result.output
    assert children["train-d-dprime"].data.params["data.synth"] == str(workdir / "dprime")
    assert children["train-d-dprime"].data.tags["xmr.demo"] == "seed0"
    comparison = json.loads((workdir / "steps" / "compare.json").read_text())["metrics"]
    delta = comparison["delta/test/odmap_at_1"]
    assert delta == pytest.approx(
        comparison["d_dprime/test/odmap_at_1"] - comparison["d/test/odmap_at_1"]
    )
    assert job.data.metrics["delta/test/odmap_at_1"] == pytest.approx(delta)
    # Every compared metric has per-query values in both training runs: each change has its
    # paired interval (the same test queries), in the CSV, the job's run and the table.
    table = pd.read_csv(workdir / "comparison.csv").set_index("metric")
    assert table[["ci_low", "ci_high", "significant"]].notna().all().all()
    low, high = table.loc["test/odmap_at_1", ["ci_low", "ci_high"]]
    assert low <= delta <= high
    assert job.data.metrics["delta/test/odmap_at_1_ci_low"] == pytest.approx(low)
    assert f"{delta:+.3f} [{low:+.3f}, {high:+.3f}]" in result.output
    assert "paired bootstrap interval over the same queries" in " ".join(result.output.split())

    again = CliRunner().invoke(app, args)  # every step done: skipped, the same table
    assert again.exit_code == 0, again.output
    assert again.output.count("finished before, skipped") == 4
    table = [
        output.split("test split:")[-1].split("\ndone job")[0]
        for output in (result.output, again.output)
    ]
    assert table[0] == table[1]
    assert "steps run 4, finished before 0" in result.output
    assert "steps run 0, finished before 4" in again.output
    assert len(client.search_runs([experiment.experiment_id])) == len(runs)

    other = [*args[:4], "2", *args[5:]]  # other options in the same folder: refused
    refused = CliRunner().invoke(app, other)
    assert refused.exit_code == 2
    assert "started with other options (epochs: '1' -> '2')" in refused.output
