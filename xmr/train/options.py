"""The options of ``xmr train`` (:class:`TrainOptions`): its flags, their defaults and help,
and :class:`TrainChoice`, the group of them that the jobs share.

An option left unset (None) takes the model family's default when the options resolve to a
:class:`~xmr.train.config.TrainConfig` (:meth:`~xmr.train.config.TrainConfig.from_options`).
Importing this module loads neither torch, Ray nor a command-line library (the command line
builds its help from it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xmr.data.registry import DATASETS
from xmr.fields import check_name, check_options, option, resolve_paths
from xmr.storage import StoragePath
from xmr.train.convergence import AUTO

DEFAULT_STORAGE = Path("xmr-runs")
"""Where runs and their checkpoints go (under ``$XMR_STORAGE`` when set, else in the working
directory)."""


@dataclass(frozen=True)
class ModelChoice:
    """Which model: the option group of every command and job that trains or evaluates a
    model family (its flags read the same everywhere)."""

    model: str = option("clip", "Model family: clip | vsepp | blip | eiclip (see `xmr models`).")
    arch: str | None = option(None, "Architecture (default: the family's, see `xmr models`).")
    pretrained: str | None = option(
        None, "Pretrained weights tag, or 'none' (default: the family's; ToyWorld: none)."
    )


@dataclass(frozen=True)
class DataChoice:
    """On what data: the option group of every command and job that reads a dataset."""

    dataset: str = option("toyworld", " | ".join(DATASETS))
    data: StoragePath | None = option(
        None,
        "Dataset folder (COCO, Flickr30k, Fashion-Gen's .h5 files, a ToyWorld), a path or "
        "s3://…; default: the embedded ToyWorld (a job: its world, generated into the job's "
        "folder).",
    )


@dataclass(frozen=True)
class TrainChoice(DataChoice, ModelChoice):
    """What is trained on what, for how long: the option group that ``xmr train`` and the jobs
    that train share (each subclasses it, so its flags come first and read the same
    everywhere): :class:`ModelChoice`, :class:`DataChoice`, the epochs and the batch size.
    Unset (None) values take the model family's defaults when resolved."""

    epochs: int | str | None = option(
        None,
        "Epochs, or 'auto': until the val split's RSUM levels off (see --patience, "
        "--min-delta, --max-epochs), then test the best epoch's weights (default: the "
        "family's number).",
        cli_type=str,
    )
    batch_size: int | None = option(None, "Global batch size (default: the family's).", ge=1)

    def __post_init__(self) -> None:
        """Parses ``--epochs``, checks every option's bounds and makes the paths absolute
        (a subclass's fields too)."""
        object.__setattr__(self, "epochs", parse_epochs(self.epochs))
        check_options(self)
        resolve_paths(self)


@dataclass(frozen=True)
class ConvergenceChoice:
    """``--converged``, ``--patience``, ``--max-epochs``: the option group of every job that
    compares trained models, to compare them where each levelled off instead of at a fixed
    budget (each run ``xmr train --epochs auto``)."""

    converged: bool = option(
        False,
        "Train every run until its val RSUM levels off (xmr train --epochs auto), then test "
        "its best epoch, and compare them there instead of at a fixed budget.",
    )
    patience: int | None = option(
        None, "--converged: evaluations without a gain before a run stops (default: 3).", ge=1
    )
    max_epochs: int | None = option(
        None, "--converged: the most epochs a run trains (default: 30).", ge=1
    )

    def check_budget(self, fixed: dict[str, Any]) -> None:
        """Refuse a fixed budget beside ``--converged`` (``fixed``: flag -> value, None or
        False when not given), and ``--patience`` or ``--max-epochs`` without it.

        Raises:
            ValueError: naming the flags.
        """
        given = [flag for flag, value in fixed.items() if value not in (None, False)]
        if self.converged and given:
            raise ValueError(
                "--converged trains each run until it levels off: it takes --max-epochs and "
                f"--patience, not {' or '.join(given)}"
            )
        if not self.converged and (self.patience is not None or self.max_epochs is not None):
            raise ValueError("--patience and --max-epochs apply to --converged")

    def budget(self) -> dict[str, Any]:
        """``xmr train``'s budget options for ``--converged``: ``epochs="auto"`` with the
        patience and the cap; ``{}`` without it."""
        if not self.converged:
            return {}
        return {"epochs": AUTO, "patience": self.patience, "max_epochs": self.max_epochs}


@dataclass(frozen=True)
class TrainOptions(TrainChoice):
    """``xmr train``'s options, named as its flags (paths absolute): :class:`TrainChoice`'s,
    then how the run trains, where it goes and on what resources."""

    split: str = option("train", "Training split.")
    synth: StoragePath | None = option(
        None, "A D′ folder (path or s3://…) from `xmr synth` to train on D ∪ D′."
    )
    synth_ratio: float | None = option(None, "D′ pairs per pair of D (default: all of D′).", ge=0)
    hard_negatives: bool = option(
        True,
        "A BiAug D′'s positive and its hard negative train in one batch "
        "(--no-hard-negatives: shuffled freely, the paper's ablation).",
    )
    synth_only: bool = option(
        False, "Train on the D′ sample alone, without D's pairs (BiAug's ablation: D′ without D)."
    )
    fair_alpha: float = option(
        0.0, "FairSample weight α in [0, 1] (0: plain training).", ge=0, le=1
    )
    fair_captions: str = option(
        "neutral",
        "The captions FairSample balances: neutral (eq. 6: every gender-neutral caption) | "
        "gendered-images (a diagnostic: only those of images showing men or women; "
        "person-less scenes keep their plain negatives).",
    )
    max_violation: bool | None = option(
        None,
        "VSE++: the hardest negative of the batch (--no-max-violation: the sum over "
        "negatives; default: the family's, ToyWorld's VSE++ preset sums).",
    )
    max_violation_after: int = option(
        0,
        "VSE++: sum over negatives for the first N epochs, then the hardest negative (a "
        "warm-up: from random weights the hardest collapses); implies --max-violation.",
        ge=0,
    )
    patience: int | None = option(
        None, "--epochs auto: evaluations without a gain before it stops (default: 3).", ge=1
    )
    min_delta: float | None = option(
        None, "--epochs auto: the RSUM gain that counts, in points of 600 (default: 0.5).", ge=0
    )
    max_epochs: int | None = option(
        None, "--epochs auto: stop here even while RSUM still rises (default: 30).", ge=1
    )
    steps: int | None = option(
        None,
        "Total optimiser steps (default: epochs × steps per epoch): training stops after N, "
        "the last epoch cut short, over ceil(N / steps per epoch) epochs; the LR schedule "
        "spans N. Excludes --epochs (e.g. a D-only control matched to a D ∪ D′ run's steps).",
        ge=1,
    )
    lr: float | None = option(None, "Learning rate (default: the family's).", gt=0)
    weight_decay: float | None = option(None, "Weight decay (default: the family's).", ge=0)
    lr_schedule: str | None = option(
        None, "Learning-rate schedule: step | cosine | constant (default: the family's)."
    )
    warmup_steps: int | None = option(
        None, "Optimiser steps of linear learning-rate warm-up (default: the family's).", ge=0
    )
    lr_step_period: int | None = option(
        None,
        "The step schedule's period in optimiser steps (default: the family's step epochs × "
        "this run's steps per epoch). A control matched to another run's --steps takes that "
        "run's (its param train.lr_step_period), so both follow one learning-rate path.",
        ge=1,
    )
    precision: str = option(
        "fp32",
        "fp32 | bf16 (bfloat16 autocast) | amp (float16 autocast, gradient scaler); "
        "losses, weights and checkpoints stay fp32.",
    )
    workers: int = option(1, "Data-parallel training workers.", ge=1)
    accum_steps: int = option(
        1,
        "Micro-batches per step: the global batch in k passes, negatives intact "
        "(for a paper's batch on a smaller GPU).",
        ge=1,
    )
    gpus_per_worker: float = option(0.0, "GPUs per worker (0: CPU).", ge=0)
    cpus_per_worker: int = option(1, "CPU cores per worker.", ge=1)
    loaders: int = option(
        0,
        "Ray Data actors that decode, transform and tokenise batches ahead of the workers "
        "(0: as many as the nodes spare: each node's CPUs − 1, summed, − workers × "
        "cpus-per-worker; at least 1).",
        ge=0,
    )
    loader_cpus: float = option(
        0.0,
        "CPUs each loader reserves (0: it shares its node's cores; 1 on a cluster places the "
        "loaders on nodes with free CPUs).",
        ge=0,
    )
    init: StoragePath | None = option(
        None, "Start from this checkpoint, a path or s3://… (e.g. a D-only run's)."
    )
    name: str | None = option(None, "Run name (default: family-arch-dataset-<config hash>).")
    storage: StoragePath = option(
        None,
        "Folder of runs and checkpoints: a path, or s3://… on a cluster.",
        default_folder=str(DEFAULT_STORAGE),
    )
    seed: int | None = option(
        None, "Seed of init, shuffling and sampling (default: 0; excludes --seeds).", ge=0
    )
    eval_every: int = option(
        0, "Evaluate on the val split every N epochs (0: only at the end).", ge=0
    )
    max_failures: int = option(2, "Worker-group restarts from the last checkpoint.", ge=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_name(self.name)


def parse_epochs(value: int | str | None) -> int | str | None:
    """``--epochs``: a number of epochs >= 1, or ``"auto"`` (train to convergence).

    >>> parse_epochs("3"), parse_epochs("auto"), parse_epochs(None)
    (3, 'auto', None)
    >>> parse_epochs("0")
    Traceback (most recent call last):
    ValueError: --epochs must be >= 1, got 0
    """
    if value is None or value == AUTO:
        return value
    number = value.strip() if isinstance(value, str) else value
    if isinstance(number, str) and number.lstrip("-").isdigit():
        number = int(number)
    if not isinstance(number, int) or isinstance(number, bool):
        raise ValueError(f"--epochs takes a number of epochs or {AUTO!r}, got {value!r}")
    if number < 1:
        raise ValueError(f"--epochs must be >= 1, got {number}")
    return number


@dataclass(frozen=True)
class SeedOptions:
    """``xmr train --seeds``: the run once per seed (:mod:`xmr.train.seeds`). Not an option of
    one run (a sweep's trial is one run), so not a field of :class:`TrainOptions`."""

    seeds: tuple[int, ...] | None = option(
        None,
        "Train once per seed, e.g. 0 1 2 (or 0,1,2): runs <name>-seed<N>, nested in MLflow "
        "under a parent run <name> with every final metric's mean and std over seeds. "
        "Excludes --seed.",
        cli_type=str,
    )

    def __post_init__(self) -> None:
        if isinstance(self.seeds, str):
            object.__setattr__(self, "seeds", parse_seeds(self.seeds))


def parse_seeds(text: str) -> tuple[int, ...]:
    """The seeds of ``--seeds``: integers >= 0, comma-separated, each once.

    >>> parse_seeds("0, 1,2")
    (0, 1, 2)
    >>> parse_seeds("1,1")
    Traceback (most recent call last):
    ValueError: --seeds takes comma-separated integers >= 0, each once, e.g. 0,1,2; got '1,1'
    """
    parts = [part.strip() for part in text.split(",")]
    if all(part.isdigit() for part in parts):
        seeds = tuple(int(part) for part in parts)
        if len(set(seeds)) == len(seeds):
            return seeds
    raise ValueError(
        f"--seeds takes comma-separated integers >= 0, each once, e.g. 0,1,2; got {text!r}"
    )


def check_seed_flags(options: TrainOptions, seeds: SeedOptions) -> None:
    """Refuse ``--seed`` with ``--seeds``.

    Raises:
        ValueError: both given.
    """
    if options.seed is not None and seeds.seeds is not None:
        raise ValueError(
            "--seed and --seeds exclude each other: --seed S trains one run, --seeds S1,S2,... "
            "one per seed"
        )
