"""``xmr train --seeds``: one config trained once per seed, and each final metric's mean and
standard deviation over the seeds.

Seed ``N``'s run is an ordinary training run (:func:`~xmr.train.run.train`) named
``<name>-seed<N>``: its own folder under the storage, its own checkpoints, and a rerun resumes
it or, finished, reuses it, as any run. In MLflow the seed runs are nested
(``mlflow.parentRunId``) under a parent run named ``<name>`` in the same experiment, which
holds the params the seeds share, ``train.seeds`` (``0,1,2``) and, for every final metric
``final/<split>/<metric>`` of the seed runs (bootstrap interval ends left out),
``final/<split>/<metric>_mean`` and ``..._std``: the sample standard deviation (ddof 1) over
the seeds, absent for a single seed (not 0, which would claim the seeds agree).

The parent run is remembered in ``<storage>/<name>/xmr_seeds.json``: the same command again
continues it. Another list of seeds under the same name starts a new parent run (the seed runs
already trained are reused, and moved under it), so a parent's statistics are always over its
own ``train.seeds``; the earlier parent stays, with the statistics of its seeds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from xmr.tracking import (
    PARENT_TAG,
    TrackedRun,
    experiment_name,
    recorded_run,
    resolve_tracking_uri,
    start_run,
    write_run_record,
)
from xmr.train.config import TrainConfig
from xmr.train.result import RUN_FILE, RUN_ID_KEY, TrainResult

SEEDS_FILE = "xmr_seeds.json"  # the parent run's record, in <storage>/<name>/
SEEDS_PARAM = "train.seeds"  # the parent's seeds, comma-separated
INTERVAL_ENDS = ("_ci_low", "_ci_high")  # a metric's bootstrap interval: not averaged


@dataclass
class SeedsResult:
    """The outcome of :func:`train_seeds`: each seed's run, and the statistics over them."""

    name: str  # the parent run's name; seed N's run is <name>-seed<N>
    runs: dict[int, TrainResult]  # by seed, in the order given
    statistics: dict[str, float]  # <split>/<metric>_mean and _std (see seed_statistics)
    parent_run_id: str
    experiment: str


def seed_run_name(name: str, seed: int) -> str:
    """The name of seed ``seed``'s run in the group ``name``.

    >>> seed_run_name("clip-d", 2)
    'clip-d-seed2'
    """
    return f"{name}-seed{seed}"


def final_metrics(result: TrainResult, test_split: str) -> dict[str, float]:
    """A run's final test metrics (``<test_split>/...``, as MLflow's ``final/`` holds them),
    without their bootstrap intervals' ends."""
    return {
        key: value
        for key, value in result.metrics.items()
        if key.startswith(f"{test_split}/") and not key.endswith(INTERVAL_ENDS)
    }


def seed_statistics(per_seed: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """``<metric>_mean`` and ``<metric>_std`` over seeds of each metric every seed has.

    ``per_seed``: one mapping of metric -> value per seed. The std is the sample standard
    deviation (ddof 1), left out for a single seed.

    >>> seed_statistics([{"r": 0.25, "b": 1.0}, {"r": 0.75}])
    {'r_mean': 0.5, 'r_std': 0.3535533905932738}
    >>> seed_statistics([{"r": 0.25}])
    {'r_mean': 0.25}
    """
    shared = set.intersection(*(set(metrics) for metrics in per_seed)) if per_seed else set()
    statistics: dict[str, float] = {}
    for metric in sorted(shared):
        values = np.array([metrics[metric] for metrics in per_seed], dtype=np.float64)
        statistics[f"{metric}_mean"] = float(values.mean())
        if len(values) > 1:
            statistics[f"{metric}_std"] = float(values.std(ddof=1))
    return statistics


def train_seeds(
    config: TrainConfig,
    seeds: Sequence[int],
    *,
    name: str | None = None,
    address: str | None = None,
    tracking_uri: str | None = None,
) -> SeedsResult:
    """Train ``config`` once per seed in ``seeds``, one after the other, each run nested in
    MLflow under the parent run ``name``, which then logs each final metric's mean and std.

    ``config.seed`` and ``config.name`` are replaced per seed; ``name`` defaults to
    ``config.default_name(seeded=False)`` (its hash leaves the seed out).

    Raises:
        ValueError: ``<storage>/<name>`` holds a single training run; or what
            :func:`~xmr.train.run.train` raises for a seed's run (the parent ends FAILED).
    """
    from xmr.train.run import train  # Ray: only once there is training to do

    name = name or config.default_name(seeded=False)
    group_dir = config.storage / name
    if (group_dir / RUN_FILE).is_file():
        raise ValueError(
            f"{group_dir} holds the training run {name!r}; give the --seeds runs another --name"
        )
    uri = resolve_tracking_uri(tracking_uri)
    experiment = experiment_name("train", config.dataset)
    parent = _parent_run(config, seeds, name, uri, experiment)
    runs: dict[int, TrainResult] = {}
    with parent.ending():  # FINISHED, or FAILED when a seed's run fails
        for seed in seeds:
            seeded = replace(config, seed=seed, name=seed_run_name(name, seed))
            result = train(
                seeded, address=address, tracking_uri=uri, experiment=experiment,
                parent_run_id=parent.run_id,
            )  # fmt: skip
            child = TrackedRun(result.mlflow_run_id, uri)
            if child.tags().get(PARENT_TAG) != parent.run_id:  # trained under another parent
                child.set_tag(PARENT_TAG, parent.run_id)
            runs[seed] = result
        per_seed = [final_metrics(result, config.test_split) for result in runs.values()]
        statistics = seed_statistics(per_seed)
        parent.log_metrics({f"final/{key}": value for key, value in statistics.items()})
    return SeedsResult(name, runs, statistics, parent.run_id, experiment)


def _parent_run(
    config: TrainConfig, seeds: Sequence[int], name: str, tracking_uri: str, experiment: str
) -> TrackedRun:
    """The parent run of the group ``name`` (RUNNING): the one its record remembers for these
    seeds on this store, or a new one (then remembered in its place)."""

    record = config.storage / name / SEEDS_FILE
    listed = ",".join(str(seed) for seed in seeds)
    if record.is_file() and json.loads(record.read_text()).get("seeds") == list(seeds):
        resumed = recorded_run(record, RUN_ID_KEY, tracking_uri)
        if resumed is not None:
            return resumed
    shared = {
        key: value
        for key, value in config.params().items()
        # the seed and name are each run's; with --steps, each seed's data decide its epochs
        if key not in ("train.seed", "train.name")
        and not (key == "train.epochs" and config.steps is not None)
    }
    with start_run(
        experiment,
        run_name=name,
        tracking_uri=tracking_uri,
        tags={"xmr.command": "train", "xmr.run_dir": str(config.storage / name)},
        keep_running=True,
    ) as run:
        run.log_params({**shared, "train.name": name, SEEDS_PARAM: listed})
    write_run_record(record, run, RUN_ID_KEY, {"seeds": list(seeds)})
    return run
