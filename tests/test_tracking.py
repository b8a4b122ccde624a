"""MLflow conventions: store resolution, names MLflow accepts, artifacts beside the sqlite db."""

from __future__ import annotations

from pathlib import Path

import mlflow

from xmr.tracking import resolve_tracking_uri, start_run


def test_tracking_uri_order(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_tracking_uri() == f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert resolve_tracking_uri() == "http://127.0.0.1:5000"
    assert resolve_tracking_uri("sqlite:///x.db") == "sqlite:///x.db"


def test_start_run_puts_artifacts_beside_the_database(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    artifact = tmp_path / "note.txt"
    artifact.write_text("hello")
    with start_run("xmr/test/unit", run_name="r1", tracking_uri=uri, tags={"k": "v"}) as run:
        mlflow.log_metric("test/odmap_at_1", 0.5)
        mlflow.log_artifact(str(artifact))
    stored = mlflow.get_run(run.info.run_id)
    assert stored.data.metrics["test/odmap_at_1"] == 0.5
    assert stored.data.tags["k"] == "v"
    assert (tmp_path / "store" / "mlartifacts" / "xmr_test_unit").is_dir()
    assert list((tmp_path / "store" / "mlartifacts").rglob("note.txt"))
