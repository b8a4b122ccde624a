"""MLflow conventions shared by every xmr command.

- Tracking store: ``--tracking-uri`` > ``MLFLOW_TRACKING_URI`` > ``sqlite:///mlflow.db`` in the
  working directory (MLflow 3 rejects plain file stores).
- Experiments are named ``xmr/<command>/<dataset>``; with a sqlite store their artifacts go to
  ``mlartifacts/`` next to the database, wherever the command runs from.
- Params are namespaced (``model.arch``, ``data.dataset``); metric names use ``_at_`` instead of
  ``@`` (``test/odmap_at_1``), which MLflow does not accept.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import mlflow

DEFAULT_DB = "mlflow.db"
PARENT_TAG = "mlflow.parentRunId"  # how MLflow (and its UI) nests a run under another


def resolve_tracking_uri(uri: str | None = None) -> str:
    """The tracking URI a command uses (see module docstring for the order)."""
    if uri:
        return uri
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return f"sqlite:///{Path.cwd() / DEFAULT_DB}"


def _artifact_location(tracking_uri: str, experiment: str) -> str | None:
    """Artifacts of a sqlite store live beside the database; servers choose their own."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    db = Path(tracking_uri.removeprefix("sqlite:///"))
    return (db.parent / "mlartifacts" / experiment.replace("/", "_")).resolve().as_uri()


@contextmanager
def start_run(
    experiment: str,
    *,
    run_name: str | None = None,
    tracking_uri: str | None = None,
    tags: Mapping[str, str] | None = None,
    parent_run_id: str | None = None,
) -> Iterator[mlflow.ActiveRun]:
    """Open an MLflow run in ``experiment`` (created on first use) on the resolved store.

    ``parent_run_id``: nest the run under that one (a sweep's trial under its sweep; the parent
    must be in the same experiment for the UI to group them).
    """
    uri = resolve_tracking_uri(tracking_uri)
    mlflow.set_tracking_uri(uri)
    if mlflow.get_experiment_by_name(experiment) is None:
        try:
            mlflow.create_experiment(
                experiment, artifact_location=_artifact_location(uri, experiment)
            )
        except mlflow.exceptions.MlflowException:  # created meanwhile by a concurrent trial
            if mlflow.get_experiment_by_name(experiment) is None:
                raise
    mlflow.set_experiment(experiment)
    tags = dict(tags or {})
    if parent_run_id:
        tags[PARENT_TAG] = parent_run_id
    with mlflow.start_run(run_name=run_name, tags=tags) as run:
        yield run
