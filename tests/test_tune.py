"""``xmr tune`` and ``xmr compare``: spaces, Pareto fronts, sweeps on Ray Tune logged to MLflow.

The sweeps run for real: local Ray, Tune trials that train with Ray Train or score a split
encoded once, MLflow on a sqlite store and on a real ``mlflow server`` on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image
from ray_cluster import running_mlflow_server
from typer.testing import CliRunner

from xmr.cli import app
from xmr.compare.per_query import PER_QUERY_FILE, QueryValues, write_per_query
from xmr.tracking import start_run
from xmr.tune import SpaceError, load_space, shipped_spaces
from xmr.tune.pareto import front_line, front_marks, front_neighbours, pareto_front, plot_pareto
from xmr.tune.space import Domain, Objective

REPO = Path(__file__).resolve().parents[1]


# --- spaces ----------------------------------------------------------------------------------


def test_the_shipped_spaces_load() -> None:
    assert {"fair_alpha", "clip_m", "synth_ratio"} <= set(shipped_spaces())
    fair = load_space("fair_alpha")
    assert fair.command == "train" and fair.params["fair_alpha"].values[0] == 0.0
    assert fair.pareto == (("test/recall_t2i_at_10", "test/bias_at_10"),)
    shares = ("test/gendered_share_at_10", "test/male_share_at_10")  # Bias@10's diagnostics
    natural = tuple(f"test/natural/{m}_at_10" for m in ("bias", "gendered_share", "male_share"))
    assert fair.diagnostics == (*shares, *natural) and fair.recorded[-5:] == fair.diagnostics
    clip = load_space("clip_m")
    assert clip.diagnostics == fair.diagnostics
    assert clip.command == "eval" and clip.fixed["mi_split"] == "train"
    ratio = load_space("synth_ratio")
    assert ratio.pareto == (("test/recall_t2i_at_1", "test/odmap_at_1"),)
    biaug = load_space("biaug_ratio")
    assert biaug.objective.name == "test/binding/counter_acc" and biaug.trial_count == 5


def test_the_wheel_ships_every_module_and_the_search_spaces(tmp_path: Path) -> None:
    """A non-editable install has the spaces: the wheel holds ``tune_spaces/*.yaml`` as the
    package ``xmr.tune_spaces`` (found by name wherever xmr is installed), and every module."""
    pytest.importorskip("setuptools")  # built here, without a build environment from PyPI
    source = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("xmr", "tune_spaces"):
        shutil.copytree(REPO / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, source / name)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "-q", "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("xmr-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    spaces = {f"xmr/tune_spaces/{p.name}" for p in (REPO / "tune_spaces").glob("*.yaml")}
    assert len(spaces) >= 3 and spaces <= names
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "xmr").rglob("*.py")}
    assert modules <= names, sorted(modules - names)


_VALID = {
    "command": "train",
    "params": {"fair_alpha": {"grid": [0.0, 1.0]}},
    "metrics": [{"name": "test/bias_at_10", "mode": "min", "abs": True}],
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"command": "predict"}, "`command` must be one of"),
        ({"params": {"fair_alfa": {"grid": [0.0]}}}, "unknown train option 'fair_alfa'"),
        ({"fixed": {"name": "x"}}, "'name' (set by xmr tune)"),
        ({"params": {"lr": {"uniform": [0.1]}}}, "takes [low, high]"),
        ({"params": {"lr": {"loguniform": [0.0, 1.0]}}}, "needs low > 0"),
        ({"params": {"lr": {"normal": [0, 1]}}}, "unknown domain 'normal'"),
        ({"params": {"lr": {"uniform": [1e-4, 1e-3]}}}, "search: grid needs grid domains"),
        ({"search": "optuna"}, "optuna cannot sample grid domains"),
        ({"search": "bayes"}, "`search` must be one of"),
        ({"pareto": [["test/recall_t2i_at_10", "test/bias_at_10"]]}, "is not in `metrics`"),
        ({"metrics": []}, "`metrics` is empty"),
        ({"scheduler": {"name": "asha", "metric": "val/recall_t2i_at_10"}}, "set eval_every"),
        ({"resources": {"cpu": 2}}, "resources take cpus and gpus"),
        ({"fixed": {"epochs": 2}, "params": {"epochs": {"grid": [1, 2]}}}, "both fixed and swept"),
        ({"command": "eval", "params": {"arch": {"grid": ["a"]}}}, "encodes the data once"),
        ({"trials": 3}, "unknown keys ['trials']"),
        ({"diagnostics": "test/male_share_at_10"}, "`diagnostics` is a list of metric names"),
        ({"diagnostics": ["test/bias_at_10"]}, "both in `metrics` and in `diagnostics`"),
    ],
)
def test_a_bad_space_is_refused_with_what_is_wrong(
    tmp_path: Path, change: dict, message: str
) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump({**_VALID, **change}))
    with pytest.raises(SpaceError) as info:
        load_space(path)
    assert str(path) in str(info.value) and message in str(info.value)


def test_cli_refuses_a_bad_space_before_anything_starts(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.yaml").write_text("command: train\nparams: {fair_alpha: [0, 1\n")
    result = CliRunner().invoke(app, ["tune", "--space", "broken.yaml"])
    assert result.exit_code == 2 and "broken.yaml: not valid YAML" in result.output
    result = CliRunner().invoke(app, ["tune", "--space", "fair_alpha", "--set", "epoch=2"])
    assert result.exit_code == 2 and "unknown train option 'epoch'" in result.output
    result = CliRunner().invoke(app, ["tune", "--space", "no_such_space"])
    assert result.exit_code == 2 and "fair_alpha" in result.output  # lists the shipped ones
    result = CliRunner().invoke(
        app, ["tune", "--space", "fair_alpha", "--set", "fair_alpha=2", "--set", "epochs=1"]
    )
    assert result.exit_code == 2 and "both fixed and swept" in result.output
    result = CliRunner().invoke(app, ["tune", "--space", "fair_alpha", "--set", "lr=-1"])
    assert result.exit_code == 2 and "--lr must be > 0" in result.output
    assert not (tmp_path / "mlflow.db").exists()  # nothing was logged, nothing started


# --- Pareto fronts ---------------------------------------------------------------------------


def test_sweeps_start_only_the_trials_whose_every_reservation_fits_on_a_node() -> None:
    """The issue's cluster, 2 nodes x 2 CPUs: a trial's driver reserves no CPU, so four
    one-CPU trials fit (with 0.01 CPU each, only two worker groups did); a loader that reserves
    CPUs and a worker bigger than any node are counted too."""
    from xmr.tune.sweep import trial_concurrency
    from xmr.tune.trials import TrialFootprint, trials_that_fit

    node = {"CPU": 2.0, "memory": 2.0**33}
    fair = load_space("fair_alpha")  # 1 CPU per trial
    assert TrialFootprint.of(dict(fair.fixed), fair.cpus, fair.gpus).bundles() == [
        {"CPU": 1.0},
        {"memory": 256 * 2**20},
    ]
    assert trial_concurrency(fair, [node, node]) == 4
    assert trial_concurrency(fair, [node]) == 2  # one 2-core machine: two at a time
    assert trial_concurrency(fair.with_overrides(cpus=2), [node, node]) == 2
    assert trial_concurrency(fair.with_overrides(cpus=3), [node, node]) == 0  # no node has 3
    loaders = fair.with_overrides(fixed={**fair.fixed, "loader_cpus": 0.5})
    assert trial_concurrency(loaders, [node, node]) == 2  # 1 + 0.5 per trial, per node
    swept = fair.with_overrides(
        fixed={k: v for k, v in fair.fixed.items() if k != "workers"},
        params={**fair.params, "workers": Domain("grid", (1, 2))},
    )
    assert trial_concurrency(swept.with_overrides(cpus=2), [node, node]) == 2
    gpu = TrialFootprint(
        workers=1, cpus_per_worker=1.0, gpus_per_worker=1.0, loaders=1, loader_cpus=0
    )
    assert trials_that_fit([{**node, "GPU": 1.0}, node], gpu) == 1


def test_pareto_front_keeps_the_non_dominated_trials() -> None:
    # (recall: max, |bias|: min)
    values = np.array(
        [
            [0.90, 0.30],  # best recall: on the front
            [0.80, 0.10],  # on the front
            [0.70, 0.20],  # dominated by row 1
            [0.60, 0.05],  # lowest bias: on the front
            [0.80, 0.10],  # equal to row 1: also on the front
            [np.nan, 0.0],  # unmeasured: never on the front, dominates nothing
        ]
    )
    front = pareto_front(values, ("max", "min"))
    assert front.tolist() == [True, True, False, True, True, False]
    assert pareto_front(values[:4], ("min", "max")).tolist() == [True, False, True, True]
    with pytest.raises(ValueError, match="do not match"):
        pareto_front(values, ("max",))


def test_front_neighbours_pair_adjacent_front_points_and_marks_name_the_ties() -> None:
    xs = np.array([0.9, 0.8, 0.7, 0.6, 0.8, np.nan])  # the rows of the test above
    front = np.array([True, True, False, True, True, False])
    assert front_neighbours(xs, front) == [(3, 1), (1, 4), (4, 0)]  # by x, ties in row order
    assert front_neighbours(xs, np.zeros(6, bool)) == []
    assert front_neighbours(xs, np.eye(6, dtype=bool)[0]) == []
    names = [f"alpha={n}" for n in range(6)]
    marks = front_marks(front, [(3, 1), (1, 4)], names)
    assert marks == [
        "front", "front ≈ alpha=3; alpha=4", "dominated", "front ≈ alpha=1", "front ≈ alpha=1",
        "dominated",
    ]  # fmt: skip
    assert front_line(xs, front, [(3, 1), (1, 4)], names) == (
        "alpha=3 ≈ alpha=1 ≈ alpha=4; alpha=0"
    )
    assert front_line(xs, front, [], names) == "alpha=3; alpha=1; alpha=4; alpha=0"
    assert front_line(xs, np.eye(6, dtype=bool)[2], [], names) == "alpha=2"


def test_pareto_ties_pair_the_trials_runs_query_by_query(tmp_path: Path) -> None:
    """Four trials on the front of recall against |bias|: two that differ on a handful of
    queries and by noise in bias (not distinguishable), one that differs on every query, one
    without per-query values (unmarked); the plot draws the tie."""
    from xmr.tune.pareto import pareto_ties

    rng = np.random.default_rng(0)
    hits = (rng.random(500) < 0.5).astype(np.float64)
    bias = rng.normal(0.3, 0.1, 80)
    more_hits = hits.copy()
    more_hits[np.flatnonzero(hits == 0)[:3]] = 1.0  # three more hits out of 500 queries
    noise = rng.normal(0.0, 0.05, 80)
    more_bias = bias + noise - noise.mean() + 0.002  # a trade-off: |bias| 0.002 higher
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rows = []
    for name, recall, signed in [
        ("m=0", hits, bias), ("m=8", more_hits, more_bias), ("m=64", hits * 0, bias / 3)
    ]:  # fmt: skip
        sets = {
            "t2i": QueryValues([f"{n}:c" for n in range(500)], {"test/recall_t2i_at_10": recall}),
            "bias": QueryValues([f"{n}:p" for n in range(80)], {"test/bias_at_10": signed}),
        }
        (tmp_path / name).mkdir()
        with start_run("xmr/tune/ties", run_name=name, tracking_uri=uri) as run:
            run.log_artifact(write_per_query(sets, tmp_path / name / PER_QUERY_FILE))
        rows.append((name, run.run_id, recall.mean(), signed.mean()))
    rows.append(("m=96", "", 0.2, -0.15))  # between m=64 and m=0, no per-query values
    columns = ["run_name", "mlflow_run_id", "test/recall_t2i_at_10", "test/bias_at_10"]
    frame = pd.DataFrame(rows, columns=columns)
    frame["test/gendered_share_at_10"] = [0.4, 0.42, 0.2, 0.3]  # the second panel's
    frame["test/male_share_at_10"] = [0.7, 0.71, 0.6, 0.4]
    x = Objective("test/recall_t2i_at_10", "max")
    y = Objective("test/bias_at_10", "min", abs=True)
    cache: dict = {}
    ties = pareto_ties(frame, x, y, tracking_uri=uri, per_query=cache)
    assert ties == [(0, 1)]  # by recall: m=64, m=96, m=0, m=8
    assert set(cache) == set(frame["mlflow_run_id"]) and cache[""] is None  # each read once
    names = frame["run_name"].tolist()
    png = tmp_path / "pareto.png"
    front = plot_pareto(frame, x, y, labels=names, path=png, title="m", ties=ties)
    assert front_marks(front, ties, names) == ["front ≈ m=8", "front ≈ m=0", "front", "front"]
    assert front_line(frame[x.name].to_numpy(), front, ties, names) == "m=64; m=96; m=0 ≈ m=8"
    with Image.open(png) as image:
        assert image.format == "PNG" and image.width > 300
        width = image.width
    shares = ["test/gendered_share_at_10", "test/male_share_at_10"]
    again = plot_pareto(frame, x, y, labels=names, path=png, title="m", ties=ties,
                        diagnostics=shares)  # fmt: skip
    np.testing.assert_array_equal(again, front)  # the second panel judges nothing
    with Image.open(png) as image:
        assert image.width > 1.5 * width  # a second panel beside the front
    frame["test/natural/bias_at_10"] = np.nan  # a dataset with no second ranking: no panel
    plot_pareto(frame.drop(columns=shares), x, y, labels=names, path=png, title="m",
                diagnostics=[*shares, "test/natural/bias_at_10"])  # fmt: skip
    with Image.open(png) as image:
        assert image.width == width


# --- sweeps ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real ``mlflow server`` on 127.0.0.1 (sqlite store, proxied artifacts); stopped at the
    end."""
    with running_mlflow_server(tmp_path_factory.mktemp("mlflow-server")) as uri:
        yield uri


@pytest.fixture(scope="module")
def tune_world(tmp_path_factory) -> Path:
    """A ToyWorld with gendered people in every split (train 120, val 16, test 24)."""
    from xmr.toyworld import generate

    config = tmp_path_factory.mktemp("tune-world-config") / "world.yaml"
    config.write_text("splits: {train: 120, val: 16, test: 24}\n")
    return generate(tmp_path_factory.mktemp("tune-world") / "w", config, seed=3)


def _clip_space(path: Path, world: Path, ms: list[int]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "description": "CLIP-clip m on a small world",
                "command": "eval",
                "fixed": {"data": str(world), "pretrained": "none", "metrics": "recall,bias"},
                "params": {"clip_m": {"grid": ms}},
                "metrics": [
                    {"name": "test/bias_at_10", "mode": "min", "abs": True},
                    {"name": "test/recall_t2i_at_10", "mode": "max"},
                ],
                "pareto": [["test/recall_t2i_at_10", "test/bias_at_10"]],
                "diagnostics": ["test/gendered_share_at_10", "test/male_share_at_10"],
                "resources": {"cpus": 1},
            }
        )
    )
    return path


def _children(client: mlflow.MlflowClient, parent) -> list:
    return client.search_runs(
        [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'"
    )


@pytest.mark.slow
def test_a_clip_sweep_logs_parent_children_and_pareto_and_survives_a_failed_trial(
    local_ray, tune_world, tmp_path, monkeypatch, mlflow_server
) -> None:
    """On a real ``mlflow server``: trials log through its REST API and artifacts through its
    proxy (the sqlite default store is what the other sweep tests use)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = mlflow_server
    args = ["--tracking-uri", uri]
    space = _clip_space(tmp_path / "clipm.yaml", tune_world, [0, 16, 64, 1000])
    command = ["tune", "--space", str(space), "--name", "small-clip", *args]

    result = CliRunner().invoke(app, command)
    # m = 1000 is more than the model's 128 dims: that trial fails, the sweep finishes.
    assert result.exit_code == 1, result.output
    assert "failed" in result.output and "m=1000 but the features have 128 dims" in result.output
    assert "xmr compare --sweep small-clip" in result.output

    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("xmr/tune/clipm")
    (parent,) = client.search_runs([experiment.experiment_id], "tags.`xmr.command` = 'tune'")
    assert parent.info.run_name == "small-clip" and parent.info.status == "FINISHED"
    assert parent.data.tags["xmr.sweep_id"] == "small-clip"
    assert parent.data.params["sweep.swept"] == "clip_m"
    assert parent.data.metrics["sweep/trials"] == 4 and parent.data.metrics["sweep/failed"] == 1
    children = _children(client, parent)
    by_m = {int(run.data.params.get("clip.m", "1000")): run for run in children}
    assert sorted(by_m) == [0, 16, 64, 1000] and len(children) == 4
    for m in (0, 16, 64):
        run = by_m[m]
        assert run.info.status == "FINISHED" and run.info.run_name == f"clip_m={m}"
        assert run.data.params["model.family"] == "clip"  # namespaced like `xmr eval`
        assert run.data.params["clip.mi_split"] == "train"
        assert {"test/bias_at_10", "test/recall_t2i_at_10"} <= set(run.data.metrics)
        assert not any(k.startswith(("config/", "time_", "training_")) for k in run.data.metrics)
        assert run.data.tags["xmr.sweep_id"] == "small-clip"
    failed = by_m[1000]
    assert failed.info.status == "FAILED"
    assert "m=1000 but the features have 128 dims" in failed.data.tags["xmr.error"]
    # Clipped dims are an artifact of each clipped trial.
    local = Path(client.download_artifacts(by_m[16].info.run_id, "clip_dims.json", str(tmp_path)))
    clipped = json.loads(local.read_text())
    assert clipped["m"] == 16 and len(set(clipped["indices"])) == 16
    assert clipped["mi_split"] == "train" and clipped["mi_images"] == 120

    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    plot = "pareto_test_recall_t2i_at_10_vs_test_bias_at_10.png"
    assert {"space.yaml", "trials.csv", "best_config.json", plot} <= artifacts
    folder = tmp_path / "parent"
    folder.mkdir()
    with Image.open(client.download_artifacts(parent.info.run_id, plot, str(folder))) as image:
        assert image.format == "PNG" and image.width > 300
    trials = pd.read_csv(client.download_artifacts(parent.info.run_id, "trials.csv", str(folder)))
    assert len(trials) == 4 and sorted(trials["status"]) == ["FAILED", *["FINISHED"] * 3]
    finished_shares = trials[trials.status == "FINISHED"]["test/gendered_share_at_10"]
    assert finished_shares.between(0, 1).all()  # the diagnostics are recorded beside the metrics
    best = json.loads(
        Path(
            client.download_artifacts(parent.info.run_id, "best_config.json", str(folder))
        ).read_text()
    )
    finished = trials[trials.status == "FINISHED"]
    assert best["metrics"]["test/bias_at_10"] == pytest.approx(
        finished["test/bias_at_10"].abs().min()
    )
    # The front's neighbours compared over the queries both trials scored: each finished trial
    # marked (a tie named on both sides), the failed one not; the tag lists the front by recall.
    marks = trials.set_index("run_name")["pareto_test_recall_t2i_at_10_vs_test_bias_at_10"]
    assert pd.isna(marks["clip_m=1000"])
    on_front = [name for name, mark in marks.dropna().items() if mark != "dominated"]
    for name in on_front:
        for other in marks[name].removeprefix("front").removeprefix(" ≈ ").split("; "):
            assert not other or name in marks[other]
    front_tag = parent.data.tags["xmr.pareto_front"]
    assert sorted(front_tag.replace(" ≈ ", "; ").split("; ")) == sorted(on_front)
    # Unclipped and clipped scores differ: the sweep really varied m.
    assert len(set(finished["test/recall_t2i_at_10"].round(6))) > 1

    # Same name again: resumes the finished sweep (no trial reruns, no new runs).
    again = CliRunner().invoke(app, command)
    assert again.exit_code == 1 and "resuming sweep small-clip" in again.output
    assert len(client.search_runs([experiment.experiment_id], "")) == 5
    assert {r.info.run_id for r in _children(client, parent)} == {r.info.run_id for r in children}

    table = tmp_path / "sweep.json"
    shown = CliRunner().invoke(
        app, ["compare", "--sweep", "small-clip", *args, "--json", str(table)]
    )
    assert shown.exit_code == 0, shown.output
    assert "clip_m=64" in shown.output and "bias_at_10" in shown.output
    compared = json.loads(table.read_text())["runs"]  # the space's diagnostics among its metrics
    assert all("test/male_share_at_10" in run for run in compared)


def _run_ids_by_trial(db: Path) -> dict[str, tuple[str, str]]:
    """trial id -> (run id, status), read straight from the sqlite store."""
    if not db.is_file():
        return {}
    try:
        with sqlite3.connect(db, timeout=1) as con:
            rows = con.execute(
                "select t.value, r.run_uuid, r.status from tags t join runs r "
                "on t.run_uuid = r.run_uuid where t.key = 'xmr.trial_id'"
            ).fetchall()
    except sqlite3.OperationalError:  # tables not created yet, or locked
        return {}
    return {trial: (run, status) for trial, run, status in rows}


def _sweep_command(space: Path, db: Path, name: str) -> list[str]:
    """``xmr tune`` of ``space`` in its own process, one trial at a time, logged to ``db``."""
    return [
        *(sys.executable, "-m", "xmr.cli", "tune", "--space", str(space)),
        *("--name", name, "--max-concurrent", "1", "--tracking-uri", f"sqlite:///{db}"),
    ]


_SWEEP_ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}


def _start_and_wait(command: list[str], db: Path, log: Path, ready) -> subprocess.Popen:
    """Start ``command`` and return once ``ready(trial id -> (run id, status))`` holds."""
    process = subprocess.Popen(
        command, cwd=log.parent, env=_SWEEP_ENV, stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 600
    try:
        while not ready(_run_ids_by_trial(db)):
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the sweep got nowhere in 10 minutes"
            time.sleep(0.1)
    except BaseException:
        process.kill()
        process.wait()
        raise
    return process


@pytest.mark.slow
def test_an_interrupted_sweep_resumes_where_it_stopped(
    local_ray, tune_world, tmp_path, monkeypatch
) -> None:
    """SIGTERM (``kill``, ``ray job stop``; handled as Ctrl-C is) in the middle of a sweep,
    then the same command (here, in this process's Ray): no MLflow run was left RUNNING, the
    finished trials are kept, the rest run, and every trial has exactly one child run."""
    ms = list(range(0, 16, 2))  # 8 trials of a fraction of a second each
    space = _clip_space(tmp_path / "clipm.yaml", tune_world, ms)
    db = tmp_path / "mlflow.db"
    command = _sweep_command(space, db, "interrupted")

    def two_finished(runs: dict) -> bool:
        return sum(s == "FINISHED" for _, s in runs.values()) >= 2

    first = _start_and_wait(command, db, tmp_path / "first.log", two_finished)
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=120) == 143, (tmp_path / "first.log").read_text()[-3000:]
    assert "rerun the same command to resume it" in (tmp_path / "first.log").read_text()
    client = mlflow.MlflowClient(f"sqlite:///{db}")
    experiment = client.get_experiment_by_name("xmr/tune/clipm")
    runs = client.search_runs([experiment.experiment_id], "")
    statuses = {r.info.run_name: r.info.status for r in runs}
    assert "RUNNING" not in statuses.values(), statuses  # the trial cut short is KILLED
    (parent,) = [r for r in runs if r.data.tags.get("xmr.command") == "tune"]
    assert parent.info.status == "KILLED"  # interrupted, not failed: the same command resumes
    before = _run_ids_by_trial(db)
    done_before = {t: run for t, (run, status) in before.items() if status == "FINISHED"}
    assert 2 <= len(done_before) < len(ms), before
    table = pd.read_csv(client.download_artifacts(parent.info.run_id, "trials.csv", str(tmp_path)))
    finished = table[table["status"] == "FINISHED"]
    assert set(finished["trial_id"].astype(str)) <= set(done_before), table
    assert set(table["status"]) == {"FINISHED", "UNFINISHED"}, table  # which did not finish

    monkeypatch.chdir(tmp_path)  # where the first ran: its sweep folder is ./xmr-tune
    second = CliRunner().invoke(app, command[command.index("tune") :])
    assert second.exit_code == 0, second.output[-3000:]
    assert "resuming sweep interrupted" in second.output
    after = _run_ids_by_trial(db)
    assert len(after) == len(ms) and all(status == "FINISHED" for _, status in after.values())
    for trial, run in done_before.items():
        assert after[trial][0] == run  # kept, not rerun into a new child run
    assert len(client.search_runs([experiment.experiment_id], "")) == 1 + len(ms)
