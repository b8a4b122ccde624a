"""What tests start on this machine and stop themselves: a Ray cluster of several nodes
(``ray start``), an ``mlflow server``, and the helpers that kill exactly those processes.

Never ``ray stop`` here: it kills every Ray process of the machine, those of CI and of other
tests too. Each node gets its own ``--temp-dir``, which its own processes (GCS, dashboard,
raylet, log monitor) name on their command lines; its agents, workers and job drivers run under
them. Stopping a node kills the processes that name its folder and everything under them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
"""The ``ray`` command of this interpreter's environment (the venv need not be on PATH)."""


def free_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def kill_all(processes: Iterable[psutil.Process]) -> None:
    """SIGKILL ``processes`` and every process under them at once, then wait for them to go
    (once: waiting for each in turn costs seconds apiece for processes not our children)."""
    family = []
    for p in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            family += [p, *p.children(recursive=True)]  # before a parent dies and they move
    for p in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(family, timeout=30)


def processes_naming(folder: str) -> list[psutil.Process]:
    """The processes whose command line names ``folder`` (a node's temp dir)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(folder in part for part in p.info["cmdline"] or []):
                found.append(p)
    return found


def stop_processes_naming(*folders: str) -> None:
    """Kill the processes of the Ray nodes under ``folders`` only (never ``ray stop``)."""
    kill_all(p for folder in folders for p in processes_naming(folder))


class RayCluster:
    """A head and worker nodes started with ``ray start`` on this machine.

    Every node has its own short temp dir (Ray's socket paths are limited to ~100 characters)
    and worker port range; the head's dashboard (the job and state APIs) listens on 127.0.0.1
    at a free port. ``env`` is what every ``ray`` command runs with: set ``RAY_AUTH_MODE``
    there, as Ray otherwise turns token authentication on by itself when ``~/.ray/auth_token``
    exists. Ray on Linux replaces a loopback node address with the machine's own, so the GCS
    and raylets listen on that address; only the dashboard is bound to loopback here.
    """

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.dashboard = ""  # http://127.0.0.1:PORT once the head runs
        self.gcs_address = ""  # HOST:PORT that nodes join
        self.head_dir = ""
        self.node_dirs: list[str] = []  # the worker nodes' temp dirs, alive or killed
        # Each node's own processes (raylet, log monitor, ...) by temp dir, found once at start:
        # its agents and workers are their children.
        self._roots: dict[str, list[psutil.Process]] = {}

    def _start(self, args: Sequence[str], temp_dir: str, worker_ports: tuple[int, int]) -> str:
        low, high = worker_ports
        command = [
            RAY, "start", *args, "--temp-dir", temp_dir, "--disable-usage-stats",
            "--min-worker-port", str(low), "--max-worker-port", str(high),
            "--dashboard-agent-listen-port", str(free_port()),  # default 52365 may be taken
            "--object-store-memory", str(300 * 2**20),
        ]  # fmt: skip
        started = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=180)
        if started.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{started.stderr[-3000:]}")
        self._roots[temp_dir] = processes_naming(temp_dir)
        return started.stdout

    def start_head(self, num_cpus: int, worker_ports: tuple[int, int]) -> None:
        self.head_dir = tempfile.mkdtemp(prefix="xr", dir="/tmp")
        dashboard = free_port()
        head = [
            "--head", "--num-cpus", str(num_cpus), "--port", str(free_port()),
            "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard),
            "--ray-client-server-port", str(free_port()),
        ]  # fmt: skip
        out = self._start(head, self.head_dir, worker_ports)
        # "ray start --address='192.0.2.2:6380'": what the head tells other nodes to run
        self.gcs_address = re.search(r"ray start --address='([^']+)'", out).group(1)
        self.dashboard = f"http://127.0.0.1:{dashboard}"

    def add_node(self, num_cpus: int, worker_ports: tuple[int, int]) -> str:
        """Start a worker node joined to the head; returns its temp dir."""
        temp_dir = tempfile.mkdtemp(prefix="xr", dir="/tmp")
        self.node_dirs.append(temp_dir)
        self._start(
            ["--address", self.gcs_address, "--num-cpus", str(num_cpus)], temp_dir, worker_ports
        )
        return temp_dir

    def node_processes(self, temp_dir: str) -> list[psutil.Process]:
        """The processes of the node under ``temp_dir`` now: its own and their descendants
        (agents, workers, whose titles say what they run: ``ray::IDLE``, ``ray::MapBatches…``)."""
        found = []
        for root in self._roots.get(temp_dir, []):
            with contextlib.suppress(psutil.NoSuchProcess):
                found += [root, *root.children(recursive=True)]
        return found

    def kill_node(self, temp_dir: str) -> None:
        """SIGKILL every process of the node under ``temp_dir`` at once: the node dies as a
        machine that loses power does, without telling the head."""
        kill_all(self._roots.get(temp_dir, []))
        stop_processes_naming(temp_dir)  # anything started after the node came up

    def stop(self) -> None:
        """Kill every process of every node this cluster started, then remove their temp dirs
        (logs, sockets, the jobs' unpacked working dirs)."""
        temp_dirs = [d for d in [*self.node_dirs, self.head_dir] if d]
        stop_processes_naming(*temp_dirs)
        for temp_dir in temp_dirs:
            shutil.rmtree(temp_dir, ignore_errors=True)

    def ray(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``ray ARGS`` against this cluster's environment (its token)."""
        return subprocess.run(
            [RAY, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def state(self, resource: str, *filters: str) -> list[dict]:
        """``ray list RESOURCE --detail`` through the dashboard's state API, as JSON rows;
        ``filters``: ``key=value`` expressions."""
        args = ["list", resource, "--address", self.dashboard, "--format", "json", "--detail"]
        args += ["--limit", "10000"]
        for expression in filters:
            args += ["--filter", expression]
        listed = self.ray(*args)
        if listed.returncode != 0:
            raise RuntimeError(f"ray {' '.join(args)} failed:\n{listed.stderr[-3000:]}")
        return json.loads(listed.stdout)

    def submit_command(
        self,
        entrypoint: Sequence[str],
        *,
        working_dir: Path,
        env_vars: Mapping[str, str],
        submission_id: str,
    ) -> list[str]:
        """The ``ray job submit`` command line (waits for the job and streams its log)."""
        runtime_env = json.dumps({"env_vars": dict(env_vars)})
        return [
            RAY, "job", "submit", "--address", self.dashboard, "--submission-id", submission_id,
            "--working-dir", str(working_dir), "--runtime-env-json", runtime_env,
            "--", *entrypoint,
        ]  # fmt: skip


@contextlib.contextmanager
def running_mlflow_server(root: Path) -> Iterator[str]:
    """A real ``mlflow server`` on 127.0.0.1 (sqlite store and proxied artifacts in ``root``,
    one worker, no job runner); yields its URI and stops it (SIGTERM stops its children)."""
    import requests

    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    env.pop("MLFLOW_TRACKING_URI", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
         "--artifacts-destination", str(root / "artifacts")],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=(root / "server.log").open("w"),
    )  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if requests.get(f"{uri}/health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((root / "server.log").read_text()[-3000:])
            time.sleep(0.5)
        yield uri
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
