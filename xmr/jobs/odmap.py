"""The ODmAP paper's experiment as a job (tables 1–2): build D′ → train on D ∪ D′ and on D →
compare their test metrics (ODmAP@K, Recall@K both ways, Bias@K).

D ∪ D′ has more pairs than D, so the same epochs of it are more optimiser steps, and models
that are still improving gain from the steps alone. The job therefore compares at equal
optimiser steps by default (D trained for as many steps as the D ∪ D′ run took, read from that
run), or with ``--converged`` with both trained until their validation score levels off; the
paper's equal-epochs D run is a column beside the headline with ``--equal-epochs``.

Steps, in the job's folder:

1. ``world`` (ToyWorld without ``--data`` only): generate the world into ``world/``.
2. ``synth``: D′ of the train split into ``dprime/`` (``xmr synth``: box masks, the fill,
   noun-phrase removal captions).
3. ``train-d-dprime``: the model on D ∪ D′ for ``--epochs`` (``runs/train-d-dprime``);
   training ends with the test-split evaluation.
4. ``train-d``: the same model and seed on D for the optimiser steps of ``train-d-dprime``
   (``--steps``; with ``--converged``, both runs ``--epochs auto``).
5. ``train-d-epochs`` (``--equal-epochs`` only): D for ``--epochs``, as the paper trains it.
6. ``compare``: the runs' test metrics side by side with the change of D ∪ D′ over the
   headline D run and its paired bootstrap interval over the same test queries, into
   ``comparison.csv`` and the job's MLflow run (``d/…`` the headline D run, ``d_epochs/…``,
   ``d_dprime/…``, ``delta/…``, ``delta/…_ci_low``, ``delta/…_ci_high``).

``ray_jobs/odmap.py`` submits it to a cluster; ``xmr demo`` runs it on the embedded ToyWorld.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import partial

from rich.table import Table

from xmr.data.registry import check_data_root
from xmr.fields import given_group, group, option
from xmr.jobs.commands import GLOBAL_STEP, synth_step, train_step, world_step
from xmr.jobs.comparison import comparison_table, condition_metrics, record_comparison
from xmr.jobs.options import JobOptions, job_params
from xmr.jobs.steps import Job, Step, StepContext, StepOutcome
from xmr.removal.fill import FILL_METHODS
from xmr.storage import StoragePath
from xmr.synth.config import RemovalSynthChoice, load_configs
from xmr.train.convergence import AUTO, BEST_EPOCH, STOPPED_EPOCH
from xmr.train.options import ConvergenceChoice, TrainChoice, TrainOptions

CONTROL, EQUAL_EPOCHS, TREATED = "train-d", "train-d-epochs", "train-d-dprime"
"""The training steps: D as the headline compares it (same steps, or converged), D for the
same epochs (``--equal-epochs``), D ∪ D′."""

ROWS = [
    *(f"recall_i2t_at_{k}" for k in (1, 5, 10)),
    *(f"recall_t2i_at_{k}" for k in (1, 5, 10)),
    *(f"odmap_at_{k}" for k in (1, 5, 10)),
    "bias_at_10",
]
"""The comparison's metrics (test split), in table order."""

COMPARED = [f"test/{row}" for row in ROWS]
PREFIXES = {CONTROL: "d", EQUAL_EPOCHS: "d_epochs", TREATED: "d_dprime"}
"""How each training step's metrics are named in the job's run (``d/test/odmap_at_1``)."""


@dataclass(frozen=True)
class ODmAPJobOptions(ConvergenceChoice, TrainChoice):
    """The experiment's options: :class:`~xmr.train.options.TrainChoice` (``--epochs``: the
    D ∪ D′ run's; D trains as many optimiser steps; ``--pretrained toy``: both finetune the toy
    CLIP), :class:`~xmr.train.options.ConvergenceChoice` (``--converged``: both until they level
    off), budget, how large each stage runs, and the build's flags that are ``xmr synth``'s
    (:data:`~xmr.synth.config.RemovalSynthChoice`)."""

    equal_epochs: bool = option(
        False,
        "Also train D for --epochs, as the paper does (more steps for D ∪ D′): a column "
        "beside the headline.",
    )
    synth_ratio: float | None = option(
        None, "D′ pairs per pair of D in D ∪ D′ (default: all of D′).", ge=0
    )
    fill: str | None = option(
        None, f"How D′ fills removed regions: {' | '.join(FILL_METHODS)} (default telea)."
    )
    seed: int = option(0, "Seed of the world, D′ and both training runs.", ge=0)
    workers: int = option(1, "Data-parallel workers of each training run.", ge=1)
    gpus_per_worker: float = option(0.0, "GPUs per training worker (0: CPU).", ge=0)
    cpus_per_worker: int = option(1, "CPU cores per training worker.", ge=1)
    synth: RemovalSynthChoice = group(RemovalSynthChoice)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.epochs == AUTO:
            raise ValueError(
                "--epochs auto: the odmap job trains both runs until they level off with "
                "--converged"
            )
        if self.data is None and self.dataset != "toyworld":
            raise ValueError(f"--data is required for --dataset {self.dataset}")
        check_data_root(self.dataset, self.data)
        self.check_budget({"--epochs": self.epochs, "--equal-epochs": self.equal_epochs})
        object.__setattr__(self, "synth", RemovalSynthChoice(**given_group(self, "synth")))


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
    synth, runtime = load_configs(None, {
        **asdict(options.synth), "dataset": options.dataset, "data": data, "split": "train",
        "out": dprime, "fill": options.fill, "seed": options.seed,
    })  # fmt: skip
    steps.append(
        synth_step("synth", "build D′: remove co-occurring objects (odmap §3)", synth, runtime)
    )
    train = {
        "model": options.model, "arch": options.arch, "pretrained": options.pretrained,
        "batch_size": options.batch_size, "dataset": options.dataset, "data": data,
        "seed": options.seed, "workers": options.workers,
        "gpus_per_worker": options.gpus_per_worker, "cpus_per_worker": options.cpus_per_worker,
        "storage": folder / "runs",
    }  # fmt: skip
    model = options.model
    if options.converged:
        auto = {**train, **options.budget()}
        until = "until its val RSUM levels off, then test its best epoch"
        steps += [
            train_step(TREATED, f"train {model} on D ∪ D′ {until}",
                       TrainOptions(**auto, synth=dprime, synth_ratio=options.synth_ratio), tags),
            train_step(CONTROL, f"train {model} on D {until}", TrainOptions(**auto), tags),
        ]  # fmt: skip
    else:
        epochs = {**train, "epochs": options.epochs}
        steps += [
            train_step(TREATED, f"train {model} on D ∪ D′, then evaluate it on the test split",
                       TrainOptions(**epochs, synth=dprime, synth_ratio=options.synth_ratio),
                       tags),
            train_step(CONTROL, f"train {model} on D for as many optimiser steps as D ∪ D′, "
                       "then test it", TrainOptions(**train), tags, steps_of=TREATED),
        ]  # fmt: skip
        if options.equal_epochs:
            summary = f"train {model} on D for as many epochs as D ∪ D′ (the paper's setting)"
            steps.append(train_step(EQUAL_EPOCHS, summary, TrainOptions(**epochs), tags))
    compare = "xmr compare --experiment xmr/jobs/odmap"
    conditions = odmap_conditions(converged=options.converged, equal_epochs=options.equal_epochs)
    steps.append(
        Step(
            "compare",
            "the runs' test metrics side by side",
            compare,
            partial(compare_step, conditions=conditions),
        )
    )
    return steps


def odmap_conditions(*, converged: bool, equal_epochs: bool) -> dict[str, list[str]]:
    """The comparison's columns (condition -> the step holding its metrics): the headline D
    run first, D ∪ D′ last (the change is D ∪ D′ − the first), the equal-epochs D run
    between them when trained.

    >>> list(odmap_conditions(converged=False, equal_epochs=True))
    ['D, same steps', 'D, same epochs', 'D ∪ D′']
    """
    if converged:
        return {"D, converged": [CONTROL], "D ∪ D′, converged": [TREATED]}
    conditions = {"D, same steps": [CONTROL]}
    if equal_epochs:
        conditions["D, same epochs"] = [EQUAL_EPOCHS]
    conditions["D ∪ D′"] = [TREATED]
    return conditions


def compare_step(context: StepContext, conditions: Mapping[str, list[str]]) -> StepOutcome:
    """Record the comparison: ``comparison.csv`` in the job's folder, the metrics (``d/…``,
    ``d_epochs/…``, ``d_dprime/…``, ``delta/…`` with its interval) and the CSV in the job's
    MLflow run."""
    prefixes = {condition: PREFIXES[steps[0]] for condition, steps in conditions.items()}
    return record_comparison(context, conditions, COMPARED, prefixes)


def odmap_report(outcomes: Mapping[str, StepOutcome]) -> Table:
    """The finished job's comparison table (test split), each change with its paired interval
    (recorded by the ``compare`` step), titled by what it compares: the runs' optimiser steps,
    or the epochs where converged runs stopped."""
    conditions = _ran_conditions(outcomes)
    metrics = condition_metrics(outcomes, conditions)
    return comparison_table(
        _title(outcomes, conditions), metrics, COMPARED, _label, outcomes.get("compare")
    )


def _ran_conditions(outcomes: Mapping[str, StepOutcome]) -> dict[str, list[str]]:
    """The conditions of a finished job, told from the steps it ran."""
    converged = STOPPED_EPOCH in outcomes[CONTROL].metrics
    return odmap_conditions(converged=converged, equal_epochs=EQUAL_EPOCHS in outcomes)


def _title(outcomes: Mapping[str, StepOutcome], conditions: Mapping[str, list[str]]) -> str:
    """``test split: D ∪ D′ vs D at equal optimiser steps (585 each)``, or the stop epochs of
    converged runs."""
    control, treated = outcomes[CONTROL].metrics, outcomes[TREATED].metrics
    if STOPPED_EPOCH in control:
        stops = ", ".join(
            f"{name} stopped at epoch {int(run[STOPPED_EPOCH])}, tested at {int(run[BEST_EPOCH])}"
            for name, run in (("D", control), ("D ∪ D′", treated))
        )
        return f"test split: D ∪ D′ vs D, each trained until its val RSUM levelled off ({stops})"
    steps = f"{int(treated.get(GLOBAL_STEP, 0))} each"
    if EQUAL_EPOCHS in outcomes:
        steps += f"; D for the same epochs: {int(outcomes[EQUAL_EPOCHS].metrics[GLOBAL_STEP])}"
    return f"test split: D ∪ D′ vs D at equal optimiser steps ({steps})"


def _label(metric: str) -> str:
    """``test/odmap_at_1`` -> ``odmap@1``."""
    return metric.removeprefix("test/").replace("_at_", "@")
