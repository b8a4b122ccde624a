"""What defines one training run: :class:`TrainConfig`, with per-family defaults from the papers.

Defaults (odmap paper §4.1 for VSE++, CLIP and BLIP; EI-CLIP paper §4 for EI-CLIP) apply to any
field the user leaves unset. On ToyWorld without pretrained weights the small ``TOYWORLD``
presets apply instead: tiny architectures trained from scratch on CPU in minutes, where the
papers' finetuning learning rates would barely move random weights. With the toy CLIP
(``--pretrained toy``, :mod:`xmr.models.toy_clip`) the ``TOY_FINETUNE`` presets apply: the
papers' regime, a pretrained CLIP finetuned, at the toy model's scale.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from xmr.fields import check_options, resolve_paths
from xmr.models import TINY_ARCHS, TOY_ARCH, TOY_TAG, ModelSpec
from xmr.models.losses import LossConfig
from xmr.storage import StoragePath, storage_path
from xmr.train.convergence import AUTO, Convergence
from xmr.train.options import DEFAULT_STORAGE, TrainOptions
from xmr.train.precision import check_precision

OPTIMIZERS = ("adam", "adamw")
SCHEDULES = ("step", "cosine", "constant")


@dataclass(frozen=True)
class OptimConfig:
    """Optimiser and learning-rate schedule (logged as ``optim.*``).

    ``step``: multiply the rate by ``gamma`` every ``step_epochs`` epochs (fractions allowed:
    BLIP halves it every half epoch), or every ``step_period`` optimiser steps when set (a
    control matched to another run's steps takes that run's period, so both follow one
    learning-rate path step by step, whatever their epochs' lengths); ``cosine``: anneal to 0
    over the run. Both after ``warmup_steps`` of linear warm-up.
    """

    name: str = "adam"
    lr: float = 1e-4
    weight_decay: float = 0.0
    schedule: str = "step"
    step_epochs: float = 2.0
    gamma: float = 0.5
    warmup_steps: int = 0
    step_period: int | None = None  # optimiser steps per ``gamma``; None: step_epochs' steps

    def __post_init__(self) -> None:
        if self.step_period is not None and self.step_period < 1:
            raise ValueError(f"--lr-step-period must be >= 1, got {self.step_period}")
        if self.name not in OPTIMIZERS:
            raise ValueError(f"optimizer {self.name!r} is not one of {', '.join(OPTIMIZERS)}")
        if self.schedule not in SCHEDULES:
            choices = ", ".join(SCHEDULES)
            raise ValueError(f"--lr-schedule {self.schedule!r} is not one of {choices}")
        if self.lr <= 0:
            raise ValueError(f"--lr must be > 0, got {self.lr}")


@dataclass(frozen=True)
class FamilyDefaults:
    """A family's default architecture, epochs, global batch size, optimiser and loss.

    ``max_violation``: VSE++'s hardest negative; from random weights it collapses (every score
    equal), so the ToyWorld preset sums over negatives instead (VSE0).
    """

    arch: str
    pretrained: str | None
    epochs: int
    batch_size: int
    optim: OptimConfig
    max_violation: bool = True


PAPER_DEFAULTS: dict[str, FamilyDefaults] = {
    "vsepp": FamilyDefaults("vgg19", "IMAGENET1K_V1", 10, 256, OptimConfig("adam", 1e-4)),
    "clip": FamilyDefaults("ViT-B-32", "openai", 10, 256, OptimConfig("adam", 2e-6)),
    "blip": FamilyDefaults(
        "blip-itm-base-coco", "hub", 2, 16, OptimConfig("adamw", 1e-5, step_epochs=0.5)
    ),
    "eiclip": FamilyDefaults(
        "ViT-B-32",
        "openai",
        20,
        128,
        OptimConfig("adam", 5e-5, weight_decay=1e-4, schedule="cosine", warmup_steps=1000),
    ),
}
"""The papers' finetuning recipes (odmap §4.1; EI-CLIP §4 implementation details)."""

TOYWORLD: dict[str, FamilyDefaults] = {
    "vsepp": FamilyDefaults(
        TINY_ARCHS["vsepp"], None, 8, 128, OptimConfig("adam", 2e-4), max_violation=False
    ),
    "clip": FamilyDefaults(TINY_ARCHS["clip"], None, 8, 128, OptimConfig("adam", 5e-4)),
    "blip": FamilyDefaults(TINY_ARCHS["blip"], None, 4, 64, OptimConfig("adamw", 2e-4)),
    "eiclip": FamilyDefaults(
        TINY_ARCHS["eiclip"],
        None,
        8,
        128,
        OptimConfig("adam", 5e-4, weight_decay=1e-4, schedule="cosine", warmup_steps=50),
    ),
}
"""From-scratch presets for ToyWorld on a laptop CPU (tiny architectures, higher rates)."""

TOY_FINETUNE: dict[str, FamilyDefaults] = {
    "clip": FamilyDefaults(TOY_ARCH, TOY_TAG, 2, 128, OptimConfig("adam", 1e-4)),
    "eiclip": FamilyDefaults(
        TOY_ARCH,
        TOY_TAG,
        2,
        128,
        OptimConfig("adam", 1e-4, weight_decay=1e-4, schedule="cosine", warmup_steps=50),
    ),
}
"""Finetuning the toy CLIP (``--pretrained toy``): the CLIP families only (it is a CLIP), each
with its paper's schedule (``clip``: ×0.5 every 2 epochs, odmap §4.1; ``eiclip``: cosine after a
warm-up, EI-CLIP §4) at the toy model's rate. Halving every epoch instead stopped a converged
CLIP on the shop world at val RSUM 261, where the cosine recipe passed 400: the rate ran out
before the model had learned what it could."""


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run (the run name defaults to its hash).

    ``batch_size`` is global: each of the ``workers`` data-parallel workers takes
    ``batch_size // workers`` pairs per step, in ``accum_steps`` micro-batches; neither the
    workers nor the accumulation change the objective (the loss sees the global batch), so
    both are left out of the run's hash, like the other runtime fields. ``model.checkpoint``
    (``--init``) is the checkpoint training starts from. Paths are made absolute (the Ray
    Train workers run in other folders); ``storage``, ``synth`` and the checkpoint may be
    object-store URIs (:class:`~xmr.storage.ObjectPath`). Values are checked against the
    bounds :class:`TrainOptions` declares.

    ``steps`` (``--steps``) fixes the run's length in optimiser steps: training stops after
    that many, the last epoch cut short, and :func:`~xmr.train.run.train` sets ``epochs`` to
    the epochs they need, ``ceil(steps / steps per epoch)`` (steps per epoch depend on the
    data); ``None``: ``epochs`` full epochs.

    ``convergence`` (``--epochs auto``) trains until the validation score levels off
    (:mod:`xmr.train.convergence`); ``epochs`` is then its ``max_epochs``, and the run
    evaluates every ``eval_every`` epochs (at least 1), which then enters the run's hash.
    """

    model: ModelSpec
    epochs: int
    batch_size: int
    optim: OptimConfig
    steps: int | None = None  # total optimiser steps (None: epochs × steps per epoch)
    convergence: Convergence | None = None  # --epochs auto: stop on a plateau of val RSUM
    dataset: str = "toyworld"
    data: StoragePath | None = None  # None: the embedded default ToyWorld
    split: str = "train"
    synth: StoragePath | None = None  # a finished D′ build (`xmr synth --out`)
    synth_ratio: float | None = None  # |D′ sample| / |D|; None: all of D′
    hard_negatives: bool = True  # a BiAug D′'s pairs share a batch (xmr.train.batching)
    synth_only: bool = False  # train on the D′ sample alone (the ablation "D′ without D")
    loss: LossConfig = field(default_factory=LossConfig)
    seed: int = 0
    eval_every: int = 0  # evaluate on eval_split every N epochs (0: only at the end)
    eval_split: str = "val"
    test_split: str = "test"
    ks: tuple[int, ...] = (1, 5, 10)
    precision: str = "fp32"  # fp32 | bf16 | amp (xmr.train.precision)
    accum_steps: int = 1  # micro-batches per optimiser step (xmr.train.accumulate)
    workers: int = 1
    gpus_per_worker: float = 0.0
    cpus_per_worker: int = 1
    loaders: int = 0  # Ray Data actors decoding batches ahead; 0: as many as the nodes spare
    loader_cpus: float = 0.0  # CPUs each loader actor reserves
    max_failures: int = 2
    name: str = ""  # "" -> family-arch-dataset-<config hash>
    storage: StoragePath = DEFAULT_STORAGE

    def __post_init__(self) -> None:
        check_options(self, TrainOptions)
        if self.batch_size < 2 * self.workers * self.accum_steps:
            raise ValueError(
                f"--batch-size {self.batch_size} leaves fewer than 2 pairs per micro-batch "
                f"({self.workers} workers × --accum-steps {self.accum_steps})"
            )
        check_precision(self.precision)
        if self.epochs < 1:
            raise ValueError(f"--epochs must be >= 1, got {self.epochs}")
        if self.convergence is not None:
            if self.steps is not None:
                raise ValueError("--steps and --epochs auto exclude each other")
            if self.epochs != self.convergence.max_epochs or self.eval_every < 1:
                raise ValueError(
                    "--epochs auto trains up to --max-epochs and evaluates every --eval-every "
                    f"(>= 1) epochs; got epochs {self.epochs}, eval_every {self.eval_every}"
                )
        if self.synth_ratio is not None and self.synth is None:
            raise ValueError("--synth-ratio needs --synth (a D′ folder from `xmr synth`)")
        if not self.hard_negatives and self.synth is None:
            raise ValueError("--no-hard-negatives needs --synth (a BiAug D′ from `xmr synth`)")
        if self.synth_only and self.synth is None:
            raise ValueError("--synth-only needs --synth (a D′ folder from `xmr synth`)")
        resolve_paths(self)
        if not self.name:
            object.__setattr__(self, "name", self.default_name())

    @property
    def per_worker_batch(self) -> int:
        return self.batch_size // self.workers

    @property
    def micro_batch(self) -> int:
        """Pairs each worker encodes at a time: ``per_worker_batch / accum_steps``."""
        return self.per_worker_batch // self.accum_steps

    def total_steps(self, steps_per_epoch: int) -> int:
        """Optimiser steps of the whole run: ``steps``, else ``epochs × steps_per_epoch``."""
        return self.epochs * steps_per_epoch if self.steps is None else self.steps

    def steps_in_epoch(self, epoch: int, steps_per_epoch: int) -> int:
        """Optimiser steps of epoch ``epoch`` (0-based): ``steps_per_epoch``, fewer in a last
        epoch that ``steps`` cuts short.

        >>> config = resolve_config("clip", steps=25)
        >>> [config.steps_in_epoch(epoch, 10) for epoch in range(3)]
        [10, 10, 5]
        """
        return min(steps_per_epoch, self.total_steps(steps_per_epoch) - epoch * steps_per_epoch)

    def fingerprint(self, *, seeded: bool = True) -> str:
        """Hash of what decides the trained weights (not where or how fast it runs).

        ``optim.step_period`` enters only when set, ``hard_negatives`` only when off,
        ``synth_only`` only when on, ``precision`` only when not fp32, the loss's
        ``fair_captions`` and ``max_violation_after`` only when not their defaults, ``steps``
        only when set (then ``epochs``, which follows from it, does not) and ``convergence``
        only when set (with ``eval_every``, which decides where it stops), so runs named
        before the flags existed keep their names. ``seeded`` False: without the seed, the
        hash of a group of runs over seeds (``--seeds``).
        """
        keep = {k: v for k, v in self.to_dict().items() if k not in _RUNTIME_FIELDS}
        for key, default in (("fair_captions", "neutral"), ("max_violation_after", 0)):
            if keep["loss"].get(key) == default:  # runs named before these loss fields
                del keep["loss"][key]
        if keep["optim"]["step_period"] is None:  # runs named before the field
            del keep["optim"]["step_period"]
        if self.convergence is None:
            del keep["convergence"]
        else:
            keep["eval_every"] = self.eval_every
        if self.hard_negatives:
            del keep["hard_negatives"]
        if not self.synth_only:
            del keep["synth_only"]
        if self.precision == "fp32":
            del keep["precision"]
        if self.steps is None:
            del keep["steps"]
        else:
            del keep["epochs"]
        if not seeded:
            del keep["seed"]
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:8]

    def default_name(self, *, seeded: bool = True) -> str:
        """``family-arch-dataset-<fingerprint>``; ``seeded`` False: the default name of a
        ``--seeds`` group (:meth:`fingerprint` without the seed)."""
        arch = self.model.arch.replace("/", "_")
        return f"{self.model.family}-{arch}-{self.dataset}-{self.fingerprint(seeded=seeded)}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (paths as strings), the inverse of :meth:`from_dict`."""
        data = asdict(self)
        data["model"] = self.model.to_dict()
        for key in ("data", "synth", "storage"):
            data[key] = None if data[key] is None else str(data[key])
        data["ks"] = list(self.ks)
        return data

    @classmethod
    def from_options(cls, options: TrainOptions) -> TrainConfig:
        """The run ``xmr train``'s options define, with the family's defaults for the unset
        ones (:func:`resolve_config`).

        Raises:
            ValueError: an unknown family, or values that contradict each other.
        """
        fields = {**asdict(options), "name": options.name or "", "seed": options.seed or 0}
        return resolve_config(fields.pop("model"), **fields)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        data = dict(data)
        data["model"] = ModelSpec(**data["model"])
        data["optim"] = OptimConfig(**data["optim"])
        data["loss"] = LossConfig(**data["loss"])
        if data.get("convergence") is not None:  # absent in records older than the field
            data["convergence"] = Convergence(**data["convergence"])
        for key in ("data", "synth", "storage"):
            data[key] = None if data[key] is None else storage_path(data[key])
        data["ks"] = tuple(data["ks"])
        return cls(**data)

    def params(self) -> dict[str, str]:
        """Namespaced MLflow params (``model.*``, ``loss.*``, ``optim.*``, ``data.*``, ...)."""
        return {
            **self.model.params(),
            **self.loss.params(),
            **{f"optim.{k}": _param(v) for k, v in asdict(self.optim).items()},
            "data.dataset": self.dataset,
            "data.root": str(self.data or "default toyworld"),
            "data.split": self.split,
            "data.synth": str(self.synth or "none"),
            "data.synth_ratio": "all" if self.synth_ratio is None else str(self.synth_ratio),
            "data.hard_negatives": str(self.hard_negatives),
            "data.synth_only": str(self.synth_only),
            "train.epochs": str(self.epochs) if self.convergence is None else AUTO,
            **(self.convergence.params() if self.convergence is not None else {}),
            "train.steps": "none" if self.steps is None else str(self.steps),
            "train.batch_size": str(self.batch_size),
            "train.precision": self.precision,
            "train.workers": str(self.workers),
            "train.accum_steps": str(self.accum_steps),
            "train.gpus_per_worker": str(self.gpus_per_worker),
            "train.seed": str(self.seed),
            "train.eval_every": str(self.eval_every),
            "train.name": self.name,
        }


def _param(value: Any) -> str:
    """A param's text: ``"none"`` for an unset value."""
    return "none" if value is None else str(value)


_RUNTIME_FIELDS = {"workers", "gpus_per_worker", "cpus_per_worker", "max_failures", "name",
                   "storage", "eval_every", "accum_steps", "loaders", "loader_cpus"}  # fmt: skip


def resolve_config(
    family: str,
    *,
    arch: str | None = None,
    pretrained: str | None = None,
    init: StoragePath | None = None,
    epochs: int | str | None = None,
    patience: int | None = None,
    min_delta: float | None = None,
    max_epochs: int | None = None,
    steps: int | None = None,
    batch_size: int | None = None,
    lr: float | None = None,
    weight_decay: float | None = None,
    lr_schedule: str | None = None,
    warmup_steps: int | None = None,
    lr_step_period: int | None = None,
    fair_alpha: float = 0.0,
    fair_captions: str = "neutral",
    max_violation: bool | None = None,
    max_violation_after: int = 0,
    dataset: str = "toyworld",
    **fields: Any,
) -> TrainConfig:
    """A :class:`TrainConfig` with the family's defaults for every unset (None) field.

    On ToyWorld with no ``pretrained`` tag given, the :data:`TOYWORLD` presets apply; with the
    toy CLIP's tag, :data:`TOY_FINETUNE`; otherwise :data:`PAPER_DEFAULTS`.
    ``pretrained="none"`` forces random init. A value given, zero included, is kept (and
    refused when out of bounds), never replaced by the default.
    ``steps`` and ``epochs`` exclude each other (the steps decide the epochs); ``epochs``
    ``"auto"`` trains to convergence, stopped by ``patience``, ``min_delta`` and
    ``max_epochs`` (:class:`~xmr.train.convergence.Convergence`'s defaults for those unset),
    evaluating every epoch unless ``eval_every`` says otherwise.
    """
    if steps is not None and epochs is not None:
        raise ValueError(
            "--steps and --epochs exclude each other: --steps N trains N optimiser steps, "
            "over the epochs they need"
        )
    stopping = {"patience": patience, "min_delta": min_delta, "max_epochs": max_epochs}
    given = {key: value for key, value in stopping.items() if value is not None}
    convergence = None
    if epochs == AUTO:
        convergence = Convergence(**given)
        epochs = convergence.max_epochs
        fields["eval_every"] = fields.get("eval_every") or 1
    elif given:
        flags = ", ".join(f"--{key.replace('_', '-')}" for key in given)
        verb = "applies" if len(given) == 1 else "apply"
        raise ValueError(f"{flags} {verb} to --epochs auto (training to convergence)")
    table = _presets(dataset, pretrained)
    if family not in table:
        if family in PAPER_DEFAULTS:  # a family the toy CLIP is not
            raise ValueError(
                f"--pretrained {TOY_TAG} is the toy CLIP: it finetunes the families "
                f"{', '.join(sorted(table))}, not {family}"
            )
        raise ValueError(f"unknown model family {family!r}; choose from {sorted(table)}")
    defaults = table[family]
    spec = ModelSpec(
        family,
        defaults.arch if arch is None else arch,
        defaults.pretrained if pretrained is None else pretrained,
        init,
    )
    given_optim = {"lr": lr, "weight_decay": weight_decay, "schedule": lr_schedule,
                   "warmup_steps": warmup_steps, "step_period": lr_step_period}  # fmt: skip
    optim = replace(defaults.optim, **{k: v for k, v in given_optim.items() if v is not None})
    if max_violation is None:  # a warm-up asks for the hardest negative after it
        max_violation = True if max_violation_after else defaults.max_violation
    if dataset == "fashiongen":  # its test set is not public: the papers test on validation
        fields.setdefault("eval_split", "validation")
        fields.setdefault("test_split", "validation")
    return TrainConfig(
        model=spec,
        loss=LossConfig(
            fair_alpha=fair_alpha,
            max_violation=max_violation,
            fair_captions=fair_captions,
            max_violation_after=max_violation_after,
        ),
        epochs=defaults.epochs if epochs is None else epochs,
        steps=steps,
        convergence=convergence,
        batch_size=defaults.batch_size if batch_size is None else batch_size,
        optim=optim,
        dataset=dataset,
        **fields,
    )


def _presets(dataset: str, pretrained: str | None) -> dict[str, FamilyDefaults]:
    """The defaults table: :data:`TOY_FINETUNE` for the toy CLIP, :data:`TOYWORLD` on ToyWorld
    with no tag, else :data:`PAPER_DEFAULTS`."""
    if pretrained == TOY_TAG:
        return TOY_FINETUNE
    return PAPER_DEFAULTS if dataset != "toyworld" or pretrained is not None else TOYWORLD
