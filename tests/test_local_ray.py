"""The local Ray that xmr starts, and what xmr writes to a log (issue 10, defects 8 and 10).

Defect 8: that Ray is reachable from this machine only. Defect 10: when standard output is not
a terminal (a job log, CI, ``| tee``), progress is a few whole lines, Ray Data's INFO lines stay
in its log file, and a successful ``xmr train`` ends without Ray Train's placement-group
cleaner complaining.
"""

from __future__ import annotations

import io
import ipaddress
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ray_cluster import free_port

from xmr.progress import PARTS, ProgressLines, console_progress
from xmr.toyworld import generate

# Runs in a fresh interpreter, so that it starts its own Ray beside the test session's: a small
# Ray Data pipeline, then every TCP listening socket and bound UDP socket of the driver and of
# every process under it (GCS, raylet, dashboard, agents, workers) once all the ports Ray
# reports are open. The listing is the last line of standard output.
_START_RUN_AND_LIST = """
import json
import os
import time

import psutil
import ray

from xmr.pipeline.ray_executor import RayExecutor
from xmr.pipeline.stage import Stage


class Doubled(Stage):
    name = "doubled"

    @property
    def needs_actor(self) -> bool:
        return False

    def process(self, batch):
        return {**batch, "x": batch["x"] * 2}


executor = RayExecutor(num_cpus=1, progress=False)
rows = [{"x": i} for i in range(40)]
doubled = [x for b in executor.stream(rows, [(Doubled(batch_size=4), 1)], blocks=4) for x in b["x"]]
assert doubled == [2 * i for i in range(40)]
deadline = time.monotonic() + 90
while True:
    node = ray.nodes()[0]  # agents report their ports once they are up
    reported = {
        int(ray.get_runtime_context().gcs_address.rsplit(":", 1)[1]),
        int(os.environ["DASHBOARD_METRIC_PORT"]),
        *(node[key] for key in ("NodeManagerPort", "ObjectManagerPort", "MetricsExportPort",
                                "MetricsAgentPort", "DashboardAgentListenPort",
                                "RuntimeEnvAgentPort")),
    } - {-1}  # -1: not started (the agent's HTTP port 52365 is taken by another Ray here)
    driver = psutil.Process()
    sockets = []
    for process in [driver, *driver.children(recursive=True)]:
        try:
            name, connections = process.name(), process.net_connections(kind="inet")
        except psutil.Error:
            continue
        sockets += [
            {"process": name, "ip": c.laddr.ip, "port": c.laddr.port, "status": c.status}
            for c in connections
            if c.status in (psutil.CONN_LISTEN, psutil.CONN_NONE) and c.laddr
        ]
    if reported <= {s["port"] for s in sockets} or time.monotonic() > deadline:
        break
    time.sleep(0.5)
print(json.dumps({"reported": sorted(reported), "sockets": sockets}))
ray.shutdown()
"""


def _is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return (mapped or address).is_loopback


@pytest.fixture(scope="module")
def local_ray_run() -> subprocess.CompletedProcess:
    """:data:`_START_RUN_AND_LIST` run with its output piped, as in a job log."""
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    # Token authentication on, as for users, with a token of the test's own (not ~/.ray's).
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    # The dashboard's and the autoscaler's metrics servers have fixed ports (44227, 44217) that
    # another Ray on this machine may hold.
    env.update(DASHBOARD_METRIC_PORT=str(free_port()), AUTOSCALER_METRIC_PORT=str(free_port()))
    done = subprocess.run(
        [sys.executable, "-c", _START_RUN_AND_LIST],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_local_ray_listens_on_loopback_only(local_ray_run: subprocess.CompletedProcess):
    """Every socket of a Ray started by ``init_ray()`` is bound to loopback.

    Ray 2.60 needs no exception on Linux: with a loopback node address the GCS, raylet (node
    manager and object manager), core workers, dashboard and its agents all bind to it.
    """
    listing = json.loads(local_ray_run.stdout.strip().splitlines()[-1])
    sockets = listing["sockets"]
    missing = set(listing["reported"]) - {s["port"] for s in sockets}
    assert not missing, f"ports Ray reports but nothing listens on: {sorted(missing)}"
    exposed = [s for s in sockets if not _is_loopback(s["ip"])]
    assert not exposed, "Ray listens beyond loopback:\n" + "\n".join(
        f"{s['process']} {s['ip']}:{s['port']} {s['status']}" for s in exposed
    )


@pytest.mark.slow
def test_ray_data_keeps_its_info_lines_out_of_a_log(local_ray_run: subprocess.CompletedProcess):
    """No "Starting execution of Dataset…", plans, or progress reports every 10 s."""
    log = local_ray_run.stdout + local_ray_run.stderr
    assert not [line for line in log.splitlines() if "Dataset" in line], log[-3000:]


def test_progress_lines_say_each_tenth_once_and_a_quick_task_one_line():
    out = io.StringIO()
    lines = ProgressLines(1000, "encode", unit="rows", file=out, interval=0)
    for _ in range(1000):
        lines.update()
    written = out.getvalue().splitlines()
    assert len(written) == PARTS
    assert written[0].startswith("encode: 10% (100/1000 rows, ")
    assert written[-1].startswith("encode: 100% (1000/1000 rows, ")

    out = io.StringIO()  # done in less than the interval between lines: the last line only
    lines = ProgressLines(1000, "encode", unit="rows", file=out)
    for _ in range(1000):
        lines.update()
    assert [line.split(" (")[0] for line in out.getvalue().splitlines()] == ["encode: 100%"]

    out = io.StringIO()
    lines = ProgressLines(4, "epoch 1/1", unit="steps", file=out, interval=0)
    for _ in range(4):
        lines.update()
    assert [line.split(" (")[0] for line in out.getvalue().splitlines()] == [
        "epoch 1/1: 20%",  # 1/4 covers two tenths: one line
        "epoch 1/1: 50%",
        "epoch 1/1: 70%",
        "epoch 1/1: 100%",
    ]


def test_console_progress_is_a_bar_only_on_a_terminal(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert isinstance(console_progress(10, "x"), ProgressLines)
    monkeypatch.setattr(sys, "stdout", Terminal())
    assert not isinstance(console_progress(10, "x"), ProgressLines)  # tqdm


def _tiny_world(out: Path, config_dir: Path) -> Path:
    config = config_dir / "world.yaml"
    config.write_text(yaml.safe_dump({"splits": {"train": 8, "val": 4, "test": 4}}))
    return generate(out, config, seed=3, progress=True)


def test_toyworld_progress_in_a_log_is_whole_lines(tmp_path: Path, capsys):
    _tiny_world(tmp_path / "w", tmp_path)
    captured = capsys.readouterr()
    assert "%|" not in captured.err  # no bar
    assert captured.out.splitlines() == [
        line for line in captured.out.splitlines() if line.startswith("toyworld: ")
    ]
    assert captured.out.splitlines()[-1].startswith("toyworld: 100% (16/16 img, ")


def test_a_relative_nltk_data_reaches_local_workers_absolute(tmp_path, monkeypatch) -> None:
    """``NLTK_DATA=../shared/nltk_data xmr train`` from the repository: the workers of the
    local Ray run in other folders, so they get the folders made absolute here."""
    from xmr.pipeline.ray_executor import worker_env_vars

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NLTK_DATA", os.pathsep.join(["../nltk", "/srv/nltk", ""]))
    assert worker_env_vars()["NLTK_DATA"] == os.pathsep.join(
        [str(tmp_path.parent / "nltk"), "/srv/nltk"]
    )
    monkeypatch.delenv("NLTK_DATA")
    assert "NLTK_DATA" not in worker_env_vars()
