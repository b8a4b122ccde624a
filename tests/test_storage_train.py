"""``xmr train --storage s3://…`` and ``xmr eval --checkpoint s3://…`` against a loopback S3
server: Ray Train's checkpoints, the exported weights and the run's record live in the bucket,
and read back from there."""

from __future__ import annotations

import json

import mlflow
import pyarrow.fs as pafs
import pytest
from typer.testing import CliRunner

from xmr.cli import app
from xmr.models import ModelSpec, create_model
from xmr.storage import ObjectPath
from xmr.train.config import resolve_config
from xmr.train.result import FINAL_METRICS_KEY, RUN_FILE
from xmr.train.run import train

pytestmark = pytest.mark.slow


def test_xmr_train_to_s3_then_eval_its_checkpoint_from_s3(
    local_ray, s3_bucket, small_toyworld, tmp_path, capsys, monkeypatch
):
    """A training run whose data and storage are in a bucket reads its images from there
    (in the Ray Train worker) and writes its checkpoints, ``last.pt`` and record there (nothing
    under a local ``s3:`` folder); the weights load from the URI, MLflow's tag holds it, the
    same config again reuses the finished run, a run stopped before it was recorded as
    finished resumes from its checkpoint in the bucket, and ``xmr eval`` scores the checkpoint
    in the bucket on the world in the bucket (its Ray actors read both there)."""
    monkeypatch.chdir(tmp_path)
    world = ObjectPath(f"{s3_bucket}/world")
    pafs.copy_files(str(small_toyworld), world.path, destination_filesystem=world.filesystem)
    storage = f"{s3_bucket}/runs"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # The 4-image val split as training data: one step, the run's files are what matters here.
    config = resolve_config("clip", data=world, split="val", epochs=1, batch_size=16,
                            eval_every=1, storage=storage, name="clip")  # fmt: skip
    trained = train(config, tracking_uri=uri)

    run_dir = ObjectPath(f"{storage}/clip")
    assert {p.name for p in run_dir.iterdir()} >= {"epoch_0001", "last.pt", "best.pt", RUN_FILE}
    assert (run_dir / "epoch_0001" / "model.pt").is_file()
    record = run_dir / RUN_FILE
    assert FINAL_METRICS_KEY in json.loads(record.read_text())
    assert not any(p.name.startswith("s3") for p in tmp_path.iterdir())
    last = run_dir / "last.pt"
    assert trained.last_checkpoint == last
    spec = ModelSpec.from_checkpoint(last)
    assert (spec.family, spec.arch, spec.checkpoint) == ("clip", "xmr-tiny", last)
    assert create_model(spec).encode_texts(["a dog"]).shape[0] == 1
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("xmr/train/toyworld")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags["xmr.checkpoint"] == str(last)
    assert run.data.tags["xmr.best_checkpoint"] == str(run_dir / "best.pt")

    again = train(config, tracking_uri=uri)  # finished: reused from the bucket, without Ray
    assert "its results are reused" in capsys.readouterr().out
    assert again.mlflow_run_id == run.info.run_id and again.last_checkpoint == last
    assert again.best_checkpoint == run_dir / "best.pt"
    # A run stopped after its last checkpoint but before it was recorded as finished: Ray
    # Train resumes it from that checkpoint in the bucket, and no epoch is redone.
    record.write_text(json.dumps({k: v for k, v in json.loads(record.read_text()).items()
                                  if k != FINAL_METRICS_KEY}))  # fmt: skip
    resumed = train(config, tracking_uri=uri)
    assert resumed.mlflow_run_id == run.info.run_id and resumed.metrics["epoch"] == 1
    assert resumed.metrics["val/recall_t2i_at_1"] == again.metrics["val/recall_t2i_at_1"]
    assert len(client.get_metric_history(run.info.run_id, "train/loss")) == 1
    assert len(client.search_runs([experiment.experiment_id])) == 1

    scored = CliRunner().invoke(app, [
        "eval", "--dataset", "toyworld", "--data", str(world), "--checkpoint", str(last),
        "--metrics", "recall", "--actors", "1", "--batch-size", "32", "--output",
        "metrics.json", "--tracking-uri", uri,
    ])  # fmt: skip
    assert scored.exit_code == 0, scored.output
    report = json.loads((tmp_path / "metrics.json").read_text())
    assert 0.0 <= report["metrics"]["test/recall_t2i_at_1"] <= 1.0
    assert report["config"]["model.checkpoint"] == str(last)
