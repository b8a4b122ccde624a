"""The EI-CLIP paper's experiment as a job (§4, tables 1–2): train CLIP on the product
descriptions (the paper's baseline ②) and EI-CLIP on the descriptions and their entities, the
same way → compare product retrieval under both of the paper's protocols.

Steps, in the job's folder:

1. ``world`` (ToyWorld without ``--data`` only): a shop world (product photos; brand,
   category, sub-category, season and composition entities; several brand names are ordinary
   words) into ``world/``: the packaged shop defaults, or ``--world-config``.
2. ``train-clip`` (unless ``--no-baseline``): CLIP on the descriptions alone
   (``runs/train-clip``).
3. ``train-eiclip``: EI-CLIP (``runs/train-eiclip``). Both runs share the architecture,
   pretrained weights, epochs, batch size, seed and EI-CLIP's optimiser recipe (learning
   rate, weight decay, schedule and warm-up: the paper finetunes every model with it), so
   that neither stops where its own schedule ran out of rate.
4. ``compare``: both models side by side with the change, under each protocol, into
   ``comparison.csv`` and the job's MLflow run (``clip/…``, ``eiclip/…``, ``delta/…``). The
   training runs log no per-query values of the product protocols: the change has no
   interval.

The two protocols (:mod:`xmr.eval.product_retrieval`): the full candidate set (every product of
the split) and "Sample 100" (each query against 100 products of its own sub-category, without
the category entities), each Rank@1/5/10 both ways and SumR. Training on data with product
entities ends with exactly this evaluation on the test split (Fashion-Gen: ``validation``, its
test set is not public), so the comparison reads the training runs' final metrics (``xmr eval``
has no product-retrieval mode, and a second evaluation would score the same checkpoints).

``ray_jobs/eiclip.py`` submits it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from rich.console import Group

from xmr.data.registry import check_data_root
from xmr.fields import check_options, option, resolve_paths
from xmr.jobs.commands import train_step, world_step
from xmr.jobs.comparison import comparison_table, condition_metrics, record_comparison
from xmr.jobs.options import JobOptions, job_params
from xmr.jobs.steps import Job, Step, StepContext, StepOutcome
from xmr.storage import StoragePath
from xmr.toyworld.config import world_config_option
from xmr.toyworld.shop.brand_kinds import BRAND_GROUP, BRAND_KINDS
from xmr.train.options import ConvergenceChoice, DataChoice, TrainOptions

DATASETS = ("toyworld", "fashiongen")
"""The datasets with product entities EI-CLIP learns from."""

CONDITIONS = {"CLIP": "train-clip", "EI-CLIP": "train-eiclip"}
"""The two models and the steps that train them (the baseline first)."""

PREFIXES = {"CLIP": "clip", "EI-CLIP": "eiclip"}
"""Each model's prefix in the job's MLflow run (``eiclip/test/sumr``)."""

PROTOCOLS = {"full": "Full candidate set", "subcat": "Sample 100 (same sub-category)"}
"""The paper's two protocols: the metric infix (``subcat_``) and the table's title."""

BY_BRAND = "brand"
"""The rows of the table by kind of brand name (a ToyWorld shop's, :mod:`brand_kinds
<xmr.toyworld.shop.brand_kinds>`): where EI-CLIP's gain lies."""


@dataclass(frozen=True)
class EiClipJobOptions(ConvergenceChoice, DataChoice):
    """The experiment's options: :class:`DataChoice`'s, the models' size and budget (both
    runs'; ``--converged``: each until its val RSUM levels off, :class:`ConvergenceChoice`;
    ``--pretrained toy``: both finetune the toy CLIP), the baseline, scale."""

    world_config: str | None = option(
        None,
        "ToyWorld without --data: a shop world's YAML, or a packaged one's name "
        "(shop-confounded: EI-CLIP's positive control; default: the packaged shop world).",
    )
    arch: str | None = option(None, "Architecture of both models (default: EI-CLIP's).")
    pretrained: str | None = option(
        None, "Pretrained weights tag, or 'none' (default: EI-CLIP's; ToyWorld: none)."
    )
    epochs: int | None = option(None, "Epochs of each run (default: EI-CLIP's).", ge=1)
    batch_size: int | None = option(None, "Global batch size (default: EI-CLIP's).", ge=1)
    lr: float | None = option(None, "Learning rate of both runs (default: EI-CLIP's).", gt=0)
    baseline: bool = option(
        True, "Also train CLIP on the descriptions alone (the paper's baseline ②) and compare."
    )
    seed: int = option(0, "Seed of the world and both training runs.", ge=0)
    workers: int = option(1, "Data-parallel workers of each training run.", ge=1)
    gpus_per_worker: float = option(0.0, "GPUs per training worker (0: CPU).", ge=0)
    cpus_per_worker: int = option(1, "CPU cores per training worker.", ge=1)

    def __post_init__(self) -> None:
        check_options(self)
        resolve_paths(self)
        object.__setattr__(self, "world_config", world_config_option(self.world_config))
        if self.dataset not in DATASETS:
            raise ValueError(
                f"--dataset {self.dataset!r}: EI-CLIP learns from product entities; choose one "
                f"of {', '.join(DATASETS)}"
            )
        if self.data is None and self.dataset != "toyworld":
            raise ValueError(f"--data is required for --dataset {self.dataset}")
        if self.world_config is not None and self.data is not None:
            raise ValueError("--world-config makes the world; it cannot go with --data")
        check_data_root(self.dataset, self.data)
        self.check_budget({"--epochs": self.epochs})
        if self.dataset == "toyworld":
            _check_shop_world(self.data, self.world_config)


def _check_shop_world(data: StoragePath | None, world_config: str | Path | None) -> None:
    """Refuse a scene ToyWorld (no products): as ``--data`` or as ``--world-config``.

    Raises:
        ValueError / FileNotFoundError: naming the folder or the YAML.
    """
    from xmr.toyworld import load_shop_config

    if world_config is not None:
        try:
            load_shop_config(world_config)  # a shop world's, checked key by key
        except (FileNotFoundError, ValueError) as exc:
            raise type(exc)(f"--world-config: {exc}") from None
    record = None if data is None else data / "world.json"
    if record is not None and record.is_file():
        mode = json.loads(record.read_text()).get("mode", "scene")
        if mode != "shop":
            raise ValueError(
                f"--data {data} is a {mode} ToyWorld; EI-CLIP needs a shop world "
                "(`xmr data toyworld --mode shop`)"
            )


def eiclip_job(options: EiClipJobOptions, job: JobOptions) -> Job:
    """The job ``options`` define, in ``<storage>/<name>``; every step's options are checked
    here, before anything runs.

    Raises:
        ValueError: options that a step refuses (the flag is named).
    """
    params = job_params(options)
    name, folder = job.named("eiclip", options.dataset, params)
    steps, rows = eiclip_steps(options, folder, {"xmr.job": name})
    return Job("eiclip", name, folder, params, steps, partial(eiclip_report, rows=rows))


def eiclip_steps(
    options: EiClipJobOptions, folder: StoragePath, tags: Mapping[str, str]
) -> tuple[list[Step], dict[str, list[str]]]:
    """The experiment's steps with outputs under ``folder`` (``tags`` go on the training runs),
    and per protocol the metrics the comparison shows, in order."""
    from xmr.train.config import resolve_config

    steps: list[Step] = []
    data = options.data
    if data is None:
        data = folder / "world"
        steps.append(world_step(data, seed=options.seed, config=options.world_config, mode="shop"))
    eiclip = resolve_config(
        "eiclip",
        arch=options.arch,
        pretrained=options.pretrained,
        epochs=options.epochs,
        batch_size=options.batch_size,
        lr=options.lr,
        dataset=options.dataset,
    )
    # The baseline trains as EI-CLIP does: the same backbone, weights, budget and optimiser.
    budget = options.budget() or {"epochs": eiclip.epochs}
    optim = eiclip.optim
    train = {
        "arch": eiclip.model.arch, "pretrained": options.pretrained, **budget,
        "batch_size": eiclip.batch_size, "lr": optim.lr, "weight_decay": optim.weight_decay,
        "lr_schedule": optim.schedule, "warmup_steps": optim.warmup_steps,
        "dataset": options.dataset, "data": data, "seed": options.seed,
        "workers": options.workers, "gpus_per_worker": options.gpus_per_worker,
        "cpus_per_worker": options.cpus_per_worker, "storage": folder / "runs",
    }  # fmt: skip
    split = eiclip.test_split
    test = f"test on {split}"
    if options.converged:
        test = f"until its val RSUM levels off, {test}"
    if options.baseline:
        summary = f"train CLIP on the descriptions (baseline ②), {test}"
        steps.append(
            train_step(CONDITIONS["CLIP"], summary, TrainOptions(model="clip", **train), tags)
        )
    summary = f"train EI-CLIP on descriptions + entities, {test}"
    steps.append(
        train_step(CONDITIONS["EI-CLIP"], summary, TrainOptions(model="eiclip", **train), tags)
    )
    rows = protocol_rows(split)
    steps.append(
        Step(
            "compare",
            "both models under both protocols (full set, Sample 100)",
            "xmr compare --experiment xmr/jobs/eiclip",
            partial(compare_step, rows=rows),
        )
    )
    return steps, rows


def protocol_rows(split: str) -> dict[str, list[str]]:
    """Per protocol, its metrics of ``split`` in table order: Rank@1/5/10 image→text, then
    text→image, then SumR; and :data:`BY_BRAND`'s: Rank@1 both ways and both protocols' SumR
    on each kind of brand name's queries (a ToyWorld shop's only).

    >>> protocol_rows("validation")["subcat"][-1]
    'validation/subcat_sumr'
    """
    rows = {}
    for protocol in PROTOCOLS:
        infix = "" if protocol == "full" else f"{protocol}_"
        rows[protocol] = [
            *(f"{split}/{infix}recall_{d}_at_{k}" for d in ("i2t", "t2i") for k in (1, 5, 10)),
            f"{split}/{infix}sumr",
        ]
    rows[BY_BRAND] = [
        f"{split}/{BRAND_GROUP}_{kind}/{metric}"
        for kind in BRAND_KINDS
        for metric in ("recall_t2i_at_1", "recall_i2t_at_1", "sumr", "subcat_sumr")
    ]
    return rows


def _trained(outcomes: Mapping[str, StepOutcome]) -> dict[str, list[str]]:
    """Each trained model's step (the baseline only when the job trained it)."""
    return {c: [step] for c, step in CONDITIONS.items() if step in outcomes}


def compare_step(context: StepContext, rows: Mapping[str, list[str]]) -> StepOutcome:
    """Record the comparison (:func:`~xmr.jobs.comparison.record_comparison`), both
    protocols' metrics in one table."""
    every = [row for protocol in rows.values() for row in protocol]
    return record_comparison(context, _trained(context.outcomes), every, PREFIXES)


def eiclip_report(outcomes: Mapping[str, StepOutcome], rows: Mapping[str, list[str]]) -> Group:
    """One table per protocol: Rank@K both ways and SumR of each model; on a ToyWorld shop a
    third, by kind of brand name (the confounded brands against the invented ones)."""
    metrics = condition_metrics(outcomes, _trained(outcomes))
    titles = {**PROTOCOLS, BY_BRAND: "By kind of brand name (full candidate set; SumR of both)"}
    tables = []
    for protocol, title in titles.items():
        split = rows[protocol][0].split("/")[0]
        if not any(row in values for values in metrics.values() for row in rows[protocol]):
            continue  # no brand kinds: product data without a ToyWorld shop's brands
        infix = "" if protocol in ("full", BY_BRAND) else f"{protocol}_"

        def label(row: str, prefix: str = f"{split}/{infix}") -> str:
            name = row.removeprefix(prefix).replace("_at_", "@").replace("subcat_", "Sample 100 ")
            name = name.replace(f"{BRAND_GROUP}_", "").replace("/", ": ", 1)
            return name.replace("recall_", "Rank ").replace("sumr", "SumR")

        tables.append(
            comparison_table(
                f"{title}, {split} split",
                metrics,
                rows[protocol],
                label=label,
                compared=outcomes.get("compare"),
            )
        )
    return Group(*tables)
