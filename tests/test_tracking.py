"""MLflow conventions: store resolution, names MLflow accepts, artifacts beside the sqlite db,
runs remembered in a local record."""

from __future__ import annotations

import json
import time
from pathlib import Path

import mlflow
import pytest

from xmr.tracking import (
    EXPERIMENT_KIND,
    TrackedRun,
    experiment_name,
    find_runs,
    recorded_run,
    resolve_tracking_uri,
    resume_run,
    start_run,
    write_run_record,
)


def test_tracking_uri_order(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_tracking_uri() == f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert resolve_tracking_uri() == "http://127.0.0.1:5000"
    # A relative sqlite path is the working directory's: a run record written from here
    # finds its store again from anywhere, and under an absolute URI naming the same file.
    assert resolve_tracking_uri("sqlite:///x.db") == f"sqlite:///{tmp_path / 'x.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///runs/m.db?timeout=5")
    assert resolve_tracking_uri() == f"sqlite:///{tmp_path / 'runs/m.db'}?timeout=5"
    assert resolve_tracking_uri("sqlite:///:memory:") == "sqlite:///:memory:"


def test_start_run_puts_artifacts_beside_the_database(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    artifact = tmp_path / "note.txt"
    artifact.write_text("hello")
    with start_run("xmr/test/unit", run_name="r1", tracking_uri=uri, tags={"k": "v"}) as run:
        run.log_metrics({"test/odmap_at_1": 0.5})
        run.log_params({"model.arch": "tiny", "train.epochs": 2})
        run.log_artifact(artifact)
    stored = mlflow.MlflowClient(uri).get_run(run.run_id)
    assert stored.info.status == "FINISHED" and stored.info.run_name == "r1"
    assert stored.data.metrics["test/odmap_at_1"] == 0.5
    assert stored.data.params == {"model.arch": "tiny", "train.epochs": "2"}
    assert stored.data.tags["k"] == "v"
    assert (tmp_path / "store" / "mlartifacts" / "xmr_test_unit").is_dir()
    assert list((tmp_path / "store" / "mlartifacts").rglob("note.txt"))


def test_every_experiment_says_it_is_model_training(tmp_path: Path) -> None:
    """The MLflow UI opens an experiment by its kind: xmr's are model training (their runs), a
    store made before the tag gets it, and a kind the user chose stays."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    older = client.create_experiment("xmr/old")
    client.create_experiment("xmr/chosen", tags={"mlflow.experimentKind": "genai_development"})
    for name in ("xmr/new", "xmr/old", "xmr/chosen"):
        with start_run(name, tracking_uri=uri):
            pass
    kinds = {name: client.get_experiment_by_name(name).tags.get("mlflow.experimentKind")
             for name in ("xmr/new", "xmr/old", "xmr/chosen")}  # fmt: skip
    assert kinds == {"xmr/new": "custom_model_development", "xmr/old": "custom_model_development",
                     "xmr/chosen": "genai_development"}  # fmt: skip
    assert client.get_experiment(older).tags == EXPERIMENT_KIND


def test_a_run_logged_after_its_work_starts_when_the_work_did(tmp_path: Path) -> None:
    """``started``: the run's start is the work's (an evaluation, a build logged at its end),
    so the UI's duration is the work's; nested and named as any run."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with start_run("xmr/parent", tracking_uri=uri) as parent:
        pass
    began = time.time() - 42.0
    with start_run("xmr/parent", tracking_uri=uri, run_name="late", started=began,
                   parent_run_id=parent.run_id) as run:  # fmt: skip
        run.log_metrics({"x": 1.0})
    info = mlflow.MlflowClient(uri).get_run(run.run_id)
    assert info.info.start_time == int(began * 1000) and info.info.status == "FINISHED"
    assert (info.info.end_time - info.info.start_time) / 1000 >= 42.0
    assert info.info.run_name == "late" and info.data.tags["mlflow.parentRunId"] == parent.run_id


def test_a_recorded_run_is_continued_and_ends_once(tmp_path: Path) -> None:
    """A run that outlives its process (a training run, a sweep): RUNNING after it is created,
    found again through its record on the same store only, FAILED when a resumed block raises."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    record = tmp_path / "run" / "xmr_run.json"
    assert recorded_run(record, "mlflow_run_id", uri) is None
    experiment = experiment_name("train", "toyworld")
    tags = {"xmr.trial_id": "t1"}
    with start_run(experiment, tracking_uri=uri, tags=tags, keep_running=True) as run:
        run.set_tag("xmr.role", "kept")
    write_run_record(record, run, "mlflow_run_id", {"config": {"epochs": 1}})
    assert json.loads(record.read_text()) == {
        "config": {"epochs": 1}, "mlflow_run_id": run.run_id, "tracking_uri": uri
    }  # fmt: skip
    assert client.get_run(run.run_id).info.status == "RUNNING"
    run.end("KILLED")

    again = recorded_run(record, "mlflow_run_id", uri)
    assert again == TrackedRun(run.run_id, uri)
    assert client.get_run(run.run_id).info.status == "RUNNING"  # reopened
    assert recorded_run(record, "mlflow_run_id", f"sqlite:///{tmp_path / 'other.db'}") is None
    with pytest.raises(RuntimeError), resume_run(run.run_id, tracking_uri=uri):
        raise RuntimeError("the resumed attempt fails")
    assert client.get_run(run.run_id).info.status == "FAILED"
    (found,) = find_runs(experiment, {"xmr.trial_id": "t1"}, tracking_uri=uri)
    assert found.info.run_id == run.run_id and found.data.tags["xmr.role"] == "kept"
    assert find_runs("xmr/train/none", {"xmr.trial_id": "t1"}, tracking_uri=uri) == []


def test_a_record_of_a_run_the_store_lost_is_refused_in_one_line(tmp_path: Path) -> None:
    """The database was removed (or the run deleted) but the run folder stayed: a rerun says
    what to remove instead of failing inside MLflow."""
    record = tmp_path / "run" / "xmr_run.json"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with start_run("xmr/test/unit", tracking_uri=uri, keep_running=True) as run:
        pass
    write_run_record(record, run, "mlflow_run_id", {})
    mlflow.MlflowClient(uri).delete_run(run.run_id)
    with pytest.raises(LookupError, match=f"remembers MLflow run {run.run_id}.*remove"):
        recorded_run(record, "mlflow_run_id", uri)
    (tmp_path / "mlflow.db").unlink()
    with pytest.raises(LookupError, match=f"{record}.*no longer has"):
        recorded_run(record, "mlflow_run_id", uri)
