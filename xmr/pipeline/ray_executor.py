"""The thin layer that maps :class:`~xmr.pipeline.stage.Stage` objects onto Ray Data actor pools."""

from __future__ import annotations

import os

import numpy as np
import ray
import ray.data

from xmr.pipeline.stage import Batch, Stage


def init_ray(
    address: str | None = None, num_cpus: int | None = None, *, log_to_driver: bool = False
) -> None:
    """Attach to a running cluster (``address`` or ``RAY_ADDRESS``) or start local Ray.

    ``log_to_driver``: show the workers' output here (training progress); pipelines keep it
    off and report through their own progress bars. Does nothing when Ray is already
    initialised in this process.
    """
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=log_to_driver)
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=log_to_driver)


def cluster_gpus() -> int:
    """Number of GPUs the Ray cluster has (0 on a laptop)."""
    return int(ray.cluster_resources().get("GPU", 0))


class _StageActor:
    """Ray Data callable class: sets the stage up once per actor, then maps batches."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self.stage.setup()

    def __call__(self, batch: Batch) -> Batch:
        return self.stage.process(batch)


def _run_task(batch: Batch, stage: Stage) -> Batch:
    """Ray Data task function for a stage without state worth keeping."""
    return stage.run_local(batch)


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


def run_stage(rows: list[dict], stage: Stage, *, actors: int) -> Batch:
    """Run ``stage`` over ``rows`` on Ray and return its output columns in input order.

    Each row gets a ``row`` index column (the stage must pass it through) so the output can be
    put back in input order whatever order the actors finish in.
    """
    if not rows:
        return {}
    items = [{"row": i, **row} for i, row in enumerate(rows)]
    ds = map_stage(ray.data.from_items(items), stage, actors=actors)
    parts = list(ds.iter_batches(batch_format="numpy", batch_size=None))
    columns = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    order = np.argsort(columns.pop("row"), kind="stable")
    return {key: value[order] for key, value in columns.items()}
