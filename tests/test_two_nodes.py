"""Proven on two nodes, for real (issue 13).

A head and a second node on this machine (``ray start --head`` / ``ray start --address``, each
with its own temp dir and worker ports, one CPU each, token authentication on) and one
``mlflow server`` on 127.0.0.1. Through ``ray job submit --working-dir <repo>``, with the
server's URI in the jobs' runtime env (``MLFLOW_TRACKING_URI``, no ``--tracking-uri`` flag): a
tiny training ``xmr tune`` (one trial per node at once) and another stopped by ``ray job
stop``, ``ray_jobs/odmap.py`` with 2-worker training runs (submitted twice: the second finds
every step done) and a ``python -m xmr.synth`` whose second node is killed mid-build.
Ray's state API says where the work ran; the server holds every run; no job opened a sqlite
store of its own. The module stops only the processes it started (never ``ray stop``).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import mlflow
import psutil
import pytest
import yaml
from conftest import NLTK_DATA, REPO
from ray_cluster import RAY, RayCluster, free_port, free_worker_ranges, running_mlflow_server

from xmr.cluster import JOB_STOP_WAIT_S
from xmr.data.synthetic import read_manifest, read_synthetic_errors, synthetic_table
from xmr.synth.removal.plan import read_plan

pytestmark = pytest.mark.slow

# What xmr would create in a job's working directory with no tracking URI, and must not.
LOCAL_STORES = {"mlflow.db", "mlruns", "mlartifacts"}

T = TypeVar("T")


@dataclass
class TwoNodes:
    """The cluster, the MLflow server's URI, and the folders the jobs read and write (one
    machine: every node sees them, as every node of a real cluster sees a shared filesystem)."""

    cluster: RayCluster
    out: Path  # the jobs' outputs
    world: Path  # a tiny ToyWorld
    tracking_uri: str = ""  # the MLflow server's
    head_id: str = ""
    worker_id: str = ""
    worker_killed: bool = False
    node_ports: tuple[int, int] = (0, 0)  # the second node's worker port range

    @property
    def worker_dir(self) -> str:
        return self.cluster.node_dirs[-1]

    def start(self) -> None:
        """Start the head, then the second node, each with a worker port range no other Ray
        on the machine holds (a worker node started again reuses the dead one's)."""
        head_ports, self.node_ports = free_worker_ranges(2)
        self.cluster.start_head(num_cpus=1, worker_ports=head_ports)
        self.add_worker()

    def add_worker(self) -> None:
        """Start the second node and learn both nodes' ids from the state API."""
        self.cluster.add_node(num_cpus=1, worker_ports=self.node_ports)
        self.worker_killed = False
        nodes = [n for n in self.cluster.state("nodes") if n["state"] == "ALIVE"]
        self.head_id = next(n["node_id"] for n in nodes if n["is_head_node"])
        (self.worker_id,) = [
            n["node_id"] for n in nodes if n["node_id"] not in (self.head_id, self.worker_id)
        ]

    def job_command(
        self, submission_id: str, *entrypoint: str, env_vars: Mapping[str, str] | None = None
    ) -> list[str]:
        """``ray job submit`` of ``entrypoint`` (this interpreter) from the repository, with
        ``env_vars`` (default: the MLflow server and NLTK_DATA) in the job's runtime env."""
        if env_vars is None:
            env_vars = {"MLFLOW_TRACKING_URI": self.tracking_uri, "NLTK_DATA": str(NLTK_DATA)}
        return self.cluster.submit_command(
            [sys.executable, *entrypoint],
            working_dir=REPO,
            env_vars=env_vars,
            submission_id=submission_id,
        )

    def submit(
        self, submission_id: str, *entrypoint: str, env_vars: Mapping[str, str] | None = None
    ) -> str:
        """Run ``entrypoint`` as a Ray job, wait for it, and return its log; a failed job fails
        the test with the end of its log."""
        done = subprocess.run(
            self.job_command(submission_id, *entrypoint, env_vars=env_vars),
            env=self.cluster.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        log = done.stdout + done.stderr
        (self.out / f"{submission_id}.log").write_text(log)
        assert done.returncode == 0, log[-4000:]
        assert f"Job '{submission_id}' succeeded" in log
        return log

    def job_log(self, submission_id: str) -> list[str]:
        """The job's log as ``ray job logs`` prints it (the driver's output only), as lines."""
        command = [RAY, "job", "logs", "--address", self.cluster.dashboard, submission_id]
        done = subprocess.run(
            command, env=self.cluster.env, capture_output=True, text=True, timeout=60, check=True
        )
        return done.stdout.splitlines()

    def job_rows(self, submission_id: str, resource: str) -> list[dict]:
        """The job's tasks or actors from Ray's state API (``ray list``)."""
        (job,) = [
            j["job_id"] for j in self.cluster.state("jobs") if j["submission_id"] == submission_id
        ]
        return self.cluster.state(resource, f"job_id={job}")

    def check_no_local_store(self) -> None:
        """No job (driver, Train worker, Tune trial) opened a tracking store of its own: none
        in the jobs' unpacked working directories, the nodes' temp dirs or the outputs."""
        head = Path(self.cluster.head_dir)
        assert list(head.glob("session_*/runtime_resources/working_dir_files/*")), (
            "the jobs did not run from an unpacked working_dir"
        )
        folders = [head, *map(Path, self.cluster.node_dirs), self.out]
        stores = [p for f in folders for p in f.rglob("*") if p.name in LOCAL_STORES]
        assert not stores, stores


def _eventually(read: Callable[[], T], done: Callable[[T], bool], tries: int = 6) -> T:
    """``read()`` until ``done`` holds of it (tasks reach the state API within seconds)."""
    for _ in range(tries - 1):
        value = read()
        if done(value):
            return value
        time.sleep(2)
    return read()


def _nodes(rows: list[dict]) -> set[str]:
    return {row["node_id"] for row in rows if row["node_id"]}


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory) -> Iterator[TwoNodes]:
    from xmr.toyworld import generate

    root = tmp_path_factory.mktemp("two-nodes")
    (root / "world.yaml").write_text("splits: {train: 40, val: 8, test: 8}\n")
    world = generate(root / "world", root / "world.yaml", seed=3)
    (root / "server").mkdir()
    (root / "out").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env.update(
        # Token authentication on, with a token of the module's own (not ~/.ray's).
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN=secrets.token_hex(32),
        # The dashboard's and the autoscaler's metrics servers have fixed ports (44227,
        # 44217) that another Ray on this machine may hold.
        DASHBOARD_METRIC_PORT=str(free_port()),
        AUTOSCALER_METRIC_PORT=str(free_port()),
        # The head checks each node every second instead of every 3 s (5 misses: dead), so
        # the job notices the killed node in seconds; a raylet still has 10 s to answer.
        RAY_health_check_period_ms="1000",
        # As `xmr cluster up` sets it: `ray job stop` leaves a job this long to mark its runs
        # KILLED before SIGKILL (Ray's default, 3 s, is short on a busy 2-core machine).
        RAY_JOB_STOP_WAIT_TIME_S=JOB_STOP_WAIT_S,
        NLTK_DATA=str(NLTK_DATA),
        PYTHONUNBUFFERED="1",
    )
    cluster = RayCluster(env)
    nodes = TwoNodes(cluster, root / "out", world)
    with ThreadPoolExecutor(max_workers=1) as pool:
        starting = pool.submit(nodes.start)  # the cluster starts while the server does
        try:
            with running_mlflow_server(root / "server") as uri:
                starting.result()
                nodes.tracking_uri = uri
                yield nodes
        finally:
            futures.wait([starting])
            cluster.stop()


@pytest.fixture(autouse=True)
def _second_node_up(two_nodes: TwoNodes) -> None:
    """Start the second node again when a test before this one killed it."""
    if two_nodes.worker_killed:
        two_nodes.add_worker()


def _runs(uri: str, experiment: str) -> list:
    client = mlflow.MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no experiment {experiment} on {uri}"
    return client.search_runs([found.experiment_id])


def test_the_cluster_refuses_a_request_without_its_token(two_nodes: TwoNodes) -> None:
    """Token authentication is on: the job API (Ray's Jobs REST API) answers only with it."""
    import requests

    jobs = f"{two_nodes.cluster.dashboard}/api/jobs/"
    assert requests.get(jobs, timeout=30).status_code == 401
    token = {"Authorization": f"Bearer {two_nodes.cluster.env['RAY_AUTH_TOKEN']}"}
    assert requests.get(jobs, headers=token, timeout=30).status_code == 200


def _fair_alpha_space(two_nodes: TwoNodes, epochs: int) -> Path:
    """A training sweep on the tiny world: FairSample α = 0 and 1, one CPU per trial."""
    space = two_nodes.out / f"two_nodes_fair_{epochs}.yaml"
    space.write_text(
        yaml.safe_dump(
            {
                "description": "FairSample α on a tiny world, one trial per node",
                "command": "train",
                "fixed": {"data": str(two_nodes.world), "epochs": epochs},
                "params": {"fair_alpha": {"grid": [0.0, 1.0]}},
                "metrics": [
                    {"name": "test/bias_at_10", "mode": "min", "abs": True},
                    {"name": "test/recall_t2i_at_10", "mode": "max"},
                ],
                "resources": {"cpus": 1},
            }
        )
    )
    return space


def _running_map_task(cluster: RayCluster, temp_dir: str) -> bool:
    """Whether a worker of the node under ``temp_dir`` runs a Ray Data map task now (its
    process title: ``ray::MapBatches(...)``)."""
    for process in cluster.node_processes(temp_dir):
        try:
            if " ".join(process.cmdline()).startswith("ray::MapBatches"):
                return True
        except psutil.Error:  # it ended while we looked
            continue
    return False


# First on the fresh cluster: after the jobs below had run on it, the second node sometimes
# ran none of the build's map tasks before its end (`_second_node_up` starts the node again
# for the tests after this one).
def test_killing_the_second_node_mid_synth_loses_no_row(two_nodes: TwoNodes, small_toyworld):
    """The node dies (every process SIGKILLed) while it runs a fill/caption task and shards
    are being committed; Ray reruns its lost tasks on the head, and the same job finishes the
    build: every planned row in exactly one shard or in the errors."""
    out = two_nodes.out / "dprime"
    command = two_nodes.job_command(
        "synth", "-m", "xmr.synth", "--data", str(small_toyworld), "--out", str(out),
        "--caption", "prompt", "--fill", "ns", "--rows-per-shard", "4", "--batch-size", "4",
    )  # fmt: skip
    log = two_nodes.out / "synth.log"
    worker_dir, worker_id = two_nodes.worker_dir, two_nodes.worker_id
    job = subprocess.Popen(
        command, env=two_nodes.cluster.env, stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    shards_at_kill = None
    try:
        while job.poll() is None and shards_at_kill is None:
            shards = list(out.glob("data/part-*.parquet"))
            if shards and _running_map_task(two_nodes.cluster, worker_dir):
                two_nodes.cluster.kill_node(worker_dir)
                two_nodes.worker_killed = True
                shards_at_kill = len(shards)
                manifest_at_kill = (out / "manifest.json").exists()
            time.sleep(0.02)
        assert job.wait(timeout=600) == 0, log.read_text()[-4000:]
    finally:
        if job.poll() is None:
            job.kill()
    assert shards_at_kill is not None, "the build ended before the second node ran a task"
    assert not manifest_at_kill

    manifest = read_manifest(out)
    assert manifest["planned"] == manifest["written"] + manifest["errors"]
    assert shards_at_kill < manifest["counts"]["shards"]
    assert manifest["counts"]["shards_resumed"] == 0  # one submission built it all
    keys = synthetic_table(out)["key"].to_pylist()
    failed = read_synthetic_errors(out)["key"].to_pylist()
    planned, plan_errors, _ = read_plan(out)
    assert len(keys) == len(set(keys)) == manifest["written"]
    every_unit = [r.key for r in planned] + plan_errors["key"].to_pylist()
    assert sorted(keys + failed) == sorted(every_unit)

    # Both nodes ran the build's tasks before the kill; the state API reports the node dead.
    nodes = {n["node_id"]: n["state"] for n in two_nodes.cluster.state("nodes")}
    assert nodes[worker_id] == "DEAD" and nodes[two_nodes.head_id] == "ALIVE"
    tasks = two_nodes.job_rows("synth", "tasks")
    assert _nodes(tasks) == {two_nodes.head_id, worker_id}

    (run,) = _runs(two_nodes.tracking_uri, "xmr/synth/toyworld")
    assert run.info.status == "FINISHED"
    for count in ("planned", "written", "errors"):
        assert run.data.metrics[count] == manifest[count]
    artifacts = {
        a.path for a in mlflow.MlflowClient(two_nodes.tracking_uri).list_artifacts(run.info.run_id)
    }
    assert "manifest.json" in artifacts  # through the server's artifact proxy
    assert (out / "samples.png").stat().st_size > 0
    two_nodes.check_no_local_store()


def test_a_sweep_trains_its_trials_at_once_one_per_node(two_nodes: TwoNodes) -> None:
    """Two one-CPU trials on two one-CPU nodes: a trial's own process reserves no CPU, so
    both worker groups start at once, one on each node, and train to their end."""
    space = _fair_alpha_space(two_nodes, epochs=1)
    log = two_nodes.submit(
        "tune", "-m", "xmr.cli", "tune", "--space", str(space), "--name", "two-nodes",
        "--storage", str(two_nodes.out / "sweeps"),
    )  # fmt: skip
    assert "WorkerGroupStartupTimeoutError" not in log
    # Its log: each trial's start, its training's progress and its summary, in a budget of
    # 40 lines + 12 per training epoch.
    lines = two_nodes.job_log("tune")
    shown = "\n".join(lines)
    (two_nodes.out / "tune-job.log").write_text(shown)
    assert len(lines) <= 40 + 12 * 2, shown
    assert sum("epoch 1/1: 100% " in line for line in lines) == 2, shown
    for alpha in (0, 1):
        assert f"sweep two-nodes: trial fair_alpha={alpha} started" in shown
        (done,) = [line for line in lines if f"done trial fair_alpha={alpha} in " in line]
        assert "bias_at_10 " in done and "recall_t2i_at_10 " in done, done
    assert any(line.startswith("done sweep two-nodes in ") for line in lines), shown
    assert not [line for line in lines if " INFO " in line], shown

    workers = [a for a in two_nodes.job_rows("tune", "actors")
               if a["class_name"] == "RayTrainWorker"]  # fmt: skip
    assert len(workers) == 2 and _nodes(workers) == {two_nodes.head_id, two_nodes.worker_id}

    runs = _runs(two_nodes.tracking_uri, "xmr/tune/two_nodes_fair_1")
    (parent,) = [r for r in runs if r.data.tags.get("xmr.command") == "tune"]
    assert parent.info.run_name == "two-nodes" and parent.info.status == "FINISHED"
    trials = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.info.run_name for r in trials) == ["fair_alpha=0", "fair_alpha=1"]
    assert {r.info.status for r in trials} == {"FINISHED"} and len(runs) == 3
    assert all("final/test/bias_at_10" in r.data.metrics for r in trials)
    two_nodes.check_no_local_store()


def test_ray_job_stop_leaves_no_run_of_the_sweep_running(two_nodes: TwoNodes) -> None:
    """``ray job stop`` mid-trial (SIGTERM, then SIGKILL 3 s later): the sweep's run and its
    trials' runs, named by their values from the start, end KILLED."""
    space = _fair_alpha_space(two_nodes, epochs=50)
    command = two_nodes.job_command(
        "stopped", "-m", "xmr.cli", "tune", "--space", str(space), "--name", "stopped",
        "--storage", str(two_nodes.out / "sweeps"),
    )  # fmt: skip
    log = two_nodes.out / "stopped.log"
    job = subprocess.Popen(
        command, env=two_nodes.cluster.env, stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    client = mlflow.MlflowClient(two_nodes.tracking_uri)
    try:
        deadline = time.monotonic() + 400
        while not _trial_trained_an_epoch(client, "xmr/tune/two_nodes_fair_50"):
            assert job.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(1)
        stopped = two_nodes.cluster.ray("job", "stop", "--address", two_nodes.cluster.dashboard,
                                        "stopped")  # fmt: skip
        assert stopped.returncode == 0, stopped.stderr
        job.wait(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()

    # Nothing of the stopped job keeps running: no trial, training worker or loader (Ray
    # Data's detached bookkeeping actors, which hold nothing, serve every job and stay).
    def working(actor: dict) -> bool:
        name = actor["class_name"]
        return actor["state"] == "ALIVE" and (
            name in {"ImplicitFunc", "TrainController", "RayTrainWorker"}
            or name.startswith("MapWorker")
        )

    alive = _eventually(
        lambda: [a for a in two_nodes.job_rows("stopped", "actors") if working(a)],
        lambda actors: not actors,
        tries=30,
    )
    assert not alive, alive
    _release_reservations(two_nodes, "stopped")
    runs = _runs(two_nodes.tracking_uri, "xmr/tune/two_nodes_fair_50")
    statuses = {r.info.run_name: r.info.status for r in runs}
    assert statuses == {
        "stopped": "KILLED", "fair_alpha=0": "KILLED", "fair_alpha=1": "KILLED"
    }, log.read_text()[-4000:]  # fmt: skip


REMOVE_PLACEMENT_GROUPS = """
import sys
import ray
from ray.util.placement_group import PlacementGroup, remove_placement_group
ray.init(address=sys.argv[1], log_to_driver=False)
for hex_id in sys.argv[2:]:
    remove_placement_group(PlacementGroup(ray.PlacementGroupID.from_hex(hex_id)))
"""


def _release_reservations(two_nodes: TwoNodes, submission_id: str) -> None:
    """Remove the placement groups the stopped job left reserved.

    Ray can leave a stopped trial's Ray Train placement group CREATED (its controller killed
    before Train's cleaner removed it), holding a CPU for good: the next job's two training
    workers would wait for it forever. Nothing of the stopped job can reach it any more.
    """
    (job,) = [
        j["job_id"] for j in two_nodes.cluster.state("jobs") if j["submission_id"] == submission_id
    ]
    rows = two_nodes.cluster.state("placement-groups", "state=CREATED")
    leaked = [row["placement_group_id"] for row in rows if row.get("creator_job_id") == job]
    if leaked:
        subprocess.run(
            [sys.executable, "-c", REMOVE_PLACEMENT_GROUPS, two_nodes.cluster.gcs_address, *leaked],
            env=two_nodes.cluster.env, check=True, capture_output=True, timeout=120,
        )  # fmt: skip


def _trial_trained_an_epoch(client: mlflow.MlflowClient, experiment: str) -> bool:
    """Whether both trials' runs exist and one has logged an epoch."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return False
    trials = client.search_runs([found.experiment_id], "tags.`xmr.trial_id` != ''")
    return len(trials) == 2 and any("train/loss" in r.data.metrics for r in trials)


def test_the_odmap_job_runs_and_its_resubmission_skips_every_step(two_nodes: TwoNodes) -> None:
    """Each training run has two data-parallel workers of one CPU: one on each node."""
    command = [
        "ray_jobs/odmap.py", "--data", str(two_nodes.world), "--epochs", "1", "--limit", "20",
        "--workers", "2", "--cpus-per-worker", "1", "--storage", str(two_nodes.out / "jobs"),
        "--name", "two-nodes",
    ]  # fmt: skip
    two_nodes.submit("odmap", *command)
    # The job's log (`ray job logs`): each training's progress (a line per tenth of its one
    # epoch) and a summary line per step, in a budget of 40 lines + 12 per training epoch.
    lines = two_nodes.job_log("odmap")
    log = "\n".join(lines)
    (two_nodes.out / "odmap-job.log").write_text(log)
    assert len(lines) <= 40 + 12 * 2, log
    assert sum("epoch 1/1: 100% " in line for line in lines) == 2, log
    for step, numbers in [
        ("synth", "written "), ("train-d", "odmap_at_1 "), ("train-d-dprime", "odmap_at_1 "),
        ("compare", ""),
    ]:  # fmt: skip
        (summary,) = [line for line in lines if line.startswith(f"done {step} in ")]
        assert numbers in summary and f"{two_nodes.tracking_uri}/#/experiments/" in summary
    assert any(line.startswith("done job two-nodes in ") for line in lines), log
    assert not [line for line in lines if " INFO " in line], log  # libraries' INFO: files

    actors = two_nodes.job_rows("odmap", "actors")
    workers = [a for a in actors if a["class_name"] == "RayTrainWorker"]
    assert len(workers) == 4, workers  # two per training run
    assert _nodes(workers) == {two_nodes.head_id, two_nodes.worker_id}

    runs = _runs(two_nodes.tracking_uri, "xmr/jobs/odmap")
    (job,) = [r for r in runs if r.data.tags.get("xmr.command") == "job"]
    assert job.info.run_name == "two-nodes" and job.info.status == "FINISHED"
    steps = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == job.info.run_id]
    assert sorted(r.info.run_name for r in steps) == ["synth", "train-d", "train-d-dprime"]
    assert {r.info.status for r in steps} == {"FINISHED"}
    trained = [r for r in steps if r.info.run_name.startswith("train")]
    assert {r.data.params["train.workers"] for r in trained} == {"2"}
    assert all(Path(r.data.tags["xmr.checkpoint"]).is_file() for r in trained)
    assert "delta/test/odmap_at_1" in job.data.metrics  # the comparison step's
    assert (two_nodes.out / "jobs" / "two-nodes" / "comparison.csv").is_file()

    again = two_nodes.submit("odmap-again", *command)
    for number, step in enumerate(["synth", "train-d-dprime", "train-d", "compare"], start=1):
        assert f"== {number}/4 {step}: finished before, skipped" in again
    assert "steps run 0, finished before 4" in again
    rerun = _runs(two_nodes.tracking_uri, "xmr/jobs/odmap")
    assert {r.info.run_id for r in rerun} == {r.info.run_id for r in runs}  # no new run
    assert mlflow.MlflowClient(two_nodes.tracking_uri).get_run(job.info.run_id).info.status == (
        "FINISHED"
    )
    two_nodes.check_no_local_store()


def test_synth_in_a_job_writes_its_default_output_under_xmr_storage(two_nodes: TwoNodes) -> None:
    """``python -m xmr.synth`` without ``--out`` runs in Ray's copy of ``--working-dir``: with
    no XMR_STORAGE it refuses, naming the flag, before it writes anything; with XMR_STORAGE in
    the job's runtime env, as ``xmr job-env`` prints it from the submitting shell, it writes
    under it, its MLflow run named after the folder."""
    synth = ["-m", "xmr.synth", "--data", str(two_nodes.world), "--limit", "4", "--caption",
             "prompt", "--fill", "ns", "--batch-size", "4"]  # fmt: skip
    refused = subprocess.run(
        two_nodes.job_command("synth-no-storage", *synth),
        env=two_nodes.cluster.env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    log = refused.stdout + refused.stderr
    assert refused.returncode != 0, log[-4000:]
    # One error line; ray job submit repeats the end of a failed job's log.
    (line,) = {line.strip() for line in log.splitlines() if line.strip().startswith("error: ")}
    assert line.startswith("error: --out ") and "_ray_pkg_" in line and "XMR_STORAGE" in line
    assert "xmr-synth" not in {p.name for p in Path(two_nodes.cluster.head_dir).rglob("xmr-*")}

    storage = two_nodes.out / "storage"
    shell = {**two_nodes.cluster.env, "XMR_STORAGE": str(storage),
             "MLFLOW_TRACKING_URI": two_nodes.tracking_uri}  # fmt: skip
    printed = subprocess.run(
        [sys.executable, "-m", "xmr.cli", "job-env"],
        env=shell, capture_output=True, text=True, check=True, cwd=REPO,
    )  # fmt: skip
    env_vars = json.loads(printed.stdout)["env_vars"]
    assert env_vars["XMR_STORAGE"] == str(storage) and "RAY_AUTH_TOKEN" not in env_vars
    two_nodes.submit("synth-storage", *synth, env_vars=env_vars)
    out = storage / "xmr-synth" / "toyworld-train"
    assert read_manifest(out)["planned"] > 0
    runs = _runs(two_nodes.tracking_uri, "xmr/synth/toyworld")
    (run,) = [r for r in runs if r.data.params.get("synth.out") == str(out)]
    assert run.info.run_name == "toyworld-train" and run.info.status == "FINISHED"
    two_nodes.check_no_local_store()
