"""`xmr train` end to end on a local Ray: Ray Train workers, D ∪ D′, checkpoints, resume,
worker failure, MLflow."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import mlflow
import numpy as np
import psutil
import pytest
import torch
from biaug_fixture import write_biaug_dprime

from xmr.data import read_dataset
from xmr.data.synthetic import read_manifest
from xmr.data.toyworld import generate_world
from xmr.models import ModelSpec, create_model
from xmr.synth.build import synthesize
from xmr.synth.config import load_configs
from xmr.train.config import resolve_config
from xmr.train.data import collate, training_data
from xmr.train.run import train

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def small_dprime(small_toyworld, local_ray, nltk_tagger, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dprime") / "out"
    options = {"data": small_toyworld, "out": out, "progress": False, "log_mlflow": False}
    synthesize(*load_configs(None, options))
    return out


def _config(world: Path, storage: Path, **fields):
    fields = {"epochs": 2, "batch_size": 16, **fields}
    return resolve_config("clip", data=world, storage=storage, **fields)


def test_training_data_mixes_a_seeded_sample_of_dprime(small_toyworld, small_dprime) -> None:
    records = read_dataset("toyworld", small_toyworld, "train")
    only_d = training_data(records)
    assert only_d.synthetic == 0 and only_d.original == sum(len(r.captions) for r in records)
    available = read_manifest(small_dprime)["written"]
    half = training_data(records, small_dprime, 0.5, seed=1)
    assert half.synthetic == min(available, round(0.5 * half.original))
    assert half.dprime_digest == read_manifest(small_dprime)["config_hash"]
    again = training_data(records, small_dprime, 0.5, seed=1)
    other = training_data(records, small_dprime, 0.5, seed=2)
    captions = half.table.column("caption").to_pylist()
    assert captions == again.table.column("caption").to_pylist()
    if half.synthetic < available:
        assert captions != other.table.column("caption").to_pylist()
    everything = training_data(records, small_dprime)
    assert everything.synthetic == available
    rows = everything.table.to_pylist()
    synthetic = [r for r in rows if r["source"] == "D′"]
    assert all(r["image_id"] < 0 for r in synthetic)  # never confused with D's images
    model = create_model("clip", arch="xmr-tiny", seed=0)
    batch_rows = {key: [r[key] for r in rows[-4:]] for key in rows[0]}
    batch = collate(batch_rows, model)
    assert batch.pixels.shape == (4, 3, 64, 64) and batch.text.shape[0] == 4


def test_clip_trains_on_d_and_dprime_logs_to_mlflow_and_resumes(
    local_ray, small_toyworld, small_dprime, tmp_path
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = _config(small_toyworld, tmp_path / "runs", synth=small_dprime, eval_every=1)
    result = train(config, tracking_uri=uri)

    assert result.metrics["epoch"] == 2
    for key in (
        "test/recall_t2i_at_1",
        "test/odmap_at_5",
        "test/bias_at_10",
        "val/recall_i2t_at_5",
    ):
        assert key in result.metrics
    assert result.last_checkpoint.is_file() and result.best_checkpoint is not None
    spec = ModelSpec.from_checkpoint(result.last_checkpoint)
    assert (spec.family, spec.arch) == ("clip", "xmr-tiny")
    trained = create_model(spec)
    fresh = create_model("clip", arch="xmr-tiny", seed=0)
    text = ["a dog with a frisbee"]
    assert not torch.allclose(trained.encode_texts(text), fresh.encode_texts(text))

    client = mlflow.MlflowClient(uri)
    run = client.get_run(result.mlflow_run_id)
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["model.family"] == "clip" and params["loss.fair_alpha"] == "0.0"
    assert params["data.synth_ratio"] == "all"
    assert params["data.dprime_digest"] == read_manifest(small_dprime)["config_hash"]
    assert params["data.synth_mode"] == "removal"
    assert run.data.tags["xmr.checkpoint"] == str(result.last_checkpoint)
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")] == [1, 2]
    assert "final/test/odmap_at_1" in run.data.metrics
    assert {d.dataset.name for d in run.inputs.dataset_inputs} == {"toyworld/train", "D′"}

    again = train(config, tracking_uri=uri)  # the same name: resumes the finished run
    assert again.mlflow_run_id == result.mlflow_run_id
    assert again.metrics["test/odmap_at_5"] == result.metrics["test/odmap_at_5"]
    assert len(client.get_metric_history(run.info.run_id, "train/loss")) == 2  # no epoch redone
    experiment = client.get_experiment_by_name("xmr/train/toyworld")
    assert len(client.search_runs([experiment.experiment_id])) == 1

    changed = _config(small_toyworld, tmp_path / "runs", epochs=3, name=config.name)
    with pytest.raises(ValueError, match="another config"):
        train(changed, tracking_uri=uri)


def test_two_workers_train_data_parallel(local_ray, small_toyworld, tmp_path) -> None:
    """On D ∪ a BiAug D′: over both workers and both epochs every positive trains in one batch
    with its hard negative, and the ranks (which may pack different batch counts) keep step."""
    dprime = write_biaug_dprime(small_toyworld, tmp_path / "biaug", pairs=24)
    config = _config(small_toyworld, tmp_path / "runs", workers=2, synth=dprime)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = train(config, tracking_uri=uri)
    assert result.metrics["epoch"] == 2 and "test/recall_i2t_at_1" in result.metrics
    state = torch.load(result.last_checkpoint, weights_only=True)["model"]
    assert not any(key.startswith("module.") for key in state)  # DDP wrapper not saved
    client = mlflow.MlflowClient(uri)
    pairs = client.get_metric_history(result.mlflow_run_id, "train/pairs_together")
    assert [m.value for m in pairs] == [1.0, 1.0]
    params = client.get_run(result.mlflow_run_id).data.params
    assert (params["data.synth_mode"], params["data.hard_negatives"]) == ("biaug", "True")
    assert params["data.pairs_synthetic"] == "48"


def test_a_killed_worker_resumes_from_the_last_checkpoint(
    local_ray, small_toyworld, tmp_path
) -> None:
    config = _config(small_toyworld, tmp_path / "runs", epochs=3)
    killed: list[int] = []

    def kill_a_training_worker() -> None:
        deadline = time.monotonic() + 300
        first = tmp_path / "runs" / config.name / "epoch_0001"
        while not killed and time.monotonic() < deadline:
            if first.is_dir():
                for p in psutil.process_iter(["cmdline"]):
                    title = " ".join(p.info["cmdline"] or [])
                    if title.startswith("ray::RayTrainWorker"):
                        p.kill()
                        killed.append(p.pid)
                        break
            time.sleep(0.05)

    killer = threading.Thread(target=kill_a_training_worker)
    killer.start()
    result = train(config, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    killer.join()
    assert killed, "no training worker was found to kill"
    assert result.metrics["epoch"] == 3
    saved = torch.load(result.last_checkpoint, weights_only=True)
    assert saved["epoch"] == 3
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    steps = [m.step for m in client.get_metric_history(result.mlflow_run_id, "train/loss")]
    assert sorted(set(steps)) == [1, 2, 3]


@pytest.fixture(scope="module")
def small_shop_world(tmp_path_factory) -> Path:
    """A ToyWorld shop (products with brand, category, season, composition entities)."""
    spec = tmp_path_factory.mktemp("shop-config") / "shop.yaml"
    spec.write_text("mode: shop\nimage_size: 64\nsplits: {train: 80, val: 12, test: 12}\n")
    return generate_world(tmp_path_factory.mktemp("shop") / "w", spec, seed=4)


@pytest.mark.parametrize("family", ["vsepp", "blip", "eiclip"])
def test_each_family_trains_and_evaluates(
    local_ray, small_toyworld, small_shop_world, tmp_path, family: str
) -> None:
    """On two data-parallel workers, the harder case: each family's loss sees the other
    worker's batch (one worker is what the CLIP, demo and CLI tests run)."""
    workers = 2
    world = small_shop_world if family == "eiclip" else small_toyworld
    config = resolve_config(
        family, data=world, storage=tmp_path / "runs", epochs=1, batch_size=16, workers=workers
    )
    result = train(config, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    expected = ["train/loss", "test/recall_t2i_at_1"]
    if family == "eiclip":  # product entities: the EI-CLIP paper's protocols
        expected += ["test/sumr", "test/subcat_recall_t2i_at_1", "test/subcat_sumr"]
    else:
        expected += ["test/odmap_at_1", "test/bias_at_10"]
    for key in expected:
        assert np.isfinite(result.metrics[key]), key
    spec = ModelSpec.from_checkpoint(result.last_checkpoint)
    assert (spec.family, spec.arch) == (family, config.model.arch)
    model = create_model(spec)  # vocabularies come back from the checkpoint
    assert model.encode_texts(["a dog with a frisbee"]).shape == (1, model.embed_dim)
