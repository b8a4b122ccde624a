"""`xmr demo` end to end on a small ToyWorld: D′, D-only and D ∪ D′ runs, the comparison table."""

from __future__ import annotations

import mlflow
import pytest
from typer.testing import CliRunner

from xmr.cli import app
from xmr.data.synthetic import read_manifest

pytestmark = pytest.mark.slow


def test_demo_trains_both_conditions_and_compares_them(
    local_ray, small_toyworld, nltk_tagger, tmp_path
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["demo", "--data", str(small_toyworld), "--epochs", "1", "--workdir",
            str(tmp_path / "demo"), "--tracking-uri", uri, "--cpus-per-worker", "1"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    for text in ("odmap@1", "recall_t2i@10", "bias@10", "D ∪ D′", "Δ"):
        assert text in result.output
    manifest = read_manifest(tmp_path / "demo" / "dprime")
    assert manifest["planned"] == manifest["written"] + manifest["errors"]
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("xmr/train/toyworld")
    runs = client.search_runs([experiment.experiment_id], "tags.`xmr.demo` = 'seed0'")
    assert sorted(r.data.params["data.synth"] != "none" for r in runs) == [False, True]
    assert all(r.info.status == "FINISHED" for r in runs)

    again = CliRunner().invoke(app, args)  # everything done: reused, same table
    assert again.exit_code == 0, again.output
    assert len(client.search_runs([experiment.experiment_id])) == 2
