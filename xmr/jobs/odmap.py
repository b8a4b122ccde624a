"""The ODmAP paper's experiment as a job (tables 1–2): build D′ → train on D and on D ∪ D′ →
compare their test metrics (ODmAP@K, Recall@K both ways, Bias@K).

Steps, in the job's folder:

1. ``world`` (ToyWorld without ``--data`` only): generate the world into ``world/``.
2. ``synth``: D′ of the train split into ``dprime/`` (``xmr synth``: box masks, the fill,
   noun-phrase removal captions).
3. ``train-d``: the model on D (``runs/train-d``); training ends with the test-split
   evaluation.
4. ``train-d-dprime``: the same model, seed and budget on D ∪ D′ (``runs/train-d-dprime``).
5. ``compare``: both runs' test metrics side by side with the change and its paired bootstrap
   interval over the same test queries, into ``comparison.csv`` and the job's MLflow run
   (``d/…``, ``d_dprime/…``, ``delta/…``, ``delta/…_ci_low``, ``delta/…_ci_high``).

``ray_jobs/odmap.py`` submits it to a cluster; ``xmr demo`` runs it on the embedded ToyWorld.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rich.table import Table

from xmr.data.registry import DATASETS, check_data_root
from xmr.jobs.commands import synth_step, train_step, world_step
from xmr.jobs.comparison import comparison_table, condition_metrics, record_comparison
from xmr.jobs.options import JobOptions, job_params
from xmr.jobs.steps import Job, Step, StepContext, StepOutcome
from xmr.options import check_options, option, resolve_paths
from xmr.removal.fill import FILL_METHODS
from xmr.storage import StoragePath

CONDITIONS = {"D": "train-d", "D ∪ D′": "train-d-dprime"}
"""The two training conditions and the steps that train them."""
_CONDITION_STEPS = {condition: [step] for condition, step in CONDITIONS.items()}

ROWS = [
    *(f"recall_i2t_at_{k}" for k in (1, 5, 10)),
    *(f"recall_t2i_at_{k}" for k in (1, 5, 10)),
    *(f"odmap_at_{k}" for k in (1, 5, 10)),
    "bias_at_10",
]
"""The comparison's metrics (test split), in table order."""

COMPARED = [f"test/{row}" for row in ROWS]
PREFIXES = {"D": "d", "D ∪ D′": "d_dprime"}
"""How each condition's metrics are named in the job's run (``d/test/odmap_at_1``)."""


@dataclass(frozen=True)
class ODmAPJobOptions:
    """The experiment's options: data, model, budget and how large each stage runs."""

    dataset: str = option("toyworld", " | ".join(DATASETS))
    data: StoragePath | None = option(
        None,
        "Dataset folder, a path or s3://… (toyworld: default, a world generated into the "
        "job's folder).",
    )
    model: str = option("clip", "Model family: clip | vsepp | blip (see `xmr models`).")
    arch: str | None = option(None, "Architecture (default: the family's).")
    pretrained: str | None = option(
        None, "Pretrained weights tag, or 'none' (default: the family's; ToyWorld: none)."
    )
    epochs: int | None = option(None, "Epochs of each training run (default: the family's).", ge=1)
    batch_size: int | None = option(None, "Global batch size (default: the family's).", ge=1)
    synth_ratio: float | None = option(
        None, "D′ pairs per pair of D in D ∪ D′ (default: all of D′).", ge=0
    )
    fill: str | None = option(
        None, f"How D′ fills removed regions: {' | '.join(FILL_METHODS)} (default telea)."
    )
    limit: int | None = option(None, "D′ from the first N train images only.", ge=1)
    seed: int = option(0, "Seed of the world, D′ and both training runs.", ge=0)
    workers: int = option(1, "Data-parallel workers of each training run.", ge=1)
    gpus_per_worker: float = option(0.0, "GPUs per training worker (0: CPU).", ge=0)
    cpus_per_worker: int = option(1, "CPU cores per training worker.", ge=1)
    fill_actors: int | None = option(None, "D′ fill actors (default: from the cluster).", ge=1)
    gpus_per_actor: float = option(1.0, "GPUs per actor of a GPU fill (sd).", gt=0, le=8)

    def __post_init__(self) -> None:
        check_options(self)
        resolve_paths(self)
        if self.data is None and self.dataset != "toyworld":
            raise ValueError(f"--data is required for --dataset {self.dataset}")
        check_data_root(self.dataset, self.data)


def odmap_job(options: ODmAPJobOptions, job: JobOptions) -> Job:
    """The job ``options`` define, in ``<storage>/<name>``; every step's options are checked
    here, before anything runs.

    Raises:
        ValueError: options that a step refuses (the flag is named).
    """
    params = job_params(options)
    name, folder = job.named("odmap", options.dataset, params)
    steps = odmap_steps(options, folder, {"xmr.job": name})
    return Job("odmap", name, folder, params, steps, odmap_report)


def odmap_steps(
    options: ODmAPJobOptions, folder: StoragePath, tags: Mapping[str, str]
) -> list[Step]:
    """The experiment's steps with outputs under ``folder``; ``tags`` go on the training runs."""
    steps: list[Step] = []
    data = options.data
    if data is None:
        data = folder / "world"
        steps.append(world_step(data, seed=options.seed))
    dprime = folder / "dprime"
    synth = {
        "dataset": options.dataset, "data": data, "split": "train", "out": dprime,
        "fill": options.fill, "limit": options.limit, "seed": options.seed,
        "fill_actors": options.fill_actors, "gpus_per_actor": options.gpus_per_actor,
    }  # fmt: skip
    steps.append(synth_step("synth", "build D′: remove co-occurring objects (odmap §3)", synth))
    train = {
        "arch": options.arch, "pretrained": options.pretrained, "epochs": options.epochs,
        "batch_size": options.batch_size, "dataset": options.dataset, "data": data,
        "seed": options.seed, "workers": options.workers,
        "gpus_per_worker": options.gpus_per_worker, "cpus_per_worker": options.cpus_per_worker,
        "storage": folder / "runs",
    }  # fmt: skip
    for condition, step in CONDITIONS.items():
        values = train
        if condition != "D":
            values = {**train, "synth": dprime, "synth_ratio": options.synth_ratio}
        summary = f"train {options.model} on {condition}, then evaluate it on the test split"
        steps.append(train_step(step, summary, options.model, values, tags))
    compare = "xmr compare --experiment xmr/jobs/odmap"
    steps.append(Step("compare", "both runs' test metrics side by side", compare, compare_step))
    return steps


def compare_step(context: StepContext) -> StepOutcome:
    """Record the comparison: ``comparison.csv`` in the job's folder, the metrics (``d/…``,
    ``d_dprime/…``, ``delta/…`` with its interval) and the CSV in the job's MLflow run."""
    return record_comparison(context, _CONDITION_STEPS, COMPARED, PREFIXES)


def odmap_report(outcomes: Mapping[str, StepOutcome]) -> Table:
    """The finished job's comparison table (test split), each change with its paired interval
    (recorded by the ``compare`` step)."""
    metrics = condition_metrics(outcomes, _CONDITION_STEPS)
    return comparison_table(
        "test split: D vs D ∪ D′", metrics, COMPARED, _label, outcomes.get("compare")
    )


def _label(metric: str) -> str:
    """``test/odmap_at_1`` -> ``odmap@1``."""
    return metric.removeprefix("test/").replace("_at_", "@")
