"""The BiAug paper's experiment as a job (§4–5): build BiAug-D′ → train on D ∪ BiAug-D′ with
its hard negatives, and on D for as many optimiser steps → compare attribute binding (the
ToyWorld binding test; ARO and SugarCrepe when given) and retrieval.

Steps, in the job's folder:

1. ``world`` (ToyWorld without ``--data`` only): the packaged ``binding`` world (reporting bias
   planted: in train, cars are red, umbrellas yellow, cups white with p = 0.9, and captions
   seldom name a colour) or ``--world-config``'s, into ``world/``.
2. ``synth``: BiAug-D′ of the train split into ``dprime/`` (``xmr synth --mode biaug``). On
   ToyWorld with perfect components by default: the ``oracle`` LLM (the scene's ground truth),
   the annotation boxes (``--boxes gt``) and the world's renderer (``--fill render``); on real
   data the LLM the user names (``--llm``, ``--llm-model``, ...), GroundingDINO and SD
   inpainting. Two captions per image are edited, so D′ holds more than the sample trained on.
3. ``train-d-dprime``: the model on D and an ``r·|D|`` sample of BiAug-D′, each positive in
   the batch of its hard negative, for ``E`` epochs (``runs/train-d-dprime``).
4. ``train-d``: the same model and seed on D for as many optimiser steps as ``train-d-dprime``
   took (``--steps``, read from that run; about ``(1 + r)·E`` epochs): the paper's fair
   baseline (CLIP-ft, §5), whose budget matches by steps, whatever the groups' batching made
   of the epochs (``runs/train-d``).
5. ``aro-d``, ``aro-d-dprime`` (with ``--aro``), ``sugarcrepe-d``, ``sugarcrepe-d-dprime``
   (with ``--sugarcrepe``): ``xmr eval --benchmark`` on each run's last checkpoint, the JSON
   into ``eval/``.
6. ``compare``: both conditions side by side with the change, into ``comparison.csv`` and the
   job's MLflow run (``d/…``, ``d_dprime/…``, ``delta/…``); every change (Recall@K, the
   binding test, the benchmarks) has a paired bootstrap interval over the queries or items
   both runs scored (the training runs' and the evaluations' per-query values).

Training ends with the test-split evaluation (Recall@K both ways) and, on a ToyWorld with a
binding test, with that test too (``test/binding/swap_acc``, ``counter_acc``,
``stereotype_acc``: what ``xmr eval --benchmark toyworld-binding`` scores): the comparison
reads those from the training runs rather than scoring the same checkpoints a second time.

``ray_jobs/biaug.py`` submits it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

from rich.table import Table

from xmr.benchmarks import (
    ARO_FILES,
    ARO_METRICS,
    BINDING_METRICS,
    SUGARCREPE_CATEGORIES,
    SUGARCREPE_MEAN_METRIC,
    category_metric,
)
from xmr.data.registry import check_data_root
from xmr.eval.options import BenchmarkOptions, EvalOptions
from xmr.fields import given_group, group, option
from xmr.jobs.commands import GLOBAL_STEP, eval_step, synth_step, train_step, world_step
from xmr.jobs.comparison import (
    comparison_table,
    condition_metrics,
    record_comparison,
)
from xmr.jobs.options import JobOptions, job_params
from xmr.jobs.steps import Job, Step, StepContext, StepOutcome
from xmr.llm import LLMSpec
from xmr.llm.spec import ORACLE
from xmr.storage import StoragePath
from xmr.synth.config import BiAugSynthChoice, load_configs
from xmr.toyworld.config import world_config_option
from xmr.toyworld.scene.binding import ITEMS_FILE as BINDING_ITEMS
from xmr.train.convergence import AUTO, BEST_EPOCH, STOPPED_EPOCH
from xmr.train.options import ConvergenceChoice, TrainChoice, TrainOptions

PACKAGED_WORLD = "binding"
"""The ToyWorld the job generates without ``--data`` or ``--world-config``."""

ABLATION = "D ∪ BiAug-D′, no hard negatives"
"""The paper's ablation (``--hard-negative-ablation``): BiAug-D′'s pairs shuffled freely."""

CONDITIONS = {"D": "d", ABLATION: "d-dprime-free", "D ∪ BiAug-D′": "d-dprime"}
"""The training conditions and their steps' suffix (``train-d``, ``aro-d``, ...), the headline
D ∪ BiAug-D′ last (the comparison's change is it over D); the ablation only when asked for."""

PREFIXES = {"D": "d", ABLATION: "d_dprime_free", "D ∪ BiAug-D′": "d_dprime"}
"""Each condition's prefix in the job's MLflow run (``d/test/recall_t2i_at_1``)."""

BENCHMARKS = ("aro", "sugarcrepe")
"""The benchmarks ``--aro`` / ``--sugarcrepe`` add, in step order."""


@dataclass(frozen=True)
class BiAugJobOptions(ConvergenceChoice, TrainChoice):
    """The experiment's options: :class:`~xmr.train.options.TrainChoice` (``--epochs``: E,
    the D ∪ BiAug-D′ run's; the D run trains as many optimiser steps, about (1 + r)·E epochs;
    ``--pretrained toy``: both finetune the toy CLIP),
    :class:`~xmr.train.options.ConvergenceChoice` (``--converged``: both until they level off),
    BiAug's components, the LLM (:class:`~xmr.llm.LLMSpec`'s flags, ``--llm`` defaulting to
    ``oracle`` on ToyWorld and required elsewhere), budget, benchmarks, scale, and the build's
    flags that are ``xmr synth``'s (:data:`~xmr.synth.config.BiAugSynthChoice`). Its own
    build flags have defaults of the job's: ``--captions-per-image 2``, ``--max-error-rate
    0.5`` (BiAug's filters drop rows by design), and on ToyWorld ``--fill render`` and
    ``--boxes gt``."""

    world_config: str | None = option(
        None,
        "ToyWorld without --data: the world's YAML, or a packaged one's name (default: the "
        "packaged binding world).",
    )
    synth_ratio: float = option(0.5, "r: BiAug-D′ pairs trained on per pair of D.", gt=0)
    captions_per_image: str = option("2", "Captions of each image BiAug edits: N or 'all'.")
    fill: str | None = option(
        None, "How objects are repainted: sd | render (default: render on ToyWorld, else sd)."
    )
    boxes: str | None = option(
        None,
        "Where objects are: gt (annotations) | groundingdino (default: gt on ToyWorld, else "
        "groundingdino).",
    )
    max_error_rate: float = option(
        0.5,
        "Fail the build above this share of failed rows (BiAug drops what its filters reject: "
        "unconfirmed objects, nothing to recolour).",
        ge=0,
        le=1,
    )
    aro: Path | None = option(
        None, "ARO folder (the authors' files, VG images in images/): score both models on it."
    )
    sugarcrepe: Path | None = option(
        None, "SugarCrepe folder (the seven category JSONs): score both models on it."
    )
    sugarcrepe_images: Path | None = option(
        None, "SugarCrepe's COCO val2017 images (default: <--sugarcrepe>/val2017)."
    )
    hard_negative_ablation: bool = option(
        False,
        "Also train D ∪ BiAug-D′ with its pairs shuffled freely (xmr train --no-hard-negatives: "
        "each positive's hard negative no longer in its batch), the paper's ablation, on the "
        "same budget: a column between D and D ∪ BiAug-D′.",
    )
    seed: int = option(0, "Seed of the world, BiAug-D′ and both training runs.", ge=0)
    workers: int = option(1, "Data-parallel workers of each training run.", ge=1)
    gpus_per_worker: float = option(0.0, "GPUs per training worker (0: CPU).", ge=0)
    cpus_per_worker: int = option(1, "CPU cores per training worker.", ge=1)
    eval_actors: int | None = option(
        None, "Encoder actors of each benchmark evaluation (default: one per GPU or core).", ge=1
    )
    llm: LLMSpec = group(LLMSpec)
    synth: BiAugSynthChoice = group(BiAugSynthChoice)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "world_config", world_config_option(self.world_config))
        if self.epochs == AUTO:
            raise ValueError(
                "--epochs auto: the biaug job trains D ∪ BiAug-D′ for E epochs and D for as "
                "many optimiser steps; give E, or train both until they level off with "
                "--converged"
            )
        self.check_budget({"--epochs": self.epochs})
        toyworld = self.dataset == "toyworld"
        if self.data is None and not toyworld:
            raise ValueError(f"--data is required for --dataset {self.dataset}")
        if self.world_config is not None and self.data is not None:
            raise ValueError("--world-config makes the world; it cannot go with --data")
        check_data_root(self.dataset, self.data)
        object.__setattr__(self, "synth", BiAugSynthChoice(**given_group(self, "synth")))
        llm = given_group(self, "llm")
        if "backend" not in llm and not toyworld:
            raise ValueError(
                f"--llm is required for --dataset {self.dataset}: openai | hf | vllm, with "
                "--llm-model"
            )
        object.__setattr__(self, "llm", LLMSpec(**{"backend": ORACLE, **llm}))
        if self.llm.backend == ORACLE and not toyworld:
            raise ValueError(
                f"--llm oracle answers from ToyWorld's ground truth: it needs --dataset "
                f"toyworld, not {self.dataset}"
            )
        if self.sugarcrepe_images is not None and self.sugarcrepe is None:
            raise ValueError("--sugarcrepe-images needs --sugarcrepe (the category files)")
        _check_benchmark_folders(self.aro, self.sugarcrepe)
        if toyworld:
            _check_binding_world(self.data, self.world_config)


def _check_benchmark_folders(aro: Path | None, sugarcrepe: Path | None) -> None:
    """Refuse a benchmark folder without one of its files now, not after the training runs
    (each file's items are read, and checked, by its evaluation step).

    Raises:
        FileNotFoundError: naming the flag, the folder and the files looked for.
    """
    expected = {
        "aro": (aro, ARO_FILES.values()),
        "sugarcrepe": (sugarcrepe, [f"{c}.json" for c in SUGARCREPE_CATEGORIES]),
    }
    for name, (folder, files) in expected.items():
        if folder is not None and not any((folder / file).is_file() for file in files):
            raise FileNotFoundError(
                f"--{name} {folder}: no {'ARO' if name == 'aro' else 'SugarCrepe'} file "
                f"({', '.join(files)})"
            )


def _check_binding_world(data: StoragePath | None, world_config: str | Path | None) -> None:
    """The ToyWorld result is the binding test: refuse a world without one.

    Raises:
        ValueError / FileNotFoundError: naming the folder or the YAML and what it lacks.
    """
    if data is not None:
        if not (data / BINDING_ITEMS).is_file():
            raise ValueError(
                f"--data {data} has no binding test ({BINDING_ITEMS}): generate the world with "
                "`xmr data toyworld --config binding`, or leave out --data"
            )
        return
    if world_config is None:
        return
    from xmr.toyworld import load_config

    try:
        binding = load_config(world_config).binding  # a scene world's, checked key by key
    except (FileNotFoundError, ValueError) as exc:
        raise type(exc)(f"--world-config: {exc}") from None
    if binding.swap_items + binding.counter_items == 0:
        raise ValueError(
            f"--world-config {world_config}: binding.swap_items and binding.counter_items are "
            "0: the world needs a binding test (see the packaged binding world, binding.yaml)"
        )


def biaug_job(options: BiAugJobOptions, job: JobOptions) -> Job:
    """The job ``options`` define, in ``<storage>/<name>``; every step's options are checked
    here, before anything runs.

    Raises:
        ValueError: options that a step refuses (the flag is named).
    """
    params = job_params(options)
    name, folder = job.named("biaug", options.dataset, params)
    steps, rows = biaug_steps(options, folder, {"xmr.job": name})
    return Job("biaug", name, folder, params, steps, partial(biaug_report, rows=rows))


def biaug_steps(
    options: BiAugJobOptions, folder: StoragePath, tags: Mapping[str, str]
) -> tuple[list[Step], list[str]]:
    """The experiment's steps with outputs under ``folder`` (``tags`` go on the training runs),
    and the metrics the comparison shows, in order."""

    steps: list[Step] = []
    data = options.data
    toyworld = options.dataset == "toyworld"
    if data is None:
        data = folder / "world"
        steps.append(world_step(data, seed=options.seed, config=_world_config(options)))
    dprime = folder / "dprime"
    synth, runtime = load_configs(None, {
        **asdict(options.synth),
        "mode": "biaug", "dataset": options.dataset, "data": data, "split": "train",
        "out": dprime, "seed": options.seed, "captions_per_image": options.captions_per_image,
        "fill": options.fill or ("render" if toyworld else None),
        "boxes": options.boxes or ("gt" if toyworld else None),
        "max_error_rate": options.max_error_rate,
    })  # fmt: skip
    summary = "build BiAug-D′: objects, attribute edits, hard negatives (§3)"
    steps.append(synth_step("synth", summary, synth, runtime, options.llm))

    model = {"arch": options.arch, "pretrained": options.pretrained}
    ratio = options.synth_ratio
    train = {
        **model, "batch_size": options.batch_size, "dataset": options.dataset, "data": data,
        "seed": options.seed, "workers": options.workers,
        "gpus_per_worker": options.gpus_per_worker, "cpus_per_worker": options.cpus_per_worker,
        "storage": folder / "runs",
    }  # fmt: skip
    treated, control = (f"train-{CONDITIONS[c]}" for c in ("D ∪ BiAug-D′", "D"))
    budget = options.budget() or {"epochs": options.epochs}  # None: the family's
    values = {**train, **budget, "synth": dprime, "synth_ratio": ratio}
    step = train_step(treated, "", TrainOptions(model=options.model, **values), tags)
    resolved = step.config  # E: the treated run's epochs, resolved once, there
    epochs = resolved.epochs
    length = "until its val RSUM levels off" if options.converged else f"E = {epochs} epochs"
    summary = (
        f"train {options.model} on D ∪ BiAug-D′ (r = {ratio:g}, hard negatives), {length}, "
        "then test it"
    )
    steps.append(replace(step, summary=summary))
    if options.hard_negative_ablation:
        same = length if options.converged else f"as many steps as {treated}"
        summary = f"the same, its pairs shuffled freely (no hard negatives), {same}, then test it"
        free = {**train, **options.budget(), "synth": dprime, "synth_ratio": ratio}
        free_options = TrainOptions(model=options.model, **free, hard_negatives=False)
        matched = None if options.converged else treated
        steps.append(train_step(f"train-{CONDITIONS[ABLATION]}", summary, free_options, tags,
                                steps_of=matched))  # fmt: skip
    if options.converged:
        summary = f"train {options.model} on D until its val RSUM levels off, then test it"
        control_options = TrainOptions(model=options.model, **train, **budget)
        steps.append(train_step(control, summary, control_options, tags))
    else:
        summary = (
            f"train {options.model} on D for as many optimiser steps as {treated}, then test it"
        )
        steps.append(train_step(control, summary, TrainOptions(model=options.model, **train),
                                tags, steps_of=treated))  # fmt: skip
    for benchmark in BENCHMARKS:
        root = getattr(options, benchmark)
        if root is None:
            continue
        scored = {"benchmark": benchmark}
        if benchmark == "sugarcrepe":
            scored["images"] = options.sugarcrepe_images
        for condition, suffix in CONDITIONS.items():
            if condition == ABLATION and not options.hard_negative_ablation:
                continue
            step = f"{benchmark}-{suffix}"
            values = {
                "data": root,
                "checkpoint": folder / "runs" / f"train-{suffix}" / "last.pt",
                "actors": options.eval_actors,
                "seed": options.seed,
            }
            summary = f"score the {condition} model on {benchmark}"
            output = folder / "eval" / f"{step}.json"
            steps.append(
                eval_step(step, summary, EvalOptions(**values), output, BenchmarkOptions(**scored))
            )
    rows = comparison_rows(resolved.test_split)
    compare = "xmr compare --experiment xmr/jobs/biaug"
    steps.append(
        Step(
            "compare",
            "both runs side by side: binding, ARO, SugarCrepe, recall",
            compare,
            partial(compare_step, rows=rows),
        )
    )
    return steps, rows


def _world_config(options: BiAugJobOptions) -> str | Path:
    return options.world_config if options.world_config is not None else PACKAGED_WORLD


def comparison_rows(split: str) -> list[str]:
    """The comparison's metrics in table order: the binding test and Recall@K of ``split``
    (the training runs' final evaluation), then ARO and SugarCrepe.

    >>> comparison_rows("test")[:2]
    ['test/binding/swap_acc', 'test/binding/counter_acc']
    """
    return [
        *(f"{split}/{name}" for name in BINDING_METRICS),
        *(f"{split}/recall_{d}_at_{k}" for d in ("i2t", "t2i") for k in (1, 5, 10)),
        *ARO_METRICS.values(),
        *(category_metric(c) for c in SUGARCREPE_CATEGORIES),
        SUGARCREPE_MEAN_METRIC,
    ]


def _condition_steps(outcomes: Mapping[str, StepOutcome]) -> dict[str, list[str]]:
    """Per condition the job trained, the steps holding its metrics: its training run and its
    evaluations."""
    return {
        condition: [f"train-{suffix}", *(f"{b}-{suffix}" for b in BENCHMARKS)]
        for condition, suffix in CONDITIONS.items()
        if f"train-{suffix}" in outcomes
    }


def compare_step(context: StepContext, rows: list[str]) -> StepOutcome:
    """Record the comparison (:func:`~xmr.jobs.comparison.record_comparison`)."""
    return record_comparison(context, _condition_steps(context.outcomes), rows, PREFIXES)


def biaug_report(outcomes: Mapping[str, StepOutcome], rows: list[str]) -> Table:
    """The finished job's comparison table, titled with the optimiser steps both runs took, or
    where converged runs stopped."""
    trained = _condition_steps(outcomes)
    metrics = condition_metrics(outcomes, trained)
    split = rows[0].split("/")[0]
    runs = {c: outcomes[steps[0]].metrics for c, steps in trained.items()}
    steps = runs["D ∪ BiAug-D′"].get(GLOBAL_STEP)
    budget = "" if steps is None else f" at equal optimiser steps ({int(steps)} each)"
    if all(STOPPED_EPOCH in run for run in runs.values()):
        budget = (
            ", each trained until its val RSUM levelled off ("
            + ", ".join(
                f"{c} stopped at epoch {int(run[STOPPED_EPOCH])}, tested at {int(run[BEST_EPOCH])}"
                for c, run in runs.items()
            )
            + ")"
        )
    return comparison_table(
        f"{split} split and benchmarks: {' vs '.join(metrics)}{budget}",
        metrics,
        rows,
        label=lambda row: row.removeprefix(f"{split}/").replace("_at_", "@"),
        compared=outcomes.get("compare"),
    )
