"""A Ray cluster of several nodes and one MLflow server on this machine, started and stopped as
one: ``xmr cluster up`` / ``xmr cluster down``, and the tests' clusters.

Everything runs as subprocesses (``ray start``, ``mlflow server``); this module imports neither
Ray nor MLflow. Each node has its own short temp dir under the cluster's (Ray's socket paths are
limited to ~100 characters) and its own worker port range; the head's dashboard (the job and
state APIs) listens on 127.0.0.1 at a free port, token authentication is on, and the MLflow
server listens on 127.0.0.1. Ray on Linux replaces a loopback node address with the machine's
own, so the GCS and raylets listen on that address.

Stopping never runs ``ray stop`` (it kills every Ray of the machine): a node's own processes
(GCS, dashboard, raylet, log monitor) name its temp dir on their command lines; its agents,
workers and job drivers run under them. Stopping kills those processes and everything under
them, and the MLflow server by the process id it was started with.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from xmr.errors import UnavailableError
from xmr.job_env import forwarded_env

RAY = str(Path(sys.executable).with_name("ray"))
"""The ``ray`` command of this interpreter's environment (the venv need not be on PATH)."""

STATE_FILE = "cluster.json"
"""What ``up`` started (processes, ports, temp dir), in the cluster's folder."""

TOKEN_FILE = "auth_token"
"""The cluster's Ray token, in the cluster's folder (mode 600; ``RAY_AUTH_TOKEN_PATH``)."""

WORKER_PORTS_PER_NODE = 500
WORKER_PORT_SPAN = (20000, 32000)
"""Where nodes' worker port ranges are taken from: above Ray's default range (10002-19999, which
other local Rays use) and below Linux's ephemeral ports (32768-60999)."""

SUBMIT_EXAMPLE = "python ray_jobs/odmap.py --epochs 1 --limit 300"
"""The job ``up`` shows how to submit."""


def free_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _names(part: str, folder: str) -> bool:
    """Whether a command-line argument names ``folder`` or a path under it."""
    at = part.find(folder)
    while at >= 0:
        end = at + len(folder)
        if end == len(part) or part[end] in "/'\" ,;:":
            return True
        at = part.find(folder, at + 1)
    return False


def processes_naming(folder: str) -> list[psutil.Process]:
    """The processes whose command line names ``folder`` (a node's temp dir) or a path in it."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(_names(part, folder) for part in p.info["cmdline"] or []):
                found.append(p)
    return found


def with_descendants(processes: Iterable[psutil.Process]) -> list[psutil.Process]:
    """``processes`` and every process under them (found before a parent dies and they move)."""
    family: dict[int, psutil.Process] = {}
    for p in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            for member in (p, *p.children(recursive=True)):
                family.setdefault(member.pid, member)
    return list(family.values())


def kill_all(processes: Iterable[psutil.Process]) -> int:
    """SIGKILL ``processes`` and every process under them at once, then wait for them to go
    (once: waiting for each in turn costs seconds apiece for processes not our children).
    Returns how many there were."""
    family = with_descendants(processes)
    for p in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(family, timeout=30)
    return len(family)


def stop_processes_naming(*folders: str) -> int:
    """Kill the processes of the Ray nodes under ``folders`` only (never ``ray stop``);
    returns how many there were."""
    return kill_all(p for folder in folders for p in processes_naming(folder))


def claimed_worker_ports() -> list[tuple[int, int]]:
    """The worker port ranges of the raylets running on this machine (any user's Ray that
    names one on its command line)."""
    claimed = []
    for p in psutil.process_iter(["name", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            line = " ".join(p.info["cmdline"] or [])
            if "raylet" not in (p.info["name"] or "") and "/raylet " not in line:
                continue
            low = re.search(r"--min_worker_port=(\d+)", line)
            high = re.search(r"--max_worker_port=(\d+)", line)
            if low and high and int(low.group(1)) > 0:
                claimed.append((int(low.group(1)), int(high.group(1))))
    return claimed


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True


def free_worker_ranges(count: int, size: int = WORKER_PORTS_PER_NODE) -> list[tuple[int, int]]:
    """``count`` worker port ranges of ``size`` ports within :data:`WORKER_PORT_SPAN` that no
    running raylet claims and where nothing listens now, in random order (two clusters started
    at once rarely pick the same).

    Raises:
        UnavailableError: there are not that many.
    """
    claimed = claimed_worker_ports()
    starts = list(range(WORKER_PORT_SPAN[0], WORKER_PORT_SPAN[1] - size + 1, size))
    secrets.SystemRandom().shuffle(starts)
    chosen: list[tuple[int, int]] = []
    for low in starts:
        high = low + size - 1
        if any(low <= other_high and other_low <= high for other_low, other_high in claimed):
            continue
        if all(_bindable(port) for port in range(low, high + 1)):
            chosen.append((low, high))
            if len(chosen) == count:
                return chosen
    raise UnavailableError(
        f"no {count} free worker port ranges of {size} ports in {WORKER_PORT_SPAN[0]}-"
        f"{WORKER_PORT_SPAN[1]} (other Ray nodes hold them): stop a cluster or use fewer --nodes"
    )


def _last_line(text: str) -> str:
    """The last non-empty line of ``text`` (where a failing command says why), stripped."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


class RayNodes:
    """A head and worker nodes started with ``ray start`` on this machine.

    Every node has its own short temp dir under ``temp_root`` (``/tmp/xr...``) and its own
    worker port range; the head's dashboard (the job and state APIs) listens on 127.0.0.1 at a
    free port. ``env`` is what every ``ray`` command runs with: set ``RAY_AUTH_MODE`` there, as
    Ray otherwise turns token authentication on by itself when ``~/.ray/auth_token`` exists.
    ``object_store_bytes``: each node's object store (None: Ray's default, 30 % of memory).
    ``log_dir``: where each node's ``ray start`` output goes (``ray-start-<node>.log``;
    default: the temp dir, which :meth:`stop` removes).
    """

    def __init__(
        self,
        env: Mapping[str, str],
        object_store_bytes: int | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.env = dict(env)
        self.object_store_bytes = object_store_bytes
        self.temp_root = tempfile.mkdtemp(prefix="xr", dir="/tmp")
        self.log_dir = log_dir or Path(self.temp_root)
        self.dashboard = ""  # http://127.0.0.1:PORT once the head runs
        self.gcs_address = ""  # HOST:PORT that nodes join
        self.head_dir = ""
        self.node_dirs: list[str] = []  # the worker nodes' temp dirs, alive or killed
        # Each node's own processes (raylet, log monitor, ...) by temp dir, found once at start:
        # its agents and workers are their children.
        self.roots: dict[str, list[psutil.Process]] = {}

    def _start(self, args: Sequence[str], temp_dir: str, worker_ports: tuple[int, int]) -> str:
        low, high = worker_ports
        agent_port = free_port()  # the default, 52365, may be taken
        command = [
            RAY, "start", *args, "--temp-dir", temp_dir, "--disable-usage-stats",
            "--min-worker-port", str(low), "--max-worker-port", str(high),
            "--dashboard-agent-listen-port", str(agent_port),
        ]  # fmt: skip
        if self.object_store_bytes is not None:
            command += ["--object-store-memory", str(self.object_store_bytes)]
        os.makedirs(temp_dir, exist_ok=True)
        started = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=180)
        log = self.log_dir / f"ray-start-{os.path.basename(temp_dir)}.log"
        log.write_text(started.stdout + started.stderr)
        self.roots[temp_dir] = processes_naming(temp_dir)
        if started.returncode != 0:
            raise UnavailableError(
                f"`ray start` of a node failed: {_last_line(started.stderr)} (on a busy machine "
                f"retry when it is quieter, or start fewer nodes; all it said: {log})"
            )
        return started.stdout

    def start_head(self, num_cpus: int, worker_ports: tuple[int, int]) -> None:
        """Start the head node (no jobs run before it does)."""
        self.head_dir = os.path.join(self.temp_root, "h")
        gcs, dashboard, client = free_port(), free_port(), free_port()
        head = [
            "--head", "--num-cpus", str(num_cpus), "--port", str(gcs),
            "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard),
            "--ray-client-server-port", str(client),
        ]  # fmt: skip
        self.dashboard = f"http://127.0.0.1:{dashboard}"
        # Every process of the cluster's nodes reaches the state API there: Ray Train's
        # placement-group cleaner asks it whether a training's controller still lives, and
        # without it looks for the Ray of this machine, which holds several (a traceback).
        self.env["RAY_API_SERVER_ADDRESS"] = self.dashboard
        out = self._start(head, self.head_dir, worker_ports)
        # "ray start --address='192.0.2.2:6380'": what the head tells other nodes to run
        self.gcs_address = re.search(r"ray start --address='([^']+)'", out).group(1)

    def add_node(self, num_cpus: int, worker_ports: tuple[int, int]) -> str:
        """Start a worker node joined to the head; returns its temp dir."""
        temp_dir = os.path.join(self.temp_root, f"n{len(self.node_dirs) + 1}")
        self.node_dirs.append(temp_dir)
        self._start(
            ["--address", self.gcs_address, "--num-cpus", str(num_cpus)], temp_dir, worker_ports
        )
        return temp_dir

    def stop(self) -> None:
        """Kill every process of every node, then remove their temp dirs (logs, sockets, the
        jobs' unpacked working dirs)."""
        kill_all([p for roots in self.roots.values() for p in roots])
        stop_processes_naming(self.temp_root)
        shutil.rmtree(self.temp_root, ignore_errors=True)


def start_mlflow_server(root: Path, port: int, *, detach: bool = False) -> subprocess.Popen:
    """Start an ``mlflow server`` on 127.0.0.1:``port``: sqlite store ``root/mlflow.db``,
    artifacts proxied into ``root/artifacts``, one worker, no job runner (≈ 0.5 GB); its log
    is ``root/mlflow.log``. ``detach``: in a session of its own, so that it outlives this
    process and a Ctrl-C in its terminal. Does not wait for it (:func:`wait_for_mlflow`)."""
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    env.pop("MLFLOW_TRACKING_URI", None)
    with (root / "mlflow.log").open("w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
             "--workers", "1", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
             "--artifacts-destination", str(root / "artifacts")],
            cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
            start_new_session=detach,
        )  # fmt: skip


def wait_for_mlflow(uri: str, server: subprocess.Popen, log: Path) -> None:
    """Wait (up to 2 minutes) until the MLflow server at ``uri`` answers its health check.

    Raises:
        UnavailableError: it exited or did not answer in time, with its log's last line.
    """
    deadline = time.monotonic() + 120
    while True:
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"{uri}/health", timeout=2) as answer,
        ):
            if answer.status == 200:
                return
        exited = server.poll() is not None
        if exited or time.monotonic() > deadline:
            why = "exited" if exited else "did not answer in 2 minutes"
            raise UnavailableError(
                f"the MLflow server {why}: {_last_line(log.read_text())} (log: {log})"
            )
        time.sleep(0.5)


def stop_process_tree(process: psutil.Process, grace: float = 30) -> None:
    """SIGTERM ``process`` (an MLflow server stops its workers on it), wait up to ``grace``
    seconds, then SIGKILL whatever of it and its descendants is left."""
    family = with_descendants([process])
    with contextlib.suppress(psutil.NoSuchProcess):
        process.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(family, timeout=grace)
    kill_all(alive)


@dataclass
class ClusterState:
    """What ``xmr cluster up`` started, as recorded in its folder's :data:`STATE_FILE`.

    Attributes:
        folder: the cluster's folder (absolute): this file, the token, MLflow's store and log,
            the jobs' storage.
        temp_dir: Ray's temp dir of the cluster (``/tmp/xr...``); each node has one under it.
        nodes: per node its temp dir, CPUs and worker port range (``[low, high]``), head first.
        gcs_address: ``HOST:PORT`` of the head's GCS.
        dashboard: the head's dashboard and job API, ``http://127.0.0.1:PORT``.
        tracking_uri: the MLflow server, ``http://127.0.0.1:PORT``.
        mlflow_pid, mlflow_started: the server's process id and start time (seconds since the
            epoch; with the id it tells the server from a later process that reuses the id).
        ports: every port the cluster's processes listened on once it was up (not the
            workers', which are in the nodes' ranges).
        started: when ``up`` finished (seconds since the epoch).
    """

    folder: str
    temp_dir: str
    nodes: list[dict] = field(default_factory=list)
    gcs_address: str = ""
    dashboard: str = ""
    tracking_uri: str = ""
    mlflow_pid: int = 0
    mlflow_started: float = 0.0
    ports: list[int] = field(default_factory=list)
    started: float = 0.0

    @property
    def storage(self) -> str:
        """``XMR_STORAGE`` of the cluster's processes: where jobs' outputs go by default."""
        return os.path.join(self.folder, "storage")

    @property
    def token_file(self) -> str:
        return os.path.join(self.folder, TOKEN_FILE)

    def write(self) -> None:
        path = Path(self.folder) / STATE_FILE
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def read(cls, folder: Path) -> ClusterState | None:
        """The state recorded in ``folder`` (None when there is none).

        Raises:
            ValueError: the file is not a cluster's state, naming it.
        """
        path = folder / STATE_FILE
        if not path.exists():
            return None
        try:
            return cls(**json.loads(path.read_text()))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{path}: not an xmr cluster's state ({exc})") from exc

    def mlflow_server(self) -> psutil.Process | None:
        """The MLflow server ``up`` started, if it still runs."""
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(self.mlflow_pid)
            if abs(process.create_time() - self.mlflow_started) < 1:
                return process
        return None

    def processes(self) -> list[psutil.Process]:
        """Every process of this cluster still running: the nodes' and their descendants, and
        the MLflow server's."""
        server = self.mlflow_server()
        roots = processes_naming(self.temp_dir) + ([server] if server else [])
        return with_descendants(roots)

    def env_lines(self) -> list[str]:
        """``export`` lines that point a shell at this cluster: ``ray job ...`` at its job API
        (``RAY_API_SERVER_ADDRESS``), ``ray status`` and xmr's commands at its head
        (``RAY_ADDRESS``), MLflow clients at its server."""
        values = {
            "RAY_ADDRESS": self.gcs_address,
            "RAY_API_SERVER_ADDRESS": self.dashboard,
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": self.token_file,
            "MLFLOW_TRACKING_URI": self.tracking_uri,
        }
        return [f"export {name}={_quoted(value)}" for name, value in values.items()]

    def submit_line(self, entrypoint: str = SUBMIT_EXAMPLE) -> str:
        """A ``ray job submit`` of ``entrypoint`` from a checkout of xmr, to this cluster."""
        return f"ray job submit --address {self.dashboard} --working-dir . -- {entrypoint}"


def _quoted(value: str) -> str:
    """``value`` as a shell word (quoted only when it must be)."""
    if re.fullmatch(r"[\w@%+=:,./-]+", value):
        return value
    return "'" + value.replace("'", "'\\''") + "'"


def default_cpus_per_node(nodes: int) -> int:
    """The machine's cores shared out among ``nodes`` (at least 1 each)."""
    return max(1, (os.cpu_count() or 1) // nodes)


def _listening_ports(processes: Iterable[psutil.Process]) -> list[int]:
    ports = set()
    for p in processes:
        with contextlib.suppress(psutil.Error):
            ports |= {
                c.laddr.port for c in p.net_connections("tcp") if c.status == psutil.CONN_LISTEN
            }
    return sorted(ports)


JOB_STOP_WAIT_S = "15"
"""Seconds ``ray job stop`` waits between SIGTERM and SIGKILL on a cluster of ``xmr cluster``."""


def _node_env(state: ClusterState, token: str) -> dict[str, str]:
    """The environment of every ``ray start``: token authentication with the cluster's token
    file, free ports for the metric servers whose defaults are fixed, the contract's
    ``XMR_STORAGE`` and ``MLFLOW_TRACKING_URI``, which every job on the cluster inherits, and
    this interpreter: its folder first on ``PATH`` and its path in ``XMR_PYTHON``."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    # The jobs run in other folders: NLTK_DATA=../nltk_data and the like, made absolute here.
    env.update(forwarded_env())
    env.update(
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN_PATH=token,
        # The dashboard's and the autoscaler's metrics servers have fixed ports (44227, 44217)
        # that another Ray on this machine may hold.
        DASHBOARD_METRIC_PORT=str(free_port()),
        AUTOSCALER_METRIC_PORT=str(free_port()),
        XMR_STORAGE=state.storage,
        MLFLOW_TRACKING_URI=state.tracking_uri,
        # A job's `python` is this interpreter, whatever the shell's PATH was; a job script
        # started by another says so in one line (ray_jobs/_xmr_python.py).
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", os.defpath)]),
        XMR_PYTHON=sys.executable,
        # `ray job stop`'s time between SIGTERM and SIGKILL (Ray's default 3 s): a stopped
        # job marks its MLflow runs KILLED in it, on a busy machine too.
        RAY_JOB_STOP_WAIT_TIME_S=JOB_STOP_WAIT_S,
    )
    return env


def check_can_start(folder: Path) -> None:
    """Refuse to start a cluster in ``folder`` while the one it records still runs; forget a
    record whose processes are all gone (a reboot, a kill).

    Raises:
        ValueError: one line naming the folder and what to do.
    """
    state = ClusterState.read(folder)
    if state is None:
        return
    if state.processes():
        raise ValueError(
            f"a cluster already runs in {folder} (Ray {state.dashboard}, MLflow "
            f"{state.tracking_uri}): `xmr cluster down --dir {folder}` first, or another --dir"
        )
    forget(state)


def forget(state: ClusterState) -> None:
    """Remove what a stopped cluster leaves behind that is of no more use: its temp dir, its
    token and its state file (MLflow's store, its log and the storage stay)."""
    shutil.rmtree(state.temp_dir, ignore_errors=True)
    for name in (STATE_FILE, TOKEN_FILE):
        with contextlib.suppress(FileNotFoundError):
            (Path(state.folder) / name).unlink()


def cluster_up(folder: Path, nodes: int, cpus_per_node: int) -> ClusterState:
    """Start a head and ``nodes - 1`` worker nodes of ``cpus_per_node`` CPUs each and an MLflow
    server, all on this machine, and record them in ``folder``/:data:`STATE_FILE`.

    On failure everything started so far is stopped again.

    Raises:
        ValueError: a cluster already runs in ``folder``.
        UnavailableError: a node or the server did not start (one line: why, what to try).
    """
    folder = folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    check_can_start(folder)
    (folder / "storage").mkdir(exist_ok=True)
    worker_ranges = free_worker_ranges(nodes)
    mlflow_port = free_port()
    ray_nodes = RayNodes({}, log_dir=folder)
    state = ClusterState(
        folder=str(folder),
        temp_dir=ray_nodes.temp_root,
        tracking_uri=f"http://127.0.0.1:{mlflow_port}",
    )
    token = folder / TOKEN_FILE
    token.unlink(missing_ok=True)
    descriptor = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(secrets.token_hex(32))
    ray_nodes.env = _node_env(state, str(token))
    server = start_mlflow_server(folder, mlflow_port, detach=True)
    state.mlflow_pid = server.pid
    state.mlflow_started = psutil.Process(server.pid).create_time()
    state.write()  # from here on, `down` finds what runs even if `up` is killed
    try:
        ray_nodes.start_head(cpus_per_node, worker_ranges[0])
        state.gcs_address, state.dashboard = ray_nodes.gcs_address, ray_nodes.dashboard
        for worker_ports in worker_ranges[1:]:
            ray_nodes.add_node(cpus_per_node, worker_ports)
        wait_for_mlflow(state.tracking_uri, server, folder / "mlflow.log")
    except BaseException:
        stop_cluster(state)
        raise
    dirs = [ray_nodes.head_dir, *ray_nodes.node_dirs]
    state.nodes = [
        {"temp_dir": d, "cpus": cpus_per_node, "worker_ports": list(r)}
        for d, r in zip(dirs, worker_ranges, strict=True)
    ]
    state.ports = _listening_ports(state.processes())
    state.started = time.time()
    state.write()
    return state


def stop_cluster(state: ClusterState) -> int:
    """Stop every process of the cluster ``state`` records (the Ray nodes with SIGKILL, then
    the MLflow server with SIGTERM), wait until they are gone, and :func:`forget` it.
    Returns how many processes were stopped."""
    server = state.mlflow_server()
    stopped = stop_processes_naming(state.temp_dir)  # the jobs first, while MLflow still runs
    if server is not None:
        stopped += len(with_descendants([server]))
        stop_process_tree(server)
    forget(state)
    return stopped
