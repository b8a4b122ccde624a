"""MLflow conventions shared by every xmr command; the only module that imports ``mlflow``.

- Tracking store: ``--tracking-uri`` > ``MLFLOW_TRACKING_URI`` > ``sqlite:///mlflow.db`` in the
  working directory (MLflow 3 rejects plain file stores).
- Experiments are named ``xmr/<command>/<subject>`` (:func:`experiment_name`: the dataset, or
  a sweep's space); with a sqlite store their artifacts go to ``mlartifacts/`` next to the
  database, wherever the command runs from.
- Params are namespaced (``model.arch``, ``data.dataset``); metric names use ``_at_`` instead of
  ``@`` (``test/odmap_at_1``), which MLflow does not accept; only finite numbers are logged as
  metrics (:func:`is_finite_number`).
- A run that outlives one process (a training run, a sweep's parent run) is remembered in a
  JSON record in its folder (:func:`recorded_run`, :func:`write_run_record`), so that a rerun
  continues the same MLflow run.

``mlflow`` is imported inside the functions: importing this module (and every library module
that logs through it) does not load MLflow.
"""

from __future__ import annotations

import json
import math
import os
import signal
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xmr.stops import Stopped, last_signal, on_stop, stop_requested, stop_signal
from xmr.storage import StoragePath, check_outside_ray_package, is_uri, storage_path

if TYPE_CHECKING:
    import pandas as pd
    from mlflow import MlflowClient
    from mlflow.entities import Run

DEFAULT_DB = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"  # beside a sqlite store
PARENT_TAG = "mlflow.parentRunId"  # how MLflow (and its UI) nests a run under another
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
"""The experiment tag the MLflow UI (3.x) opens an experiment's view by: model training shows
its runs; an experiment without it opens in the GenAI view (traces, latency, tokens)."""
RUN_STATUSES = ("RUNNING", "FINISHED", "FAILED", "KILLED")


def resolve_tracking_uri(uri: str | None = None) -> str:
    """The tracking URI a command uses (see module docstring for the order), with a relative
    sqlite path made absolute against the working directory, so that the runs a command
    records find their store again from anywhere (:func:`absolute_sqlite_uri`)."""
    if uri:
        return absolute_sqlite_uri(uri)
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return absolute_sqlite_uri(env)
    return f"sqlite:///{Path.cwd() / DEFAULT_DB}"


def absolute_sqlite_uri(uri: str) -> str:
    """``sqlite:///relative.db`` -> ``sqlite:////<working directory>/relative.db``; any other
    URI (an absolute sqlite path, in-memory sqlite, a server) as it is.

    >>> absolute_sqlite_uri("sqlite:////data/mlflow.db")
    'sqlite:////data/mlflow.db'
    >>> absolute_sqlite_uri("http://127.0.0.1:5000")
    'http://127.0.0.1:5000'
    """
    prefix = "sqlite:///"
    if not uri.startswith(prefix):
        return uri
    path, query = uri.removeprefix(prefix), ""
    if "?" in path:
        path, query = path.split("?", 1)
        query = f"?{query}"
    if not path or path.startswith("/") or path == ":memory:":
        return uri
    return f"{prefix}{Path(path).absolute()}{query}"


def sqlite_file(uri: str) -> Path | None:
    """The database file of a sqlite tracking URI (absolute, see :func:`absolute_sqlite_uri`);
    None for a server or an in-memory store.

    >>> sqlite_file("sqlite:////data/mlflow.db?timeout=5")
    PosixPath('/data/mlflow.db')
    >>> sqlite_file("http://127.0.0.1:5000") is None
    True
    """
    absolute = absolute_sqlite_uri(uri)
    if not absolute.startswith("sqlite:////"):
        return None
    return Path(absolute.removeprefix("sqlite:///").split("?", 1)[0])


def check_tracking_store(uri: str | None) -> None:
    """Refuse a sqlite tracking store inside a Ray job's copy of ``--working-dir`` (given as
    ``uri``, else by ``MLFLOW_TRACKING_URI``, else the default ``sqlite:///mlflow.db`` in the
    working directory): the runs would vanish with the next submission.

    Raises:
        ValueError: one line naming ``--tracking-uri`` or ``MLFLOW_TRACKING_URI``.
    """
    database = sqlite_file(resolve_tracking_uri(uri))
    if database is None:
        return
    if uri:
        where = "--tracking-uri"
    elif os.environ.get("MLFLOW_TRACKING_URI"):
        where = "MLFLOW_TRACKING_URI"
    else:
        where = "the default --tracking-uri"
    check_outside_ray_package(
        database,
        where,
        "give --tracking-uri a server (http://…) or a sqlite file on a shared path, or set "
        "MLFLOW_TRACKING_URI to one",
    )


def experiment_name(command: str, subject: str) -> str:
    """The experiment of ``xmr <command>`` on ``subject`` (a dataset, or a sweep's space name).

    >>> experiment_name("train", "toyworld")
    'xmr/train/toyworld'
    """
    return f"xmr/{command}/{subject}"


def is_finite_number(value: Any) -> bool:
    """Whether ``value`` can be logged as a metric: an int or float, not NaN or infinite.

    >>> [is_finite_number(v) for v in (0.5, 3, float("nan"), "0.5", None)]
    [True, True, False, False, False]
    """
    return isinstance(value, int | float) and math.isfinite(value)


def _client(tracking_uri: str) -> MlflowClient:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri)


@dataclass(frozen=True)
class TrackedRun:
    """One MLflow run on one store, addressed by id: what the xmr commands log into.

    Every method writes straight to the store (no active-run state), so a run can be logged
    into from any thread or process that knows its id.
    """

    run_id: str
    tracking_uri: str

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Params, each value as ``str(value)`` (what MLflow stores)."""
        from mlflow.entities import Param

        _client(self.tracking_uri).log_batch(
            self.run_id, params=[Param(key, str(value)) for key, value in params.items()]
        )

    def params(self) -> dict[str, str]:
        """The params logged so far."""
        return dict(_client(self.tracking_uri).get_run(self.run_id).data.params)

    def tags(self) -> dict[str, str]:
        """The run's tags (MLflow's own ``mlflow.*`` included)."""
        return dict(_client(self.tracking_uri).get_run(self.run_id).data.tags)

    def log_metrics(
        self, metrics: Mapping[str, float], *, step: int = 0, timestamp_ms: int | None = None
    ) -> None:
        """Metrics at ``step``, stamped ``timestamp_ms`` (default: now, in ms since the epoch).

        A fixed stamp makes a re-logged value (a resumed epoch) identical to the first one.
        """
        from mlflow.entities import Metric
        from mlflow.utils.time import get_current_time_millis

        stamp = get_current_time_millis() if timestamp_ms is None else timestamp_ms
        _client(self.tracking_uri).log_batch(
            self.run_id, metrics=[Metric(key, value, stamp, step) for key, value in metrics.items()]
        )

    def set_tag(self, key: str, value: str) -> None:
        _client(self.tracking_uri).set_tag(self.run_id, key, value)

    def log_artifact(self, path: StoragePath | str) -> None:
        """Copy the file at ``path`` into the run's artifacts (under its own name); a file in
        an object store goes through a local copy, as MLflow logs local files."""
        if not is_uri(path):
            _client(self.tracking_uri).log_artifact(self.run_id, str(path))
            return
        source = storage_path(path)
        with tempfile.TemporaryDirectory() as folder:
            local = Path(folder) / source.name
            local.write_bytes(source.read_bytes())
            _client(self.tracking_uri).log_artifact(self.run_id, str(local))

    def log_text(self, text: str, artifact_file: str) -> None:
        _client(self.tracking_uri).log_text(self.run_id, text, artifact_file)

    def log_dataset(self, frame: pd.DataFrame, *, source: str, name: str, context: str) -> None:
        """Record ``frame`` (metadata: schema, digest, row count; not the rows) as an input."""
        import mlflow.data
        from mlflow.entities import DatasetInput, InputTag
        from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

        with warnings.catch_warnings():  # MLflow 3.17 registers the local source type twice
            warnings.filterwarnings("ignore", message="The specified dataset source")
            dataset = mlflow.data.from_pandas(frame, source=source, name=name)
            entry = DatasetInput(  # as MlflowClient.log_inputs documents it
                dataset._to_mlflow_entity(), tags=[InputTag(MLFLOW_DATASET_CONTEXT, context)]
            )
            _client(self.tracking_uri).log_inputs(self.run_id, datasets=[entry])

    def has_dataset_inputs(self) -> bool:
        return bool(_client(self.tracking_uri).get_run(self.run_id).inputs.dataset_inputs)

    @contextmanager
    def ending(self) -> Iterator[TrackedRun]:
        """Context: the run ends FINISHED when the block completes, KILLED when it is stopped
        (SIGINT or SIGTERM, :mod:`xmr.stops`: marked first thing on the signal, before the
        work winds down) and FAILED when it raises anything else (unless the run was KILLED
        meanwhile: the sweep or job it belongs to was stopped). A block that completes
        after a stop signal (a library that handles Ctrl-C itself returned early) is stopped
        too: KILLED, and :class:`~xmr.stops.Stopped` is raised."""
        try:
            with on_stop(partial(self.end, "KILLED")):
                yield self
        except BaseException as exc:
            status = ending_status(exc)
            if status == "KILLED" or self.status() != "KILLED":  # killed by whoever stopped it
                self.end(status)
            raise
        if stop_requested():
            self.end("KILLED")
            raise Stopped(f"stopped by {signal.Signals(last_signal()).name}")
        self.end("FINISHED")

    def status(self) -> str:
        """The run's status (one of :data:`RUN_STATUSES`)."""
        return _client(self.tracking_uri).get_run(self.run_id).info.status

    def end(self, status: str = "FINISHED") -> None:
        """Set the run's status: ``RUNNING`` reopens it, the others end it (with an end time)."""
        if status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}; choose from {RUN_STATUSES}")
        _client(self.tracking_uri).set_terminated(self.run_id, status)


def ending_status(exc: BaseException) -> str:
    """The status of a run that ``exc`` ended: KILLED for a stop (:func:`~xmr.stops.
    stop_signal`), FAILED for anything else.

    >>> ending_status(KeyboardInterrupt()), ending_status(RuntimeError("bad"))
    ('KILLED', 'FAILED')
    """
    return "KILLED" if stop_signal(exc) is not None else "FAILED"


def _ensure_experiment(experiment: str, tracking_uri: str) -> None:
    """Create ``experiment`` on first use (artifacts beside a sqlite database), tagged
    :data:`EXPERIMENT_KIND`; an experiment made without the tag (by an older xmr, or by hand)
    gets it."""
    import mlflow

    client = _client(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        try:
            client.create_experiment(
                experiment,
                artifact_location=_artifact_location(tracking_uri, experiment),
                tags=EXPERIMENT_KIND,
            )
            return
        except mlflow.exceptions.MlflowException:  # created meanwhile by a concurrent trial
            found = client.get_experiment_by_name(experiment)
            if found is None:
                raise
    for key, value in EXPERIMENT_KIND.items():
        if key not in found.tags:  # a kind the user set is theirs
            client.set_experiment_tag(found.experiment_id, key, value)


def _artifact_location(tracking_uri: str, experiment: str) -> str | None:
    """Artifacts of a sqlite store live beside the database; servers choose their own."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    db = Path(tracking_uri.removeprefix("sqlite:///"))
    return (db.parent / ARTIFACTS_DIR / experiment.replace("/", "_")).resolve().as_uri()


@contextmanager
def start_run(
    experiment: str,
    *,
    run_name: str | None = None,
    tracking_uri: str | None = None,
    tags: Mapping[str, str] | None = None,
    parent_run_id: str | None = None,
    keep_running: bool = False,
    started: float | None = None,
) -> Iterator[TrackedRun]:
    """Open a new MLflow run in ``experiment`` (created on first use) on the resolved store.

    ``started``: when the work the run records began (seconds since the epoch), for a run
    logged after its work (an evaluation, a D′ build), so that its start, end and duration in
    the UI are the work's. Default: now.

    The run ends as :meth:`TrackedRun.ending` ends it (FINISHED, KILLED when stopped, FAILED
    when the block raises). ``keep_running``: the
    run stays RUNNING after the block, to be logged into and ended later (by another
    process, or after a resume). ``parent_run_id``: nest the run under that one (a sweep's
    trial under its sweep; the parent must be in the same experiment for the UI to group them).
    """
    import mlflow

    uri = resolve_tracking_uri(tracking_uri)
    _ensure_experiment(experiment, uri)
    mlflow.set_tracking_uri(uri)
    experiment_id = mlflow.set_experiment(experiment).experiment_id
    tags = dict(tags or {})
    if parent_run_id:
        tags[PARENT_TAG] = parent_run_id
    if started is None:
        active = mlflow.start_run(run_name=run_name, tags=tags)
    else:  # MLflow's start_run takes no start time; its client does
        created = _client(uri).create_run(
            experiment_id, start_time=int(started * 1000), tags=tags, run_name=run_name
        )
        active = mlflow.start_run(run_id=created.info.run_id)
    run = TrackedRun(active.info.run_id, uri)
    try:
        with run.ending():
            yield run
    finally:
        mlflow.end_run(run.status())  # MLflow's active run, with the status ending gave it
    if keep_running:
        run.end("RUNNING")


@contextmanager
def resume_run(run_id: str, *, tracking_uri: str | None = None) -> Iterator[TrackedRun]:
    """Reopen the existing run ``run_id`` (RUNNING again) for the block, ended as
    :meth:`TrackedRun.ending` ends it."""
    run = TrackedRun(run_id, resolve_tracking_uri(tracking_uri))
    run.end("RUNNING")
    with run.ending():
        yield run


def recorded_run(
    record: Path, id_key: str, tracking_uri: str, *, reopen: bool = True
) -> TrackedRun | None:
    """The run that ``record`` (written by :func:`write_run_record`) remembers under
    ``id_key``, reopened (RUNNING) unless ``reopen`` is False; None when there is no record or
    it is of another store.

    Raises LookupError when the store no longer has that run (its database was removed, or
    the run deleted): resuming would log into nothing.
    """
    from mlflow.exceptions import MlflowException

    if not record.is_file():
        return None
    saved = json.loads(record.read_text())
    if saved.get("tracking_uri") != tracking_uri:
        return None
    run = TrackedRun(saved[id_key], tracking_uri)
    try:
        gone = _client(tracking_uri).get_run(run.run_id).info.lifecycle_stage == "deleted"
    except MlflowException:
        gone = True
    if gone:
        raise LookupError(
            f"{record} remembers MLflow run {run.run_id}, which {tracking_uri} no longer has; "
            f"remove {record.parent} (or pick another name) to start over"
        )
    if reopen:
        run.end("RUNNING")
    return run


def write_run_record(record: Path, run: TrackedRun, id_key: str, fields: Mapping[str, Any]) -> None:
    """Remember ``run`` in ``record`` (JSON: ``fields``, the run id as ``id_key``, the store as
    ``tracking_uri``), creating the folder; a rerun finds it with :func:`recorded_run`."""
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(
        json.dumps({**fields, id_key: run.run_id, "tracking_uri": run.tracking_uri}, indent=2)
    )


def download_artifact(
    run_id: str, artifact_path: str, destination: Path, *, tracking_uri: str
) -> Path | None:
    """Copy run ``run_id``'s artifact ``artifact_path`` into the folder ``destination`` (no
    progress bar); its local path, or None when the run has no such artifact."""
    import mlflow
    from mlflow.exceptions import MlflowException

    quiet = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"  # no bar per file
    try:
        local = mlflow.artifacts.download_artifacts(
            run_id=run_id, artifact_path=artifact_path, dst_path=str(destination),
            tracking_uri=tracking_uri,
        )  # fmt: skip
    except (MlflowException, OSError):
        return None
    finally:
        if quiet is None:
            os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", None)
        else:
            os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = quiet
    return Path(local)


def _tag_filter(tags: Mapping[str, str]) -> str:
    """An MLflow search filter that keeps the runs with all of ``tags``."""
    return " and ".join(f"tags.`{key}` = '{value}'" for key, value in tags.items())


def run_link(run_id: str, *, tracking_uri: str) -> str:
    """How a log names a run: its page in the MLflow UI when the store is a server
    (``http://…/#/experiments/<id>/runs/<run id>``), else ``MLflow run <run id>``."""
    if not tracking_uri.startswith(("http://", "https://")):
        return f"MLflow run {run_id}"
    from mlflow.exceptions import MlflowException

    try:
        experiment = _client(tracking_uri).get_run(run_id).info.experiment_id
    except MlflowException:
        return f"MLflow run {run_id}"
    return f"{tracking_uri.rstrip('/')}/#/experiments/{experiment}/runs/{run_id}"


def experiment_id(experiment: str, *, tracking_uri: str) -> str | None:
    """The id of ``experiment``, None when the store has no such experiment."""
    found = _client(tracking_uri).get_experiment_by_name(experiment)
    return None if found is None else found.experiment_id


def experiment_names(*, tracking_uri: str) -> list[str]:
    """The names of every (active) experiment in the store, sorted."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    return sorted(e.name for e in mlflow.search_experiments())


def find_runs(
    experiment: str,
    tags: Mapping[str, str],
    *,
    tracking_uri: str,
    max_results: int | None = None,
) -> list[Run]:
    """The runs of ``experiment`` with all of ``tags`` (none when the experiment is missing)."""
    found = experiment_id(experiment, tracking_uri=tracking_uri)
    if found is None:
        return []
    limit = {} if max_results is None else {"max_results": max_results}
    return _client(tracking_uri).search_runs([found], filter_string=_tag_filter(tags), **limit)


def runs_frame(
    tags: Mapping[str, str] | None = None,
    *,
    tracking_uri: str,
    experiment_ids: list[str] | None = None,
) -> pd.DataFrame:
    """Runs with all of ``tags`` as a table (one row per run; ``run_id``, ``status``,
    ``experiment_id``, ``params.*``, ``metrics.*``, ``tags.*`` columns), from ``experiment_ids``
    or, when None, every experiment."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    filter_string = _tag_filter(tags or {})
    if experiment_ids is None:
        return mlflow.search_runs(search_all_experiments=True, filter_string=filter_string)
    return mlflow.search_runs(experiment_ids=experiment_ids, filter_string=filter_string)
