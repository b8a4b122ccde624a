"""``xmr train --storage s3://…`` and ``xmr eval --checkpoint s3://…`` against a loopback S3
server: Ray Train's checkpoints, the exported weights and the run's record live in the bucket,
and read back from there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import mlflow
import pyarrow.fs as pafs
import pytest

from xmr.models import ModelSpec, create_model
from xmr.storage import ObjectPath
from xmr.train.config import resolve_config
from xmr.train.run import FINAL_METRICS_KEY, RUN_FILE, train

pytestmark = pytest.mark.slow


def _xmr(args: list[str], cwd, env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "xmr.cli", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:]


def test_xmr_train_to_s3_then_eval_its_checkpoint_from_s3(
    s3, s3_bucket, small_toyworld, tmp_path, capsys
):
    """A training run whose data and storage are in a bucket reads its images from there
    (in the Ray Train worker) and writes its checkpoints, ``last.pt`` and record there (nothing
    under a local ``s3:`` folder); the weights load from the URI, MLflow's tag holds it, the
    same config again reuses the finished run, and ``xmr eval`` scores the checkpoint in the
    bucket on the world in the bucket (its Ray actors read both there)."""
    env = {**os.environ, **s3.env, "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    env.pop("RAY_ADDRESS", None)
    world = ObjectPath(f"{s3_bucket}/world")
    pafs.copy_files(str(small_toyworld), world.path, destination_filesystem=world.filesystem)
    storage = f"{s3_bucket}/runs"
    # The 4-image val split as training data: one step, the run's files are what matters here.
    _xmr(["train", "--dataset", "toyworld", "--data", str(world), "--split", "val",
          "--epochs", "1", "--batch-size", "16", "--eval-every", "1", "--storage", storage,
          "--name", "clip", "--tracking-uri", "sqlite:///mlflow.db"], tmp_path, env)  # fmt: skip

    run_dir = ObjectPath(f"{storage}/clip")
    assert {p.name for p in run_dir.iterdir()} >= {"epoch_0001", "last.pt", "best.pt", RUN_FILE}
    assert (run_dir / "epoch_0001" / "model.pt").is_file()
    assert FINAL_METRICS_KEY in json.loads((run_dir / RUN_FILE).read_text())
    assert not any(p.name.startswith("s3") for p in tmp_path.iterdir())
    last = run_dir / "last.pt"
    spec = ModelSpec.from_checkpoint(last)
    assert (spec.family, spec.arch, spec.checkpoint) == ("clip", "xmr-tiny", last)
    assert create_model(spec).encode_texts(["a dog"]).shape[0] == 1
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("xmr/train/toyworld").experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags["xmr.checkpoint"] == str(last)
    assert run.data.tags["xmr.best_checkpoint"] == str(run_dir / "best.pt")

    config = resolve_config("clip", data=world, split="val", epochs=1, batch_size=16,
                            eval_every=1, storage=storage, name="clip")  # fmt: skip
    again = train(config, tracking_uri=uri)  # finished: reused from the bucket, without Ray
    assert "its results are reused" in capsys.readouterr().out
    assert again.mlflow_run_id == run.info.run_id and again.last_checkpoint == last
    assert again.best_checkpoint == run_dir / "best.pt"

    _xmr(["eval", "--dataset", "toyworld", "--data", str(world), "--checkpoint",
          str(last), "--metrics", "recall", "--actors", "1", "--batch-size", "32",
          "--output", "metrics.json", "--tracking-uri", "sqlite:///mlflow.db"],
         tmp_path, env)  # fmt: skip
    report = json.loads((tmp_path / "metrics.json").read_text())
    assert 0.0 <= report["metrics"]["test/recall_t2i_at_1"] <= 1.0
    assert report["config"]["model.checkpoint"] == str(last)
