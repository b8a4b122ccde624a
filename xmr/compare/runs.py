"""Runs to compare, from the tracking store: one by its id or name (:func:`find_run`), a
sweep's trials (:func:`sweep_runs`), an experiment's runs (:func:`experiment_runs`), and their
MLflow status.

Every run carries its MLflow status (:data:`FINISHED`, or RUNNING, FAILED, KILLED): a run that
did not finish has as metrics the last it logged. Whether to compare such a run at all is the
caller's choice (``xmr compare`` refuses one unless ``--allow-unfinished``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from xmr.tracking import (
    PARENT_TAG,
    experiment_id,
    experiment_names,
    resolve_tracking_uri,
    runs_frame,
)

FINISHED = "FINISHED"
"""The MLflow status of a run that ended well; any other (RUNNING, FAILED, KILLED, SCHEDULED)
means its metrics are the last it logged, perhaps not its final ones."""


def sweep_runs(sweep: str, *, tracking_uri: str | None = None) -> tuple[pd.DataFrame, list[str]]:
    """The trial runs of sweep ``sweep`` (its ``xmr.sweep_id``) and the sweep's metrics.

    Raises LookupError when no sweep has that id.
    """
    uri = resolve_tracking_uri(tracking_uri)
    parents = runs_frame({"xmr.sweep_id": sweep, "xmr.command": "tune"}, tracking_uri=uri)
    if parents.empty:
        raise LookupError(f"no sweep {sweep!r} in {uri} (see the parent runs of xmr/tune/...)")
    parent = parents.iloc[0]
    children = runs_frame(
        {PARENT_TAG: parent["run_id"]}, tracking_uri=uri, experiment_ids=[parent["experiment_id"]]
    )
    metrics = str(parent.get("tags.xmr.metrics") or "").split(",")
    return children, [m for m in metrics if m]


def experiment_runs(experiment: str, *, tracking_uri: str | None = None) -> pd.DataFrame:
    """Every run of ``experiment`` except sweep parents. LookupError when it doesn't exist."""
    uri = resolve_tracking_uri(tracking_uri)
    found = experiment_id(experiment, tracking_uri=uri)
    if found is None:
        names = experiment_names(tracking_uri=uri)
        raise LookupError(f"no experiment {experiment!r} in {uri}; there are: {', '.join(names)}")
    runs = runs_frame(tracking_uri=uri, experiment_ids=[found])
    if "tags.xmr.command" in runs:
        runs = runs[runs["tags.xmr.command"] != "tune"]
    return runs


def unfinished_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``runs`` (a :func:`~xmr.tracking.runs_frame`) whose status is not
    :data:`FINISHED`."""
    if runs.empty:
        return runs
    return runs[runs["status"] != FINISHED]


def describe_runs(runs: pd.DataFrame) -> str:
    """``name (run <id>, STATUS)`` for each row of ``runs`` (a
    :func:`~xmr.tracking.runs_frame`), comma-separated."""
    names = runs.get("tags.mlflow.runName", runs["run_id"]).fillna(runs["run_id"])
    return ", ".join(
        f"{name} (run {run_id}, {status})"
        for name, run_id, status in zip(names, runs["run_id"], runs["status"], strict=True)
    )


@dataclass(frozen=True)
class FoundRun:
    """A run given by its id or name (:func:`find_run`): its id, name and MLflow status."""

    run_id: str
    name: str
    status: str

    @property
    def finished(self) -> bool:
        """Whether the run ended well (:data:`FINISHED`)."""
        return self.status == FINISHED


def find_run(reference: str, *, tracking_uri: str) -> FoundRun:
    """The run given by its id or its name (in any experiment), whatever its status. A name
    that several runs share means its one finished run, when the others were interrupted or
    failed (a training stopped and started afresh leaves its first run behind).

    Raises LookupError when no run, or more than one finished run, answers to ``reference``.
    """
    frame = runs_frame(tracking_uri=tracking_uri)
    if frame.empty:
        raise LookupError(f"no runs in {tracking_uri}")
    names = frame.get("tags.mlflow.runName", pd.Series([""] * len(frame), index=frame.index))
    by_id = frame[frame["run_id"] == reference]
    found = by_id if not by_id.empty else frame[names == reference]
    if found.empty:
        raise LookupError(f"no run with the id or name {reference!r} in {tracking_uri}")
    finished = found["status"] == FINISHED
    if len(found) > 1 and finished.sum() == 1:
        found = found[finished]
    if len(found) > 1:
        ids = ", ".join(
            f"{run_id} ({status})"
            for run_id, status in zip(found["run_id"], found["status"], strict=True)
        )
        raise LookupError(f"{len(found)} runs are named {reference!r}: {ids}; give a run id")
    row = found.iloc[0]
    name = names.loc[found.index[0]]
    return FoundRun(
        str(row["run_id"]),
        str(name if pd.notna(name) and name else row["run_id"]),
        str(row["status"]),
    )
