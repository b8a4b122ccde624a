"""``xmr compare`` states run status: a run that is not FINISHED (RUNNING, FAILED, KILLED) is
refused, or left out of a sweep's or experiment's table, unless ``--allow-unfinished``, which
compares it marked in the table and in ``--json``. Real MLflow runs in a sqlite store."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import numpy as np
import pytest
from typer.testing import CliRunner

from xmr.cli import app
from xmr.compare.per_query import PER_QUERY_FILE, QueryValues, write_per_query
from xmr.tracking import PARENT_TAG

runner = CliRunner(env={"COLUMNS": "200"})  # rich tables unwrapped
QUERIES = [f"{i}:a query" for i in range(20)]


def _flat(text: str) -> str:
    """``text`` with its whitespace runs as one space (rich wraps a title or caption to the
    table's width)."""
    return " ".join(text.split())


def _run(
    client: mlflow.MlflowClient,
    experiment: str,
    name: str,
    *,
    status: str | None,
    recall: float,
    params: dict[str, str] | None = None,
    tags: dict[str, str] | None = None,
    folder: Path | None = None,
) -> str:
    """A run named ``name`` with test/recall_t2i_at_10 ``recall`` (and, with ``folder``, the
    per-query values it averages), ended with ``status`` (None: left RUNNING)."""
    run_id = client.create_run(experiment, run_name=name, tags=tags).info.run_id
    client.log_metric(run_id, "test/recall_t2i_at_10", recall)
    for key, value in (params or {}).items():
        client.log_param(run_id, key, value)
    if folder is not None:
        hits = np.zeros(len(QUERIES))
        hits[: round(recall * len(QUERIES))] = 1.0
        sets = {"t2i": QueryValues(QUERIES, {"test/recall_t2i_at_10": hits})}
        path = folder / name / PER_QUERY_FILE
        path.parent.mkdir(parents=True)
        client.log_artifact(run_id, str(write_per_query(sets, path)))
    if status is not None:
        client.set_terminated(run_id, status=status)
    return run_id


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, mlflow.MlflowClient]:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return uri, mlflow.MlflowClient(uri)


def test_two_runs_one_running_are_refused_unless_allowed_and_then_marked(
    store, tmp_path: Path
) -> None:
    uri, client = store
    experiment = client.create_experiment("xmr/eval/toyworld")
    first = _run(client, experiment, "done", status="FINISHED", recall=0.5, folder=tmp_path)
    second = _run(client, experiment, "going", status=None, recall=0.7, folder=tmp_path)
    failed = _run(client, experiment, "broke", status="FAILED", recall=0.1)  # no per-query file
    assert client.get_run(second).info.status == "RUNNING"
    args = ["--tracking-uri", uri]

    refused = runner.invoke(app, ["compare", "done", "going", *args])
    assert refused.exit_code == 2, refused.output
    assert refused.stdout == ""  # nothing compared, no table
    assert refused.stderr.strip() == (
        f"error: going (run {second}) is RUNNING, not FINISHED: its metrics may not be final; "
        "--allow-unfinished compares it anyway, marked"
    )
    # refused before anything is read: the failed run has no per-query values to complain of
    both = runner.invoke(app, ["compare", "broke", second, *args])
    assert both.exit_code == 2 and len(both.stderr.strip().splitlines()) == 1, both.output
    assert (
        f"broke (run {failed}) is FAILED and going (run {second}) is RUNNING, not FINISHED: "
        "their metrics may not be final; --allow-unfinished compares them anyway" in both.stderr
    )

    out = tmp_path / "paired.json"
    allowed = runner.invoke(
        app, ["compare", "done", "going", "--allow-unfinished", "--json", str(out), *args]
    )
    assert allowed.exit_code == 0, allowed.output
    assert "A = done, B = going (RUNNING)" in _flat(allowed.stdout)
    assert "B is RUNNING, not FINISHED: values as last logged" in _flat(allowed.stdout)
    document = json.loads(out.read_text())
    assert document["runs"] == [
        {"role": "A", "run_id": first, "name": "done", "status": "FINISHED"},
        {"role": "B", "run_id": second, "name": "going", "status": "RUNNING"},
    ]
    (row,) = document["metrics"]
    assert row["metric"] == "test/recall_t2i_at_10"
    assert row["difference"] == pytest.approx(0.2)

    # two finished runs: no marker, as before
    again = _run(client, experiment, "again", status="FINISHED", recall=0.6, folder=tmp_path)
    plain = runner.invoke(app, ["compare", "done", again, "--json", str(out), *args])
    assert plain.exit_code == 0, plain.output
    assert "A = done, B = again (" not in _flat(plain.stdout) and "not FINISHED" not in _flat(
        plain.stdout
    )
    assert [r["status"] for r in json.loads(out.read_text())["runs"]] == ["FINISHED"] * 2


def test_an_experiment_leaves_unfinished_runs_out_unless_allowed_and_then_marks_them(
    store, tmp_path: Path
) -> None:
    uri, client = store
    experiment = client.create_experiment("xmr/train/toyworld")
    runs = {
        name: _run(client, experiment, name, status=status, recall=recall, params={"lr": lr})
        for name, status, recall, lr in (
            ("lr1", "FINISHED", 0.4, "0.1"),
            ("lr2", "FINISHED", 0.5, "0.2"),
            ("lr3", None, 0.3, "0.3"),
            ("lr4", "KILLED", 0.2, "0.4"),
        )
    }
    args = ["--experiment", "xmr/train/toyworld", "--tracking-uri", uri]
    out = tmp_path / "table.json"

    shown = runner.invoke(app, ["compare", *args, "--json", str(out)])
    assert shown.exit_code == 0, shown.output
    assert "experiment xmr/train/toyworld: 2 runs, 2 not FINISHED left out" in _flat(shown.stdout)
    assert "lr3" not in _flat(shown.stdout) and "lr4" not in _flat(shown.stdout)
    note = shown.stderr.strip()
    assert note.startswith("left out 2 run(s) of experiment xmr/train/toyworld")
    assert (
        f"lr3 (run {runs['lr3']}, RUNNING)" in note and f"lr4 (run {runs['lr4']}, KILLED)" in note
    )
    assert {r["run"]: r["status"] for r in json.loads(out.read_text())["runs"]} == {
        "lr1": "FINISHED",
        "lr2": "FINISHED",
    }

    allowed = runner.invoke(app, ["compare", *args, "--allow-unfinished", "--json", str(out)])
    assert allowed.exit_code == 0, allowed.output
    assert "experiment xmr/train/toyworld: 4 runs" in _flat(allowed.stdout)
    assert "2 of 4 runs not FINISHED (KILLED, RUNNING)" in _flat(allowed.stdout)
    lines = {
        line.split("│")[1].strip(): line for line in allowed.stdout.splitlines() if "│" in line
    }
    assert "RUNNING" in lines["lr3"] and "KILLED" in lines["lr4"] and "FINISHED" in lines["lr1"]
    document = json.loads(out.read_text())
    assert document["title"] == "experiment xmr/train/toyworld"
    by_name = {r["run"]: r for r in document["runs"]}
    assert {n: r["status"] for n, r in by_name.items()} == {
        "lr1": "FINISHED",
        "lr2": "FINISHED",
        "lr3": "RUNNING",
        "lr4": "KILLED",
    }
    assert by_name["lr3"]["run_id"] == runs["lr3"]
    assert by_name["lr3"]["lr"] == "0.3"
    assert by_name["lr3"]["test/recall_t2i_at_10"] == pytest.approx(0.3)

    # nothing finished: refused
    client.create_experiment("xmr/train/none")
    _run(client, client.get_experiment_by_name("xmr/train/none").experiment_id, "x",
         status="FAILED", recall=0.0)  # fmt: skip
    none = runner.invoke(app, ["compare", "--experiment", "xmr/train/none", "--tracking-uri", uri])
    assert none.exit_code == 2, none.output
    assert "no run of experiment xmr/train/none is FINISHED: x (run" in none.stderr
    assert ", FAILED); --allow-unfinished compares them anyway, marked" in none.stderr


def test_a_sweep_with_a_failed_trial_names_it_and_shows_it_when_allowed(store) -> None:
    uri, client = store
    experiment = client.create_experiment("xmr/tune/lr")
    tags = {"xmr.sweep_id": "s", "xmr.command": "tune", "xmr.metrics": "test/recall_t2i_at_10"}
    parent = _run(client, experiment, "s", status="FINISHED", recall=0.5, tags=tags)
    for name, status, lr in (("lr=1", "FINISHED", "1"), ("lr=9", "FAILED", "9")):
        _run(client, experiment, name, status=status, recall=0.5, params={"lr": lr},
             tags={PARENT_TAG: parent})  # fmt: skip
    args = ["compare", "--sweep", "s", "--tracking-uri", uri]

    shown = runner.invoke(app, args)
    assert shown.exit_code == 0, shown.output
    assert "sweep s: 1 runs, 1 not FINISHED left out" in _flat(shown.stdout)
    assert (
        "lr=9 (run" in shown.stderr and ", FAILED); --allow-unfinished shows them" in shown.stderr
    )
    allowed = runner.invoke(app, [*args, "--allow-unfinished"])
    assert allowed.exit_code == 0, allowed.output
    assert "sweep s: 2 runs" in _flat(
        allowed.stdout
    ) and "1 of 2 runs not FINISHED (FAILED)" in _flat(allowed.stdout)
    assert allowed.stderr == ""


def test_comparing_loads_no_ray(store, tmp_path: Path) -> None:
    """``xmr compare`` (two runs, an experiment) and a Pareto front's ties (what the gender
    job's ``pareto`` step asks) read the tracking store and resample numbers: Ray stays out of
    the process."""
    import subprocess
    import sys

    uri, client = store
    experiment = client.create_experiment("xmr/eval/toyworld")
    runs = [
        _run(client, experiment, name, status="FINISHED", recall=recall, folder=tmp_path)
        for name, recall in (("a", 0.5), ("b", 0.55))
    ]
    code = f"""
import sys
import pandas as pd
from typer.testing import CliRunner
from xmr.cli import app
from xmr.jobs.gender import gender_report
from xmr.tune.pareto import pareto_ties
from xmr.tune.space import Objective

for args in (["a", "b"], ["--experiment", "xmr/eval/toyworld"]):
    shown = CliRunner().invoke(app, ["compare", *args, "--tracking-uri", {uri!r}])
    assert shown.exit_code == 0, shown.output
frame = pd.DataFrame({{"mlflow_run_id": {runs!r}, "test/recall_t2i_at_10": [0.5, 0.55],
                      "test/bias_at_10": [0.1, -0.2]}})
x, y = Objective("test/recall_t2i_at_10", "max"), Objective("test/bias_at_10", "min", abs=True)
assert pareto_ties(frame, x, y, tracking_uri={uri!r}) == []  # no per-query bias: unmarked
print(sorted(name for name in sys.modules if name.split(".")[0] == "ray"))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_bias_diagnostics_are_compared_as_weighted_shares_without_a_better_side(store) -> None:
    """Two runs' Bias@10 with its gendered and male shares: run B sees fewer gendered images
    (dilution) and more men among them. The male share is the pooled Σ male / Σ gendered of
    each run and its paired difference is of those; the shares get ``B higher`` / ``A
    higher``, never ``better``."""
    uri, client = store
    experiment = client.create_experiment("xmr/eval/toyworld")
    folder = Path(uri.removeprefix("sqlite:///")).parent
    gendered = {"A": np.full(20, 0.8), "B": np.tile([0.2, 0.0], 10)}
    male = {"A": np.tile([0.5, 0.25], 10), "B": np.tile([1.0, np.nan], 10)}
    for name in ("A", "B"):
        run_id = client.create_run(experiment, run_name=name).info.run_id
        delta = np.where(gendered[name] > 0, 2 * np.nan_to_num(male[name]) - 1, 0.0)
        values = {"test/bias_at_10": delta, "test/gendered_share_at_10": gendered[name],
                  "test/male_share_at_10": male[name]}  # fmt: skip
        pooled = np.nansum(gendered[name] * male[name]) / gendered[name].sum()
        client.log_metric(run_id, "test/male_share_at_10", pooled)
        path = folder / name / PER_QUERY_FILE
        path.parent.mkdir(parents=True)
        client.log_artifact(run_id, str(write_per_query({"bias": QueryValues(QUERIES, values)},
                                                        path)))  # fmt: skip
        client.set_terminated(run_id, status="FINISHED")
    out = folder / "paired.json"
    result = runner.invoke(app, ["compare", "A", "B", "--tracking-uri", uri, "--json", str(out)])
    assert result.exit_code == 0, result.output
    rows = {row["metric"]: row for row in json.loads(out.read_text())["metrics"]}
    share = rows["test/male_share_at_10"]
    assert (share["first"], share["second"]) == pytest.approx((0.375, 1.0))  # pooled shares
    assert share["difference"] == pytest.approx(0.625) and share["significant"]
    assert rows["test/gendered_share_at_10"]["difference"] == pytest.approx(-0.7)
    lines = {line.split("│")[1].strip(): line for line in result.output.splitlines() if "│" in line}
    assert "B higher" in lines["male_share_at_10"] and "A higher" in lines["gendered_share_at_10"]
    assert "better" not in lines["male_share_at_10"]
