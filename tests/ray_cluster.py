"""What tests start on this machine and stop themselves: a Ray cluster of several nodes
(``ray start``), an ``mlflow server``, and the helpers that kill exactly those processes.

The processes are started and stopped by :mod:`xmr.cluster` (what ``xmr cluster up/down``
run); this module adds what tests ask of a cluster: Ray's state API, ``ray job submit`` command
lines, and the MLflow server as a context manager. Never ``ray stop`` here: it kills every Ray
process of the machine, those of CI and of other tests too.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import psutil

from xmr.cluster import (
    RAY,
    RayNodes,
    free_port,
    free_worker_ranges,
    kill_all,
    start_mlflow_server,
    stop_process_tree,
    stop_processes_naming,
    wait_for_mlflow,
    with_descendants,
)

__all__ = ["RayCluster", "free_port", "free_worker_ranges", "running_mlflow_server"]

OBJECT_STORE_BYTES = 300 * 2**20
"""Each test node's object store: small, as several test clusters share the machine."""


class RayCluster(RayNodes):
    """:class:`~xmr.cluster.RayNodes` with small object stores, and the state API and job
    command lines tests use. ``env``: set ``RAY_AUTH_MODE`` there (see RayNodes)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        super().__init__(env, object_store_bytes=OBJECT_STORE_BYTES)

    def node_processes(self, temp_dir: str) -> list[psutil.Process]:
        """The processes of the node under ``temp_dir`` now: its own and their descendants
        (agents, workers, whose titles say what they run: ``ray::IDLE``, ``ray::MapBatches…``)."""
        return with_descendants(self.roots.get(temp_dir, []))

    def kill_node(self, temp_dir: str) -> None:
        """SIGKILL every process of the node under ``temp_dir`` at once: the node dies as a
        machine that loses power does, without telling the head."""
        kill_all(self.roots.get(temp_dir, []))
        stop_processes_naming(temp_dir)  # anything started after the node came up

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
        if not listed.stdout.lstrip().startswith("["):  # none: "No resource in the cluster"
            return []
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
    one worker, no job runner; :func:`xmr.cluster.start_mlflow_server`); yields its URI and
    stops it."""
    port = free_port()
    server = start_mlflow_server(root, port)
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_for_mlflow(uri, server, root / "mlflow.log")
        yield uri
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            stop_process_tree(psutil.Process(server.pid), grace=60)
        server.wait(timeout=60)
