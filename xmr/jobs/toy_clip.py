"""The toy CLIP's pretraining as a job: what ``--pretrained toy`` is, and the command that
rebuilds it (:mod:`xmr.models.toy_clip`).

Steps, in the job's folder:

1. ``world``: the pretraining world (``xmr data toyworld --config pretrain``) into ``world/``.
2. ``pretrain``: ``xmr-tiny`` CLIP from scratch with ToyWorld's preset until its val RSUM
   levels off (``xmr train --epochs auto``), tested with its best epoch's weights
   (``runs/pretrain``).
3. ``export``: those weights as the toy CLIP, float16 and gzip, with their record
   (``toy-clip/toy-clip.pt.gz`` and ``toy-clip.json``), then installed as the package's
   ``xmr/models/weights/`` files that ``--pretrained toy`` loads (``--no-install``: only in the
   job's folder, to copy by hand).
4. ``world-<name>`` and ``zero-shot-<name>`` for each world of :data:`ZERO_SHOT_WORLDS`: the
   installed toy CLIP evaluated, untouched, on that world's test split (``xmr eval
   --pretrained toy``): Recall@K both ways, ODmAP@K and Bias@K where the world has them;
   ``binding-test``: the binding world's binding test. What it knows before any experiment
   finetunes it, in one table the report prints.

``ray_jobs/toy_clip.py`` runs it. On 2 CPU cores the pretraining takes about 2 hours.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from rich.table import Table

from xmr.fields import check_options, option
from xmr.jobs.commands import eval_step, train_step, world_step
from xmr.jobs.options import JobOptions, job_params
from xmr.jobs.steps import Job, Step, StepContext, StepOutcome
from xmr.storage import StoragePath
from xmr.train.options import TrainOptions

PRETRAIN_WORLD = "pretrain"
"""The packaged world the toy CLIP learns from (``xmr/toyworld/scene/pretrain.yaml``)."""

ZERO_SHOT_WORLDS: dict[str, tuple[str | None, str | None]] = {
    "default": (None, None),
    "pets": ("pets", None),
    "street": ("street", None),
    "binding": ("binding", None),
    "shop": (None, "shop"),
}
"""The worlds the toy CLIP is scored on zero-shot: name -> (packaged config, mode), each with
its config's seed (the default world: seed 0, the one every command's embedded world is)."""

ZERO_SHOT_ROWS = {
    "recall_t2i_at_1": "R@1 t→i",
    "recall_t2i_at_10": "R@10 t→i",
    "recall_i2t_at_1": "R@1 i→t",
    "recall_i2t_at_10": "R@10 i→t",
    "odmap_at_1": "ODmAP@1",
    "odmap_at_10": "ODmAP@10",
    "bias_at_10": "Bias@10",
    "natural/bias_at_10": "Bias@10 (natural)",
}
"""The zero-shot table's columns: ``test/<metric>`` of each world's evaluation."""

BINDING_ROWS = {
    "binding/swap_acc": "swap",
    "binding/counter_acc": "counter",
    "binding/stereotype_acc": "stereotype",
}
"""The binding test's columns (ToyWorld's binding benchmark, the worlds that have one)."""

BINDING_STEP = "binding-test"
"""The step that scores the binding world's binding test."""

RECORD_TRAIN_DROPPED = ("data", "storage", "name", "workers", "gpus_per_worker",
                        "cpus_per_worker", "loaders", "loader_cpus", "max_failures")  # fmt: skip
"""Fields of the pretraining config the record leaves out: where and how fast it ran."""


@dataclass(frozen=True)
class ToyClipJobOptions:
    """How long the toy CLIP pretrains, where its files go, on what resources."""

    patience: int = option(2, "Evaluations without a val RSUM gain before it stops.", ge=1)
    max_epochs: int = option(15, "The most epochs it trains.", ge=1)
    install: bool = option(
        True,
        "Install the weights and record into this xmr's package (xmr/models/weights/), which "
        "--pretrained toy loads (--no-install: only in the job's folder).",
    )
    zero_shot: bool = option(
        True, "Score the toy CLIP zero-shot on every packaged world (default, pets, street, "
        "binding, shop)."
    )  # fmt: skip
    workers: int = option(1, "Data-parallel workers of the pretraining.", ge=1)
    gpus_per_worker: float = option(0.0, "GPUs per training worker (0: CPU).", ge=0)
    cpus_per_worker: int = option(2, "CPU cores per training worker.", ge=1)

    def __post_init__(self) -> None:
        check_options(self)


def pretrain_options(
    options: ToyClipJobOptions, world: StoragePath, runs: StoragePath
) -> TrainOptions:
    """The pretraining run's ``xmr train`` options: the ``clip`` family's ToyWorld preset
    (``xmr-tiny`` from scratch, Adam 5e-4 halved every 2 epochs, batch 128) on ``world`` until
    its val RSUM levels off."""
    return TrainOptions(
        model="clip", dataset="toyworld", data=world, epochs="auto",
        patience=options.patience, max_epochs=options.max_epochs, storage=runs,
        workers=options.workers, gpus_per_worker=options.gpus_per_worker,
        cpus_per_worker=options.cpus_per_worker,
    )  # fmt: skip


def recorded_train_config(config: Any) -> dict[str, Any]:
    """What the record keeps of the pretraining's :class:`~xmr.train.config.TrainConfig`: what
    decides the weights (:data:`RECORD_TRAIN_DROPPED` left out)."""
    return {k: v for k, v in config.to_dict().items() if k not in RECORD_TRAIN_DROPPED}


def toy_clip_job(options: ToyClipJobOptions, job: JobOptions) -> Job:
    """The job ``options`` define, in ``<storage>/<name>`` (default name ``toy-clip``)."""
    params = job_params(options)
    name, folder = job.named("toy-clip", "toyworld", params)
    return Job("toy-clip", name, folder, params, toy_clip_steps(options, folder), toy_clip_report)


def toy_clip_steps(options: ToyClipJobOptions, folder: StoragePath) -> list[Step]:
    """The pretraining, the export and the zero-shot evaluations, outputs under ``folder``."""
    from xmr.eval.options import BenchmarkOptions, EvalOptions
    from xmr.models.toy_clip import TOY_ARCH, TOY_TAG

    world = folder / "world"
    steps = [
        world_step(world, seed=None, config=PRETRAIN_WORLD),
        train_step(
            "pretrain",
            "pretrain xmr-tiny CLIP until its val RSUM levels off, then test its best epoch",
            pretrain_options(options, world, folder / "runs"),
            {"xmr.job": "toy-clip"},
        ),
        Step(
            "export",
            "the best epoch's weights as the toy CLIP (--pretrained toy), with their record",
            "(xmr.models.toy_clip.write_toy_weights)",
            partial(export_step, world=world, install=options.install),
        ),
    ]
    if not options.zero_shot:
        return steps
    scores = folder / "zero-shot"
    for name, (config, mode) in ZERO_SHOT_WORLDS.items():
        data = folder / f"world-{name}"
        steps.append(world_step(data, seed=None, config=config, mode=mode, name=f"world-{name}"))
        metrics = "recall" if mode == "shop" else "recall,odmap,bias"
        model = {"model": "clip", "arch": TOY_ARCH, "pretrained": TOY_TAG}
        evaluated = EvalOptions(dataset="toyworld", data=data, metrics=metrics, **model)
        summary = f"the toy CLIP zero-shot on the {name} world's test split"
        steps.append(eval_step(f"zero-shot-{name}", summary, evaluated, scores / f"{name}.json"))
        if config == "binding":
            benchmark = BenchmarkOptions(benchmark="toyworld-binding")
            summary = f"the toy CLIP zero-shot on the {name} world's binding test"
            evaluated = replace(evaluated, metrics="recall")
            output = scores / f"{name}-test.json"
            steps.append(eval_step(BINDING_STEP, summary, evaluated, output, benchmark))
    return steps


def export_step(context: StepContext, *, world: StoragePath, install: bool) -> StepOutcome:
    """Write the pretraining run's weights (its last checkpoint: the best epoch's) as the toy
    CLIP into ``<job>/toy-clip/``, the token-embedding rows kept for the tokens of the
    world's training captions; install both files into the package when ``install``."""
    from xmr.data.registry import read_dataset
    from xmr.models.base import read_state_dict
    from xmr.models.clip import registered_open_clip
    from xmr.models.toy_clip import (
        RECORD_FILE,
        TOY_ARCH,
        TOY_TAG,
        WEIGHTS_FILE,
        used_token_ids,
        write_toy_weights,
    )
    from xmr.train.config import TrainConfig
    from xmr.train.convergence import BEST_EPOCH, STOPPED_EPOCH
    from xmr.train.result import RUN_FILE

    outcome = context.outcomes["pretrain"]
    state = read_state_dict(outcome.outputs["checkpoint"])
    records = read_dataset("toyworld", world, "train")
    captions = [text for record in records for text in record.caption_texts]
    tokenizer = registered_open_clip().get_tokenizer(TOY_ARCH)
    kept = used_token_ids(tokenizer(captions[i : i + 4096]) for i in range(0, len(captions), 4096))
    saved = json.loads((Path(outcome.outputs["run"]) / RUN_FILE).read_text())
    config = TrainConfig.from_dict(saved["config"])
    headline = re.compile(r"(test/[a-z0-9_]+_at_\d+|train/[a-z_]+)")  # no intervals, no classes
    pretraining = {k: v for k, v in outcome.metrics.items() if headline.fullmatch(k)}
    record = {
        "tag": TOY_TAG,
        "family": "clip",
        "arch": TOY_ARCH,
        "command": "python ray_jobs/toy_clip.py",
        "world": {
            "config": PRETRAIN_WORLD,
            "resolved": json.loads((Path(str(world)) / "world.json").read_text())["config"],
        },
        "train": recorded_train_config(config),
        "pretraining": {
            **pretraining,
            "best_epoch": int(outcome.metrics.get(BEST_EPOCH, 0)),
            "stopped_epoch": int(outcome.metrics.get(STOPPED_EPOCH, 0)),
        },
    }
    out = Path(str(context.folder)) / "toy-clip"
    weights, record_file = out / WEIGHTS_FILE.name, out / RECORD_FILE.name
    digest = write_toy_weights(state, kept, record, weights, record_file)
    size = weights.stat().st_size
    print(f"toy CLIP: {weights} ({size / 1e6:.1f} MB, sha256 {digest[:12]}…)")
    if install:
        WEIGHTS_FILE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(weights, WEIGHTS_FILE)
        shutil.copyfile(record_file, RECORD_FILE)
        print(f"installed as {WEIGHTS_FILE} and {RECORD_FILE.name}: --pretrained toy loads it")
    outputs = {"weights": str(weights), "record": str(record_file)}
    return StepOutcome(metrics={"bytes": float(size), "tokens_kept": float(len(kept))},
                       outputs=outputs)  # fmt: skip


def zero_shot_table(outcomes: Mapping[str, StepOutcome]) -> dict[str, dict[str, float]]:
    """Per world, the toy CLIP's zero-shot metrics the job measured (``test/…`` and
    ``binding/…``), by the column names of :data:`ZERO_SHOT_ROWS` and :data:`BINDING_ROWS`."""
    table: dict[str, dict[str, float]] = {}
    for name in ZERO_SHOT_WORLDS:
        row: dict[str, float] = {}
        for step in (f"zero-shot-{name}", BINDING_STEP if name == "binding" else ""):
            if step in outcomes:
                for metric, value in outcomes[step].metrics.items():
                    key = metric.removeprefix("test/")
                    if key in ZERO_SHOT_ROWS or key in BINDING_ROWS:
                        row[key] = value
        if row:
            table[name] = row
    return table


def toy_clip_report(outcomes: Mapping[str, StepOutcome]) -> Table:
    """How the pretraining ended and the zero-shot table, one row a world."""
    from xmr.train.convergence import BEST_EPOCH, STOPPED_EPOCH

    pretrain = outcomes["pretrain"].metrics
    title = (
        f"the toy CLIP: pretrained to epoch {int(pretrain.get(STOPPED_EPOCH, 0))}, best epoch "
        f"{int(pretrain.get(BEST_EPOCH, 0))}; zero-shot on each world's test split"
    )
    columns = {**ZERO_SHOT_ROWS, **BINDING_ROWS}
    table = Table(title=title)
    table.add_column("world")
    for label in columns.values():
        table.add_column(label, justify="right")
    for world, row in zero_shot_table(outcomes).items():
        table.add_row(world, *(f"{row[key]:.3f}" if key in row else "–" for key in columns))
    return table
