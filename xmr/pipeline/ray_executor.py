"""The thin layer that maps :class:`~xmr.pipeline.stage.Stage` objects onto Ray Data actor pools."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import ray
import ray._private.ray_constants
import ray.data
from ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR

from xmr.errors import UnavailableError
from xmr.job_env import forwarded_env
from xmr.logs import MessageFilter, quiet_console
from xmr.pipeline.stage import Batch, Stage, in_row_order, numbered_batches
from xmr.progress import console_progress
from xmr.stops import take_back_sigterm

_LOOPBACK = "127.0.0.1"


def init_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Attach to a running cluster (``address`` or ``RAY_ADDRESS``) or start local Ray, once
    per process: does nothing when Ray is already initialised here.

    One start serves every step of a process (a job's D′ build, then its trainings), so it
    has the settings all of them need: the workers' output comes to this console (training
    progress and epoch lines), and every worker runs :func:`quiet_worker` first, so that the
    libraries' INFO records stay in their log files (:mod:`xmr.logs`).

    The workers get the variables xmr reads, as this process has them (:func:`worker_env_vars`;
    ``NLTK_DATA=../nltk_data xmr train`` finds the tagger in the
    workers too). A local Ray listens on loopback only (see :func:`_single_node_addresses`); token
    authentication stays as Ray sets it (on). Its dashboard runs on a free loopback port
    because Ray Train's placement-group cleaner asks the dashboard's state API whether the
    training controller still lives: the job's processes get that API's address, or the
    cleaner looks for a Ray on the machine, fails when there are several (a traceback), and
    warns every second when there is no state API.

    Ray Data's console shows warnings and errors only, here and in the workers: its INFO
    lines and its periodic progress reports, which it logs instead of bars in a job log, go to
    its log file (``ray-data.log`` in Ray's session folder).
    """
    if ray.is_initialized():
        return
    quiet_worker()  # this process's console, as every worker's
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        _start_ray(address=address, runtime_env=worker_runtime_env())
        return
    dashboard_port = _free_loopback_port()
    with _single_node_addresses():
        _start_ray(
            num_cpus=num_cpus,
            include_dashboard=True,
            dashboard_host=_LOOPBACK,
            dashboard_port=dashboard_port,
            runtime_env=worker_runtime_env(
                {
                    "RAY_API_SERVER_ADDRESS": f"http://{_LOOPBACK}:{dashboard_port}",
                    # One machine is never preempted node by node: Ray Train's watcher for
                    # that would only log an error per training about its actor's arguments.
                    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
                }
            ),
        )


def worker_env_vars() -> dict[str, str]:
    """The variables xmr reads (:func:`~xmr.job_env.forwarded_env`: ``NLTK_DATA``,
    ``MLFLOW_TRACKING_URI``, ``XMR_*``, the AWS settings that are not secret), as this
    process has them, relative paths made absolute, for the workers it starts: a worker sees
    the environment of the ``ray start`` of its node, not the driver's.

    In the driver of a Ray job, less those the job's own runtime environment sets (``ray job
    submit --runtime-env-json``): they reach the workers already, and Ray refuses a
    ``ray.init`` that sets one of them again.
    """
    forwarded = forwarded_env()
    job = json.loads(os.environ.get(RAY_JOB_CONFIG_JSON_ENV_VAR) or "{}")
    given = (job.get("runtime_env") or {}).get("env_vars") or {}
    return {name: value for name, value in forwarded.items() if name not in given}


def worker_runtime_env(extra: dict[str, str] | None = None) -> dict[str, Any]:
    """The runtime environment this driver gives its workers: :func:`quiet_worker` as their
    setup hook, and :func:`worker_env_vars` with ``extra``."""
    runtime: dict[str, Any] = {"worker_process_setup_hook": quiet_worker}
    env_vars = {**worker_env_vars(), **(extra or {})}
    if env_vars:
        runtime["env_vars"] = env_vars
    return runtime


def quiet_worker() -> None:
    """Every worker's first step (Ray's ``worker_process_setup_hook``): Ray Data's console
    shows warnings and errors only, and the other libraries' INFO stays off the console
    (:func:`~xmr.logs.quiet_console`); their log files keep everything."""
    _ray_data_console_level(logging.WARNING)
    # xmr turns Ray Data's bars off where they would print through the workers (training in
    # a log), and Ray Data warns about it in every split coordinator.
    progress = logging.getLogger("ray.data._internal.progress")
    progress.addFilter(MessageFilter("Progress bars disabled"))
    quiet_console()


def _start_ray(**settings: Any) -> None:
    """``ray.init(**settings)``; a failure is one line with the reason and what to try.

    Raises:
        UnavailableError: Ray did not start or could not be reached.
    """
    try:
        ray.init(**settings)
        take_back_sigterm()  # a stop marks the runs KILLED first (xmr.stops), not Ray's exit
    except Exception as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        if len(reason) > 300:
            reason = reason[:300] + "…"
        address = settings.get("address")
        if address:
            raise UnavailableError(
                f"could not connect to the Ray cluster at {address}: {reason} (is it up? "
                "`ray status --address ...`; for a local Ray unset RAY_ADDRESS or --address)"
            ) from exc
        raise UnavailableError(
            f"could not start a local Ray: {reason} (on a busy machine retry when it is "
            "quieter; or give --address of a running cluster)"
        ) from exc


def _ray_data_console_level(level: int) -> None:
    """Show Ray Data's log records from ``level`` up on this process's console (its log file
    keeps them all)."""
    for handler in logging.getLogger("ray.data").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setLevel(level)


def _free_loopback_port() -> int:
    """A TCP port nothing listens on at loopback now."""
    with socket.socket() as probe:
        probe.bind((_LOOPBACK, 0))
        return probe.getsockname()[1]


@contextmanager
def _single_node_addresses() -> Iterator[None]:
    """Make a local Ray started inside this block take the loopback address as its node address.

    Ray's GCS, raylet, workers and agents listen on loopback only when the node address is
    loopback; otherwise on every interface. On Linux Ray replaces a loopback node address (even
    an explicit ``_node_ip_address="127.0.0.1"``) with the machine's own address, so that other
    machines can join; it keeps loopback only where multi-node clusters are off, as on macOS
    and Windows (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``). Ray reads that switch once, on import,
    so it is turned off on the loaded module for the start only; the started processes get
    the node address on their command lines.
    """
    constants = ray._private.ray_constants
    saved = constants.ENABLE_RAY_CLUSTER
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = saved


def cpus_per_gpu() -> int:
    """CPU cores per GPU on the cluster's GPU nodes: the least over them (0 without GPUs)."""
    shares = [
        int(node["Resources"].get("CPU", 0) // node["Resources"]["GPU"])
        for node in ray.nodes()
        if node.get("Alive") and node["Resources"].get("GPU", 0) > 0
    ]
    return min(shares, default=0)


def cluster_gpus() -> int:
    """Number of GPUs the Ray cluster has (0 on a laptop)."""
    return int(ray.cluster_resources().get("GPU", 0))


class _StageActor:
    """Sets the stage up once per actor, then maps batches, and tears it down when the actor
    is done: a Ray Data callable class (Ray Data deletes it when its pool ends), and the actor
    of a :class:`StagePool` (whose :meth:`StagePool.close` asks for the teardown)."""

    def __init__(self, stage: Stage) -> None:
        start = time.perf_counter()
        self.stage = stage
        self.stage.setup()
        self.setup_s = time.perf_counter() - start
        self.torn_down = False

    def teardown(self) -> None:
        """The stage's :meth:`~xmr.pipeline.stage.Stage.teardown`, once (none when its setup
        failed)."""
        if not getattr(self, "torn_down", True):
            self.torn_down = True
            self.stage.teardown()

    __del__ = teardown  # how Ray Data ends a pool's actor

    def process(self, batch: Batch) -> Batch:
        """One batch (the method a :class:`StagePool` calls)."""
        return self.stage.process(batch)

    __call__ = process  # how Ray Data calls it

    def setup_seconds(self) -> float:
        """Seconds the stage's setup took here (its answer also says the actor is ready)."""
        return self.setup_s


def _run_task(batch: Batch, stage: Stage) -> Batch:
    """Ray Data task function for a stage without state worth keeping: set up, one batch, torn
    down."""
    try:
        return stage.run_local(batch)
    finally:
        stage.teardown()


def map_stage(ds: ray.data.Dataset, stage: Stage, *, actors: int) -> ray.data.Dataset:
    """Append ``stage`` to ``ds``: ``actors`` parallel workers with the stage's resources.

    A stage that :attr:`~xmr.pipeline.stage.Stage.needs_actor` gets a pool of that many actors
    (set up once each); any other runs as at most that many concurrent tasks.
    """
    common = {
        "num_cpus": stage.resources.cpus,
        "num_gpus": stage.resources.gpus,
        "batch_size": stage.batch_size,
        "batch_format": "numpy",
    }
    if stage.needs_actor:
        return ds.map_batches(
            _StageActor,
            fn_constructor_kwargs={"stage": stage},
            compute=ray.data.ActorPoolStrategy(size=actors),
            **common,
        )
    return ds.map_batches(
        _run_task,
        fn_kwargs={"stage": stage},
        compute=ray.data.TaskPoolStrategy(size=actors),
        **common,
    )


class StagePool:
    """A stage set up in Ray actors from the moment the pool is made, then mapped over rows.

    An actor that builds a model takes seconds to be ready (its process, the imports, the
    weights, on a GPU the CUDA context and the first kernels). Made before the rows exist, a
    pool starts while the driver does its own work (reads the data, plans the queries), and
    :meth:`run` waits only for what is left of the start (:attr:`wait_s`). The pool may
    :meth:`grow` once the work is sized; :meth:`close` ends its actors.

    :meth:`run` cuts the rows into batches of the stage's ``batch_size`` and gives them to the
    ready actors, :data:`BATCHES_IN_FLIGHT` at a time each (the next batch is queued while one
    runs); an actor still starting gets none, so it never holds batches the others could do.
    An actor lost mid-run (its node, its process) is restarted and its batches rerun
    (:data:`ACTOR_RESTARTS`). Rows keep their input order, and the stage's per-row ``error``
    column comes back with them: no row is lost.
    """

    BATCHES_IN_FLIGHT = 2
    ACTOR_RESTARTS = 2
    TEARDOWN_S = 30.0

    def __init__(self, stage: Stage, actors: int = 1) -> None:
        """Start ``actors`` actors (at least one), each with the stage's resources."""
        self.stage = stage
        self._actor_class = ray.remote(_StageActor).options(
            num_cpus=stage.resources.cpus,
            num_gpus=stage.resources.gpus,
            max_restarts=self.ACTOR_RESTARTS,
            max_task_retries=self.ACTOR_RESTARTS,
        )
        self._actors: list[ray.actor.ActorHandle] = []
        self._ready: list[ray.ObjectRef] = []
        self.wait_s = 0.0
        """Seconds the last :meth:`run` waited for its first actor to be ready."""
        self.setup_s: dict[int, float] = {}
        """Seconds each actor that has been ready took to set the stage up, by actor."""
        self.grow(actors)

    @property
    def size(self) -> int:
        """Actors in the pool (started or starting)."""
        return len(self._actors)

    def grow(self, actors: int) -> None:
        """Start more actors until the pool has ``actors`` (never fewer than it has)."""
        while len(self._actors) < max(1, actors):
            actor = self._actor_class.remote(self.stage)
            self._actors.append(actor)
            self._ready.append(actor.setup_seconds.remote())

    def run(self, rows: list[dict], *, desc: str | None = None) -> Batch:
        """The stage's output columns for ``rows``, in input order (``{}`` for no rows).

        ``desc``: show progress under that name (a bar on a terminal, lines in a log).
        Each row gets a ``row`` index column, which the stage must pass through.
        """
        if not rows:
            return {}
        batches = numbered_batches(rows, self.stage.batch_size)
        start = time.perf_counter()
        ray.wait(self._ready, num_returns=1)
        self.wait_s = time.perf_counter() - start
        ready, _ = ray.wait(self._ready, num_returns=len(self._ready), timeout=0)
        for ref in ready:
            self._note_ready(ref)
        parts: list[Batch | None] = [None] * len(batches)
        free = {a: self.BATCHES_IN_FLIGHT for a, r in enumerate(self._ready) if r in ready}
        starting = {r: a for a, r in enumerate(self._ready) if r not in ready}
        running: dict[ray.ObjectRef, tuple[int, int]] = {}  # result -> (batch, actor)
        next_batch = 0
        with console_progress(len(rows), desc or "", unit="rows", enabled=bool(desc)) as bar:
            while next_batch < len(batches) or running:
                for actor in free:
                    while free[actor] and next_batch < len(batches):
                        ref = self._actors[actor].process.remote(batches[next_batch])
                        running[ref] = (next_batch, actor)
                        free[actor] -= 1
                        next_batch += 1
                done, _ = ray.wait([*running, *starting], num_returns=1)
                for ref in done:
                    if ref in starting:
                        self._note_ready(ref)
                        free[starting.pop(ref)] = self.BATCHES_IN_FLIGHT
                        continue
                    index, actor = running.pop(ref)
                    parts[index] = ray.get(ref)
                    free[actor] += 1
                    bar.update(len(batches[index]["row"]))
        return in_row_order(parts)

    def _note_ready(self, ref: ray.ObjectRef) -> None:
        """Record an actor's setup seconds; an actor whose setup failed raises its error."""
        self.setup_s[self._ready.index(ref)] = float(ray.get(ref))

    def close(self) -> None:
        """Tear the stage down in the pool's actors (waiting at most :data:`TEARDOWN_S`), then
        end them (their GPUs and memory go back to the cluster)."""
        if self._actors:
            done = [actor.teardown.remote() for actor in self._actors]
            ray.wait(done, num_returns=len(done), timeout=self.TEARDOWN_S)
        for actor in self._actors:
            ray.kill(actor)
        self._actors, self._ready, self.setup_s = [], [], {}


class RayExecutor:
    """Maps a list of stages over rows on Ray Data and streams the output batches back.

    Generic: it knows stages (:class:`~xmr.pipeline.stage.Stage`, each with its resources) and
    batches, nothing of what they compute. Constructing one attaches to the cluster or starts
    local Ray (:func:`init_ray`): make it only after every check that needs no cluster.
    """

    def __init__(
        self, address: str | None = None, num_cpus: int | None = None, *, progress: bool = True
    ) -> None:
        """``progress``: Ray Data's progress bars. Rows keep their input order through the
        stages, so a consumer that groups consecutive rows buffers one group at a time."""
        init_ray(address, num_cpus)
        self.progress = progress

    def _rows(self, rows: list[dict], blocks: int) -> ray.data.Dataset:
        """``rows`` as a dataset of ``blocks`` blocks, with this executor's Ray Data settings
        (set where Ray Data is used: a :meth:`pool` leaves the process's settings alone)."""
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True
        context.enable_progress_bars = self.progress
        return ray.data.from_items(rows, override_num_blocks=blocks)

    @property
    def cpus(self) -> int:
        """CPU cores the cluster has now (1 when Ray reports none)."""
        return int(ray.cluster_resources().get("CPU", 1))

    @property
    def gpus(self) -> int:
        """GPUs the cluster has now (0 on a laptop)."""
        return cluster_gpus()

    def stream(
        self, rows: list[dict], stages: Sequence[tuple[Stage, int]], *, blocks: int
    ) -> Iterator[Batch]:
        """Run ``stages`` in order over ``rows`` and yield the output batches as they finish.

        Args:
            rows: input rows (dicts with the same keys), cut into ``blocks`` blocks.
            stages: each stage with its number of parallel workers (see :func:`map_stage`).

        Yields:
            The last stage's output batches, in input order; their sizes follow the blocks.
        """
        ds = self._rows(rows, blocks)
        for stage, actors in stages:
            ds = map_stage(ds, stage, actors=actors)
        yield from ds.iter_batches(batch_format="numpy", batch_size=None)

    def pool(self, stage: Stage, actors: int = 1) -> StagePool:
        """``stage`` set up in ``actors`` Ray actors from now on (:class:`StagePool`)."""
        return StagePool(stage, actors)

    def transform(
        self,
        rows: list[dict],
        transform: Callable[[ray.data.Dataset], ray.data.Dataset],
        *,
        blocks: int,
    ) -> Iterator[Batch]:
        """Apply a ready-made Ray Data transform (a ``ray.data.llm`` processor) to ``rows``
        and yield its output batches as they finish, in input order."""
        ds = transform(self._rows(rows, blocks))
        yield from ds.iter_batches(batch_format="numpy", batch_size=None)
