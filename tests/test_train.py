"""`xmr train` end to end on a local Ray: Ray Train workers, D ∪ D′, checkpoints, resume,
worker failure, MLflow."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import mlflow
import numpy as np
import psutil
import pytest
import torch
from biaug_fixture import write_biaug_dprime
from typer.testing import CliRunner

from xmr.cli import app
from xmr.data import read_dataset
from xmr.data.synthetic import read_manifest
from xmr.eval.config import EvalConfig
from xmr.eval.encode import local_encoder
from xmr.eval.score import evaluate
from xmr.models import ModelSpec, create_model
from xmr.progress import PARTS
from xmr.synth.config import load_configs
from xmr.synth.methods import synthesize
from xmr.synth.runner import ray_executor
from xmr.tracking import PARENT_TAG
from xmr.train.config import resolve_config
from xmr.train.data import collate, training_data
from xmr.train.run import train

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def small_dprime(small_toyworld, local_ray, nltk_tagger, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dprime") / "out"
    options = {"data": small_toyworld, "out": out, "progress": False, "log_mlflow": False}
    config, runtime = load_configs(None, options)
    synthesize(config, runtime, executor=ray_executor(runtime))
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


def test_xmr_train_from_the_data_folder_logs_to_mlflow_and_resumes(
    local_ray, small_toyworld, small_dprime, tmp_path, capsys
) -> None:
    """``xmr train --data world --synth dprime ... | tee log`` from the folder holding both (the
    Ray Train workers run elsewhere): CLIP trains on D ∪ D′; a --synth-ratio beyond D′ is said
    and the ratio used is logged; progress in the log is a few whole lines; MLflow has the run,
    its data and its metrics; the same config again reuses the finished run (resuming from a
    checkpoint: the killed-worker test here, and from a bucket in test_storage_train), another
    config is refused."""
    (tmp_path / "world").symlink_to(small_toyworld)
    (tmp_path / "dprime").symlink_to(small_dprime)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    env.pop("RAY_ADDRESS", None)
    scratch = set(Path(tempfile.gettempdir()).glob("xmr-ckpt-*"))
    done = subprocess.run(
        [sys.executable, "-m", "xmr.cli", "train", "--dataset", "toyworld", "--data", "world",
         "--synth", "dprime", "--synth-ratio", "2", "--epochs", "2", "--batch-size", "16",
         "--eval-every", "1", "--storage", "runs", "--name", "clip",
         "--tracking-uri", "sqlite:///mlflow.db"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=900,
    )  # fmt: skip
    log = done.stdout  # as `| tee` or a job log sees it: not a terminal
    assert done.returncode == 0, log[-4000:]
    assert "--synth-ratio 2 asks for" in log
    # Each epoch's checkpoint is written to a scratch folder that goes once Ray Train has it.
    assert set(Path(tempfile.gettempdir()).glob("xmr-ckpt-*")) <= scratch
    # Progress in a log: a line per tenth of an epoch, no bars (tqdm_ray's nor Ray Data's),
    # each epoch line once, no PlacementGroupCleaner traceback or warnings. The raylet's own
    # lines are not progress (on a nearly full disk it warns "over 95% full"), nor is the
    # summary's note on its intervals ("95% bootstrap intervals").
    ours = "\n".join(
        line
        for line in log.splitlines()
        if "(raylet)" not in line and "bootstrap intervals" not in line
    )
    assert 2 <= len(re.findall(r"\d+%", ours)) <= 2 * PARTS, log[-4000:]
    assert re.search(r"epoch 2/2: 100% \((\d+)/\1 steps, ", log), log[-4000:]
    assert [len(re.findall(rf"epoch {e}/2 \| loss", log)) for e in (1, 2)] == [1, 1]
    assert "PlacementGroupCleaner" not in log, log[-4000:]
    lines = log.splitlines()
    tracebacks = [i for i, line in enumerate(lines) if "Traceback" in line]
    # Only Ray Train's own warning when its autoscaling coordinator answers late (a loaded
    # machine), which says it is safe to ignore.
    assert all("Failed to send resource request" in lines[i - 1] for i in tracebacks), log[-4000:]

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("xmr/train/toyworld")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert params["model.family"] == "clip" and params["loss.fair_alpha"] == "0.0"
    assert params["data.root"] == str((tmp_path / "world").resolve())
    assert params["data.synth_ratio"] == "2.0"  # asked for; what was used:
    written = read_manifest(small_dprime)["written"]
    used = written / int(params["data.pairs_original"])
    assert used < 2 and float(params["data.synth_ratio_used"]) == pytest.approx(used, rel=1e-4)
    assert params["data.dprime_digest"] == read_manifest(small_dprime)["config_hash"]
    assert params["data.synth_mode"] == "removal"
    last = tmp_path / "runs" / "clip" / "last.pt"
    assert run.data.tags["xmr.checkpoint"] == str(last.resolve())
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")] == [1, 2]
    for key in ("test/recall_t2i_at_1", "test/odmap_at_5", "test/bias_at_10"):
        final = run.data.metrics[f"final/{key}"]
        low, high = (run.data.metrics[f"final/{key}_ci_{end}"] for end in ("low", "high"))
        assert low <= final <= high, key
    # the final evaluation's per-query values, which `xmr compare RUN_A RUN_B` pairs
    assert "per_query.parquet" in {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {d.dataset.name for d in run.inputs.dataset_inputs} == {"toyworld/train", "D′"}
    spec = ModelSpec.from_checkpoint(last)
    assert (spec.family, spec.arch) == ("clip", "xmr-tiny")
    trained = create_model(spec)
    fresh = create_model("clip", arch="xmr-tiny", seed=0)
    text = ["a dog with a frisbee"]
    assert not torch.allclose(trained.encode_texts(text), fresh.encode_texts(text))

    config = _config(tmp_path / "world", tmp_path / "runs", synth=tmp_path / "dprime",
                     synth_ratio=2.0, eval_every=1, name="clip")  # fmt: skip
    again = train(config, tracking_uri=uri)  # the same config, finished: reused without Ray
    assert "its results are reused" in capsys.readouterr().out
    assert again.mlflow_run_id == run.info.run_id and again.metrics["epoch"] == 2
    assert again.metrics["test/odmap_at_5"] == run.data.metrics["final/test/odmap_at_5"]
    assert "val/recall_i2t_at_5" in again.metrics and again.best_checkpoint is not None

    changed = _config(tmp_path / "world", tmp_path / "runs", epochs=3, name="clip")
    with pytest.raises(ValueError, match="another config"):
        train(changed, tracking_uri=uri)


VAL_METRIC = "val/recall_i2t_at_1"


def _logged_epochs(uri: str) -> int:
    """The last epoch whose val evaluation the training run in ``uri`` has logged (0: none)."""
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("xmr/train/toyworld")
    runs = client.search_runs([experiment.experiment_id]) if experiment else []
    steps = [p.step for r in runs for p in client.get_metric_history(r.info.run_id, VAL_METRIC)]
    return max(steps, default=0)


def test_epochs_auto_stops_on_a_plateau_tests_the_best_weights_and_resumes_its_count(
    small_toyworld, tmp_path
) -> None:
    """``xmr train --epochs auto --patience 3 --min-delta 600`` (no evaluation can gain 600
    RSUM points, so the count starts at the first evaluation and the run stops at epoch 4),
    stopped by SIGTERM after epoch 2's checkpoint and run again: the second process resumes
    the same MLflow run with the plateau's count (a fresh count would stop at epoch 6, the
    cap); the run tests the weights of the best val evaluation (``last.pt`` holds them, equal
    to ``best.pt``, and `xmr eval` on them gives the final metrics); its stop epoch, best
    epoch and reason are logged."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    env.pop("RAY_ADDRESS", None)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    command = [sys.executable, "-m", "xmr.cli", "train", "--data", str(small_toyworld),
               "--batch-size", "16", "--epochs", "auto", "--patience", "3", "--min-delta", "600",
               "--max-epochs", "6", "--storage", str(tmp_path / "runs"), "--name", "auto",
               "--tracking-uri", uri]  # fmt: skip
    first = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    # Stopped once epoch 2 is both checkpointed and logged: the checkpoint is stored before the
    # driver logs the epoch's metrics, and a stop between the two loses that epoch's curve point.
    # (The store is read only once the checkpoint shows the run has created it.)
    second_checkpoint = tmp_path / "runs" / "auto" / "epoch_0002"
    deadline = time.monotonic() + 600
    while not (second_checkpoint.is_dir() and _logged_epochs(uri) >= 2) and first.poll() is None:
        assert time.monotonic() < deadline, "no second logged checkpoint in 10 minutes"
        time.sleep(0.2)
    first.send_signal(signal.SIGTERM)
    log, _ = first.communicate(timeout=300)
    assert first.returncode == 143, log[-4000:]
    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("xmr/train/toyworld").experiment_id])
    assert run.info.status == "KILLED"
    assert "epoch 1/≤6 | loss" in log

    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:]
    resumed = client.get_run(run.info.run_id)
    assert resumed.info.status == "FINISHED"
    rsum = {}
    for metric in [f"val/recall_{d}_at_{k}" for d in ("i2t", "t2i") for k in (1, 5, 10)]:
        for point in client.get_metric_history(run.info.run_id, metric):
            rsum[point.step] = rsum.get(point.step, 0.0) + 100 * point.value
    assert sorted(rsum) == [1, 2, 3, 4]  # each epoch evaluated once, none after the stop
    best_epoch = max(rsum, key=lambda epoch: (rsum[epoch], -epoch))  # the first of the best
    metrics = resumed.data.metrics
    assert (metrics["train/stopped_epoch"], metrics["train/plateaued"]) == (4, 1)
    assert metrics["train/best_epoch"] == best_epoch
    reason = resumed.data.tags["xmr.stop_reason"]
    assert f"stopped at epoch 4, tested with the best epoch's weights (epoch {best_epoch})" in (
        reason
    )
    assert reason in done.stdout
    assert resumed.data.params["train.epochs"] == "auto"
    assert resumed.data.params["train.patience"] == "3"
    last = torch.load(tmp_path / "runs" / "auto" / "last.pt", weights_only=True)["model"]
    best = torch.load(tmp_path / "runs" / "auto" / "best.pt", weights_only=True)["model"]
    assert all(torch.equal(last[key], best[key]) for key in best)
    spec = ModelSpec.from_checkpoint(tmp_path / "runs" / "auto" / "last.pt")
    scorer = create_model(spec)
    evaluated = evaluate(
        EvalConfig(model=spec, dataset="toyworld", data=small_toyworld, split="test"),
        local_encoder(scorer),
        model=scorer,
    ).metrics
    for key in ("test/recall_t2i_at_1", "test/recall_i2t_at_5", "test/odmap_at_1"):
        assert evaluated[key] == pytest.approx(metrics[f"final/{key}"]), key


STEPS = 60  # of the killed-worker run: about 40 in its first epoch, the rest in its second


def test_two_workers_keep_pairs_together_and_survive_a_killed_worker(
    local_ray, small_toyworld, tmp_path
) -> None:
    """On D ∪ a BiAug D′ over two data-parallel workers, for --steps 60: a training worker
    killed after the first checkpoint costs only the epoch in flight (training resumes from that
    checkpoint, scheduler included, and ends at epoch 2 after exactly 60 optimiser steps, the
    second epoch cut short), and in every epoch each positive trains in one batch with its hard
    negative."""
    dprime = write_biaug_dprime(small_toyworld, tmp_path / "biaug", pairs=24)
    config = _config(
        small_toyworld, tmp_path / "runs", workers=2, synth=dprime, epochs=None, steps=STEPS
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    killed: list[int] = []

    def kill_a_training_worker() -> None:
        deadline = time.monotonic() + 300
        first = tmp_path / "runs" / config.name / "epoch_0001"
        while not killed and time.monotonic() < deadline:
            if first.is_dir():
                # this session's Ray runs under this process: leave other Ray clusters alone
                for p in psutil.Process().children(recursive=True):
                    try:
                        title = " ".join(p.cmdline())
                    except psutil.Error:
                        continue
                    if title.startswith("ray::RayTrainWorker"):
                        p.kill()
                        killed.append(p.pid)
                        break
            time.sleep(0.05)

    killer = threading.Thread(target=kill_a_training_worker)
    killer.start()
    result = train(config, tracking_uri=uri)
    killer.join()
    assert killed, "no training worker was found to kill"
    assert result.metrics["epoch"] == 2 and "test/recall_i2t_at_1" in result.metrics
    saved = torch.load(result.last_checkpoint, weights_only=True)
    assert saved["epoch"] == 2
    assert not any(key.startswith("module.") for key in saved["model"])  # no DDP wrapper
    client = mlflow.MlflowClient(uri)
    steps = [m.step for m in client.get_metric_history(result.mlflow_run_id, "train/loss")]
    assert sorted(set(steps)) == [1, 2]
    pairs = client.get_metric_history(result.mlflow_run_id, "train/pairs_together")
    assert {m.step for m in pairs} == {1, 2} and {m.value for m in pairs} == {1.0}
    params = client.get_run(result.mlflow_run_id).data.params
    assert (params["data.synth_mode"], params["data.hard_negatives"]) == ("biaug", "True")
    assert params["data.pairs_synthetic"] == "48"
    history = client.get_metric_history(result.mlflow_run_id, "train/steps")
    per_epoch = {m.step: m.value for m in history}
    assert per_epoch[1] > STEPS - per_epoch[1] == per_epoch[2] > 0  # the last epoch cut short
    assert result.metrics["train/global_step"] == STEPS
    assert (params["train.steps"], params["train.total_steps"]) == (str(STEPS), str(STEPS))
    assert params["train.epochs"] == "2"


def test_xmr_train_seeds_nests_a_run_per_seed_each_stopped_after_its_steps(
    local_ray, small_toyworld, tmp_path
) -> None:
    """``xmr train --seeds 0,1 --steps 7`` on 20 pairs (5 steps of 4 per epoch): a run per seed
    (``grp-seed0``, ``grp-seed1``), each stopped after exactly 7 optimiser steps (its second
    epoch cut to 2), nested in MLflow under the parent run ``grp``, which holds the shared
    params, the seeds and every final metric's mean and sample std over its children; the
    same command again reuses both runs and the parent; --seed with --seeds is refused."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["train", "--data", str(small_toyworld), "--split", "val", "--batch-size", "4",
            "--steps", "7", "--seeds", "0,1", "--storage", str(tmp_path / "runs"),
            "--name", "grp", "--tracking-uri", uri]  # fmt: skip
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    assert "grp: test split, mean ± std over 2 seeds" in done.output
    assert "seed 1: 2 epochs, 7 optimiser steps" in done.output

    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("xmr/train/toyworld").experiment_id
    runs = {run.info.run_name: run for run in client.search_runs([experiment])}
    assert set(runs) == {"grp", "grp-seed0", "grp-seed1"}
    parent, children = runs["grp"], [runs["grp-seed0"], runs["grp-seed1"]]
    assert {run.info.status for run in runs.values()} == {"FINISHED"}
    assert all(child.data.tags[PARENT_TAG] == parent.info.run_id for child in children)
    assert PARENT_TAG not in parent.data.tags
    assert [child.data.params["train.seed"] for child in children] == ["0", "1"]
    for child in children:
        history = client.get_metric_history(child.info.run_id, "train/steps")
        assert {m.step: m.value for m in history} == {1: 5, 2: 2}
        assert child.data.metrics["train/global_step"] == 7
        assert child.data.params["train.total_steps"] == "7"
    shared = parent.data.params
    assert (shared["train.seeds"], shared["train.steps"], shared["train.batch_size"]) == (
        "0,1", "7", "4"
    )  # fmt: skip
    assert "train.seed" not in shared and "train.epochs" not in shared
    finals = [
        {key: value for key, value in child.data.metrics.items()
         if key.startswith("final/") and "_ci_" not in key}
        for child in children
    ]  # fmt: skip
    assert finals[0].keys() == finals[1].keys() and "final/test/odmap_at_1" in finals[0]
    expected = {}
    for key in finals[0]:
        values = np.array([final[key] for final in finals])
        expected[f"{key}_mean"], expected[f"{key}_std"] = values.mean(), values.std(ddof=1)
    assert parent.data.metrics == pytest.approx(expected)

    again = CliRunner().invoke(app, args)  # both runs finished: reused, under the same parent
    assert again.exit_code == 0, again.output
    assert again.output.count("its results are reused") == 2
    assert len(client.search_runs([experiment])) == 3
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"
    assert client.get_run(parent.info.run_id).data.metrics == pytest.approx(expected)

    refused = CliRunner().invoke(app, [*args, "--seed", "1"])
    assert refused.exit_code == 2
    assert "error: --seed and --seeds exclude each other" in refused.output


@pytest.mark.parametrize("family", ["vsepp", "blip"])
def test_each_family_trains_and_evaluates(local_ray, small_toyworld, tmp_path, family: str) -> None:
    """On two data-parallel workers under bf16 autocast, each accumulating 2 micro-batches per
    step, the harder case: each family's loss sees the other worker's batch (one worker and
    fp32 is what the CLIP, demo and CLI tests run; EI-CLIP trains on two in the EI-CLIP job's
    test). The checkpoint stays float32 and `xmr eval` scores it as the training's own test
    evaluation did."""
    # VSE++ warms up on the summed hinge for an epoch, then takes the hardest negative
    warm_up = {"epochs": 2, "max_violation_after": 1} if family == "vsepp" else {"epochs": 1}
    config = resolve_config(
        family, data=small_toyworld, storage=tmp_path / "runs", batch_size=16,
        workers=2, precision="bf16", accum_steps=2, **warm_up,
    )  # fmt: skip
    result = train(config, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    for key in ("train/loss", "test/recall_t2i_at_1", "test/odmap_at_1", "test/bias_at_10",
                "test/gendered_share_at_10", "test/male_share_at_10"):  # fmt: skip
        assert np.isfinite(result.metrics[key]), key
    if family == "vsepp":  # a sum over the batch's 15 negatives, then one negative per row
        client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
        summed, hardest = (
            m.value for m in client.get_metric_history(result.mlflow_run_id, "train/loss")
        )
        assert hardest < summed / 3, (summed, hardest)
    weights = torch.load(result.last_checkpoint, weights_only=True)["model"]
    assert {t.dtype for t in weights.values() if t.is_floating_point()} == {torch.float32}
    spec = ModelSpec.from_checkpoint(result.last_checkpoint)
    assert (spec.family, spec.arch) == (family, config.model.arch)
    model = create_model(spec)  # vocabularies come back from the checkpoint
    assert model.encode_texts(["a dog with a frisbee"]).shape == (1, model.embed_dim)
    evaluated = evaluate(
        EvalConfig(model=spec, dataset="toyworld", data=small_toyworld, split="test"),
        local_encoder(model),
        model=model,
    ).metrics
    for key in ("test/recall_t2i_at_1", "test/recall_i2t_at_5", "test/odmap_at_1"):
        assert evaluated[key] == pytest.approx(result.metrics[key]), key


def test_the_summary_shows_each_final_metric_with_its_interval(tmp_path) -> None:
    from types import SimpleNamespace

    from rich.console import Console

    from xmr.train.report import print_summary
    from xmr.train.result import TrainResult

    metrics = {
        "test/recall_t2i_at_1": 0.25, "test/recall_t2i_at_1_ci_low": 0.2,
        "test/recall_t2i_at_1_ci_high": 0.3, "test/bias_at_1": 0.1, "test/binding/swap_acc": 0.5,
    }  # fmt: skip
    data = SimpleNamespace(original=100, synthetic=0)
    result = TrainResult(metrics, tmp_path, tmp_path / "last.pt", None, "run-id", data, "exp")
    console = Console(record=True, width=120)
    print_summary(result, _config(tmp_path, tmp_path, epochs=1), console)
    text = console.export_text()
    assert "0.250 [0.200, 0.300]" in text and "recall_t2i_at_1_ci" not in text
    assert "0.100" in text and "binding/swap_acc" in text and "[low, high]: 95% bootstrap" in text
