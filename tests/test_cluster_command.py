"""``xmr cluster up/env/down``: a Ray cluster of several nodes and an MLflow server on this
machine, and a failed local Ray start in one line.

The end-to-end case runs the real command line: ``up`` with two nodes, a job through
``ray job submit`` that runs on both nodes and sees the cluster's ``MLFLOW_TRACKING_URI`` and
``XMR_STORAGE``, a refused second ``up``, and ``down``, after which no process names the
cluster's temp dir and nothing listens on its ports. The other cases check the parts that start
nothing: the state file, the refusals, the printed lines.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from xmr.cli import app
from xmr.cluster import (
    RAY,
    STATE_FILE,
    WORKER_PORT_SPAN,
    ClusterState,
    RayNodes,
    check_can_start,
    free_worker_ranges,
    processes_naming,
    stop_cluster,
)
from xmr.errors import UnavailableError

# What the cluster sets itself; a value from the shell running the tests must not leak in.
CLUSTER_VARIABLES = (
    "RAY_ADDRESS",
    "RAY_API_SERVER_ADDRESS",
    "RAY_AUTH_MODE",
    "RAY_AUTH_TOKEN",
    "RAY_AUTH_TOKEN_PATH",
    "MLFLOW_TRACKING_URI",
    "XMR_STORAGE",
)

PROBE = """\
import json, os, sys, time, urllib.request
import ray

ray.init()

@ray.remote(num_cpus=1)
def node() -> str:
    time.sleep(1)
    return ray.get_runtime_context().get_node_id()

spread = [node.options(scheduling_strategy="SPREAD").remote() for _ in range(4)]
nodes = len(set(ray.get(spread)))
uri, storage = os.environ["MLFLOW_TRACKING_URI"], os.environ["XMR_STORAGE"]
with urllib.request.urlopen(uri + "/health", timeout=30) as answer:
    health = answer.read().decode()
with open(os.path.join(storage, "probe.json"), "w") as out:
    found = {"nodes": nodes, "tracking_uri": uri, "health": health, "python": sys.executable}
    json.dump(found, out)
print("probe:", nodes, "nodes,", uri, health)
"""
"""The job: tasks spread over the nodes, the server's health check, its interpreter, a file in
XMR_STORAGE."""


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in CLUSTER_VARIABLES}


def _xmr(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xmr.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _exports(lines: str) -> dict[str, str]:
    """The variables ``export`` lines set, as a shell sets them (``eval``)."""
    shown = subprocess.run(
        ["bash", "-c", f'{lines}\nenv -0 | grep -z -E "^(RAY|MLFLOW)_"'],
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(item.split("=", 1) for item in shown.stdout.split("\0") if item)


def _listening_ports() -> set[int]:
    return {c.laddr.port for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN}


@pytest.mark.slow
def test_up_runs_a_job_on_both_nodes_and_down_leaves_nothing(tmp_path: Path) -> None:
    """Started from a shell whose venv is not activated (PATH without it), the job's bare
    ``python`` is still the interpreter xmr runs under."""
    folder = tmp_path / "tmp"
    env = {**_clean_env(), "PATH": os.pathsep.join(["/usr/bin", "/bin"])}
    up = _xmr(
        "cluster", "up", "--nodes", "2", "--cpus-per-node", "1", "--dir", str(folder),
        env=env, cwd=tmp_path,
    )  # fmt: skip
    state = ClusterState.read(folder)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert state is not None and len(state.nodes) == 2
        printed = up.stdout.splitlines()
        assert [line for line in printed if line.startswith("export ")] == state.env_lines()
        assert state.submit_line() in printed
        assert f"--dir {folder}" in printed[-1]  # how to stop it names the non-default folder

        # The shell's view of the cluster, from `xmr cluster env`.
        shown = _xmr("cluster", "env", "--dir", str(folder), env=env, cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        client_env = {**env, **_exports(shown.stdout)}
        assert client_env["RAY_API_SERVER_ADDRESS"] == state.dashboard
        assert client_env["RAY_ADDRESS"] == state.gcs_address
        assert Path(client_env["RAY_AUTH_TOKEN_PATH"]).stat().st_mode & 0o077 == 0
        with pytest.raises(urllib.error.HTTPError, match="401"):  # token authentication is on
            urllib.request.urlopen(f"{state.dashboard}/api/jobs/", timeout=30)

        job = tmp_path / "job"
        job.mkdir()
        (job / "probe.py").write_text(PROBE)
        submitted = subprocess.run(
            [RAY, "job", "submit", "--working-dir", str(job), "--", "python", "probe.py"],
            env=client_env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        log = submitted.stdout + submitted.stderr
        assert submitted.returncode == 0 and "succeeded" in log, log[-3000:]
        probe = json.loads((folder / "storage" / "probe.json").read_text())
        assert probe["nodes"] == 2
        assert probe["tracking_uri"] == state.tracking_uri
        assert probe["health"] == "OK"
        assert Path(probe["python"]).parent == Path(sys.executable).parent

        again = _xmr("cluster", "up", "--dir", str(folder), env=env, cwd=tmp_path)
        assert again.returncode == 2
        assert again.stderr.strip().splitlines() == [
            f"error: a cluster already runs in {folder} (Ray {state.dashboard}, MLflow "
            f"{state.tracking_uri}): `xmr cluster down --dir {folder}` first, or another --dir"
        ]
    finally:
        down = _xmr("cluster", "down", "--dir", str(folder), env=env, cwd=tmp_path)
        if state is not None and down.returncode != 0:
            stop_cluster(state)  # leave nothing running, whatever failed
    assert down.returncode == 0, down.stderr
    assert "cluster down in" in down.stdout
    assert processes_naming(state.temp_dir) == []
    assert state.mlflow_server() is None
    listening = _listening_ports()
    assert not listening & set(state.ports)
    for node in state.nodes:
        low, high = node["worker_ports"]
        assert not {port for port in listening if low <= port <= high}
    assert not (folder / STATE_FILE).exists()
    assert not Path(state.temp_dir).exists()
    assert (folder / "mlflow.db").exists()  # the runs stay

    nothing = _xmr("cluster", "down", "--dir", str(folder), env=env, cwd=tmp_path)
    assert nothing.returncode == 0
    assert nothing.stdout.strip() == f"no cluster runs in {folder}: nothing to stop"


# --- The parts that start nothing ------------------------------------------------------------


def _state(folder: Path, pid: int, started: float, temp_dir: Path) -> ClusterState:
    state = ClusterState(
        folder=str(folder),
        temp_dir=str(temp_dir),
        nodes=[{"temp_dir": str(temp_dir / "h"), "cpus": 1, "worker_ports": [20000, 20499]}],
        gcs_address="192.0.2.2:6379",
        dashboard="http://127.0.0.1:8265",
        tracking_uri="http://127.0.0.1:5000",
        mlflow_pid=pid,
        mlflow_started=started,
        ports=[6379, 8265, 5000],
    )
    folder.mkdir(parents=True, exist_ok=True)
    state.write()
    return state


def test_state_file_round_trip_and_a_bad_one_is_named(tmp_path: Path) -> None:
    state = _state(tmp_path / "c", 1, 0.0, tmp_path / "t")
    assert ClusterState.read(tmp_path / "c") == state
    assert ClusterState.read(tmp_path) is None
    (tmp_path / STATE_FILE).write_text('{"folder": 1, "oops": 2}')
    with pytest.raises(ValueError, match=f"{tmp_path / STATE_FILE}: not an xmr cluster's state"):
        ClusterState.read(tmp_path)


def test_a_running_cluster_refuses_a_second_up(tmp_path: Path) -> None:
    """A state whose recorded server process still runs (this test's own process stands in
    for it) is a running cluster: ``up`` refuses in one line and starts nothing."""
    me = psutil.Process()
    folder = tmp_path / "c"
    _state(folder, me.pid, me.create_time(), tmp_path / "t")
    with pytest.raises(ValueError, match=r"a cluster already runs in .*xmr cluster down --dir"):
        check_can_start(folder)
    result = CliRunner().invoke(app, ["cluster", "up", "--dir", str(folder)])
    assert result.exit_code == 2
    assert "error: a cluster already runs in" in result.output
    assert (folder / STATE_FILE).exists()


def test_a_stopped_clusters_state_is_forgotten(tmp_path: Path) -> None:
    """A state whose processes are gone (a reboot, a kill): ``down`` says so and cleans up,
    and ``up`` would start afresh."""
    gone = subprocess.Popen(["true"])
    started = psutil.Process(gone.pid).create_time()
    gone.wait()
    folder, temp_dir = tmp_path / "c", tmp_path / "t"
    temp_dir.mkdir()
    _state(folder, gone.pid, started, temp_dir)
    (folder / "auth_token").write_text("x")
    result = CliRunner().invoke(app, ["cluster", "down", "--dir", str(folder)])
    assert result.exit_code == 0
    assert result.output.strip() == f"the cluster in {folder} had already stopped: forgot it"
    assert not (folder / STATE_FILE).exists() and not (folder / "auth_token").exists()
    assert not temp_dir.exists()
    _state(folder, gone.pid, started, temp_dir)
    check_can_start(folder)
    assert not (folder / STATE_FILE).exists()


def test_down_and_env_without_a_cluster(tmp_path: Path) -> None:
    down = CliRunner().invoke(app, ["cluster", "down", "--dir", str(tmp_path)])
    assert down.exit_code == 0
    assert down.output.strip() == f"no cluster runs in {tmp_path}: nothing to stop"
    env = CliRunner().invoke(app, ["cluster", "env", "--dir", str(tmp_path)])
    assert env.exit_code == 2
    assert f"no cluster runs in {tmp_path}" in env.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "0"], "--nodes must be >= 1, got 0"),
        (["--cpus-per-node", "0"], "--cpus-per-node must be >= 1, got 0"),
    ],
)
def test_up_refuses_bad_sizes_before_starting(tmp_path: Path, args: list[str], message: str):
    folder = tmp_path / "c"
    result = CliRunner().invoke(app, ["cluster", "up", "--dir", str(folder), *args])
    assert result.exit_code == 2
    assert f"error: {message}" in result.output
    assert not folder.exists()


def test_printed_lines_set_the_variables_in_a_shell(tmp_path: Path) -> None:
    folder = tmp_path / "a folder's name"
    state = _state(folder, 1, 0.0, tmp_path / "t")
    assert _exports("\n".join(state.env_lines())) == {
        "RAY_ADDRESS": "192.0.2.2:6379",
        "RAY_API_SERVER_ADDRESS": "http://127.0.0.1:8265",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(folder / "auth_token"),
        "MLFLOW_TRACKING_URI": "http://127.0.0.1:5000",
    }
    assert state.submit_line() == (
        "ray job submit --address http://127.0.0.1:8265 --working-dir . -- "
        "python ray_jobs/odmap.py --epochs 1 --limit 300"
    )


def test_processes_naming_matches_the_folder_not_a_longer_name(tmp_path: Path) -> None:
    folder = tmp_path / "xr1"
    sleep = [sys.executable, "-c", "import time; time.sleep(30)"]
    sleeper = subprocess.Popen([*sleep, f"--temp-dir={folder}/h", f"{folder}2"])
    other = subprocess.Popen([*sleep, f"{folder}2/h"])
    try:
        assert [p.pid for p in processes_naming(str(folder))] == [sleeper.pid]
    finally:
        for process in (sleeper, other):
            process.kill()
            process.wait()


def test_worker_ranges_are_disjoint_and_free() -> None:
    ranges = free_worker_ranges(3)
    assert len(ranges) == 3
    for low, high in ranges:
        assert WORKER_PORT_SPAN[0] <= low <= high < WORKER_PORT_SPAN[1]
        assert high - low + 1 == 500
    ordered = sorted(ranges)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(ordered))


def test_a_failed_local_ray_start_is_one_line(tmp_path: Path) -> None:
    """``init_ray`` on a Ray that cannot start (here: a temp dir whose socket paths are too
    long) raises one line with the reason, which commands print as ``error: ...``."""
    long_dir = tmp_path / ("x" * 90)
    long_dir.mkdir()
    script = textwrap.dedent("""
        from xmr.pipeline.ray_executor import init_ray
        from xmr.errors import UnavailableError
        try:
            init_ray(num_cpus=1)
        except UnavailableError as exc:
            print("ERROR", exc)
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**_clean_env(), "RAY_TMPDIR": str(long_dir)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("ERROR")]
    assert line.startswith("ERROR could not start a local Ray: ")
    assert "AF_UNIX path length" in line and "retry" in line
    assert processes_naming(str(long_dir)) == []


@pytest.mark.slow
def test_a_failed_node_start_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    """``ray start`` refusing (here: a negative CPU count) is one line with Ray's reason and
    where its whole output is, and the cluster's temp dir holds no process after."""
    nodes = RayNodes({**_clean_env(), "RAY_AUTH_MODE": "token"}, log_dir=tmp_path)
    try:
        with pytest.raises(UnavailableError) as raised:
            nodes.start_head(num_cpus=-1, worker_ports=free_worker_ranges(1)[0])
    finally:
        nodes.stop()
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("`ray start` of a node failed: ValueError: Resource quantities")
    assert message.endswith(f"all it said: {tmp_path / 'ray-start-h.log'})")
    assert processes_naming(nodes.temp_root) == []
