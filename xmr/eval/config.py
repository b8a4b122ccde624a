"""What one ``xmr eval`` evaluates: the model, the data, the metric groups and CLIP-clip's
options (:class:`EvalConfig`), and :func:`eval_config`, which builds one from the command's flags.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from xmr.compare.bootstrap import CONFIDENCE, RESAMPLES
from xmr.debias import MI_ESTIMATORS
from xmr.eval.options import EvalOptions
from xmr.fields import check_options, resolve_paths
from xmr.metrics.ranking import check_ks
from xmr.models import TINY_ARCHS, ModelSpec
from xmr.storage import StoragePath, as_path

METRIC_GROUPS = ("recall", "odmap", "bias")
"""What ``--metrics`` may name: Recall@K both ways, ODmAP@K, Bias@K."""


@dataclass(frozen=True)
class EvalConfig:
    """Everything that defines one evaluation (logged as ``data.*``, ``model.*``, ``eval.*``)."""

    model: ModelSpec
    dataset: str = "toyworld"
    data: StoragePath | None = None  # None: the embedded default ToyWorld
    split: str = "test"
    metrics: tuple[str, ...] = METRIC_GROUPS
    bias_split: str | None = None  # None: the world's gender_<split>, else split (GenderDesign)
    bias_classes: tuple[str, ...] | None = None  # None: the world's gender_bias classes
    ks: tuple[int, ...] = (1, 5, 10)
    batch_size: int = 128
    actors: int | None = None  # None: per GPU, else per CPU core (max 4); 2+ batches each
    device: str = "auto"  # auto | cpu | cuda
    seed: int = 0
    bootstrap: int = RESAMPLES  # resamples of the queries for each metric's interval (0: none)
    confidence: float = CONFIDENCE  # the intervals' coverage
    alpha1: float = 0.4
    alpha2: float = 0.8
    alpha3: float = 0.7
    rerank_k: int | None = None  # None: the family's (BLIP: ITM over the top 128/256); 0: off
    clip_m: int = 0  # CLIP-clip: embedding dimensions dropped (0: none)
    mi_estimator: str = "histogram"  # histogram (the reference code's) | ksg (Gao et al. 2017)
    mi_split: str = "train"  # images whose features and gender labels estimate the MI (see
    # xmr.eval.clip: not the scored split, or its labels would pick the dims Bias@K is measured on)
    mi_samples: int = 5000  # at most this many of them (a seeded sample)
    mi_bins: int = 64  # histogram: bins per axis
    mi_sigma: float = 1.0  # histogram: Gaussian smoothing of the joint histogram (in bins)
    mi_neighbors: int = 3  # ksg: k
    clip_renormalize: bool = False  # re-normalise clipped embeddings (the reference does not)

    def __post_init__(self) -> None:
        unknown = set(self.metrics) - set(METRIC_GROUPS)
        if unknown:
            raise ValueError(f"unknown metrics {sorted(unknown)}; choose from {METRIC_GROUPS}")
        check_ks(self.ks)
        check_options(self, EvalOptions)  # the bounds the flags declare (--clip-m >= 0, ...)
        if self.mi_estimator not in MI_ESTIMATORS:
            raise ValueError(
                f"unknown --mi-estimator {self.mi_estimator!r}; choose from {MI_ESTIMATORS}"
            )
        resolve_paths(self)  # Ray workers run in other folders

    @classmethod
    def from_options(cls, options: EvalOptions) -> EvalConfig:
        """The evaluation ``xmr eval``'s options define (reads the checkpoint for its family
        and architecture when they are not given; :func:`eval_config`).

        Raises:
            ValueError / FileNotFoundError: an unknown metric or estimator, a missing or
                unreadable checkpoint (the message names the flag or the file).
        """
        return eval_config(**asdict(options))

    def mi_params(self) -> dict[str, float | int]:
        """Keyword arguments of the chosen estimator (:func:`xmr.debias.mutual_information`)."""
        if self.mi_estimator == "ksg":
            return {"neighbors": self.mi_neighbors}
        return {"bins": self.mi_bins, "sigma": self.mi_sigma}

    def encoding(self) -> EvalConfig:
        """This config with the scoring-only fields (CLIP-clip, the bootstrap) reset: configs
        with the same ``encoding()`` can share one :func:`~xmr.eval.encode.encode`
        (``mi_split`` and ``mi_samples`` are kept: they choose which images are encoded)."""
        return replace(
            self,
            bootstrap=RESAMPLES,
            confidence=CONFIDENCE,
            clip_m=0,
            mi_estimator="histogram",
            mi_bins=64,
            mi_sigma=1.0,
            mi_neighbors=3,
            clip_renormalize=False,
        )

    def params(self) -> dict[str, str]:
        """Namespaced MLflow params."""
        return {
            **self.model.params(),
            "data.dataset": self.dataset,
            "data.root": str(self.data or "default toyworld"),
            "data.split": self.split,
            "eval.metrics": ",".join(self.metrics),
            "eval.bias_split": self.bias_split or "world default",
            "eval.bias_classes": (
                "world default" if self.bias_classes is None else ",".join(self.bias_classes)
            ),
            "eval.ks": ",".join(map(str, self.ks)),
            "eval.batch_size": str(self.batch_size),
            "eval.device": self.device,
            "eval.seed": str(self.seed),
            "eval.bootstrap": str(self.bootstrap),
            "eval.confidence": str(self.confidence),
            "eval.rerank_k": "family default" if self.rerank_k is None else str(self.rerank_k),
            "synth.alpha1": str(self.alpha1),
            "synth.alpha2": str(self.alpha2),
            "synth.alpha3": str(self.alpha3),
            "clip.m": str(self.clip_m),
            "clip.mi_estimator": self.mi_estimator,
            "clip.mi_split": self.mi_split,
            "clip.mi_samples": str(self.mi_samples),
            "clip.mi_params": ",".join(f"{k}={v}" for k, v in self.mi_params().items()),
            "clip.renormalize": str(self.clip_renormalize),
        }


def eval_config(
    *,
    model: str | None = None,
    arch: str | None = None,
    pretrained: str | None = "none",
    checkpoint: StoragePath | str | None = None,
    metrics: str | Sequence[str] = METRIC_GROUPS,
    bias_classes: str | Sequence[str] | None = None,
    **fields: Any,
) -> EvalConfig:
    """An :class:`EvalConfig` from ``xmr eval``'s options (the names of its flags).

    The family and architecture default to the checkpoint's, else ``clip`` and the family's
    tiny architecture (:data:`~xmr.models.TINY_ARCHS`: ``xmr-tiny``, ``xmr-tiny-vgg``...);
    ``pretrained="none"`` (or None) means random init; ``metrics`` and ``bias_classes`` may be
    comma-separated.
    """
    checkpoint = as_path(checkpoint) if checkpoint is not None else None
    if checkpoint is not None and (model is None or arch is None):
        saved = ModelSpec.from_checkpoint(checkpoint)
        model, arch = model or saved.family, arch or saved.arch
    model = model or "clip"
    spec = ModelSpec(
        model,
        arch or TINY_ARCHS.get(model, ""),  # an unknown family is named by check_spec
        None if pretrained in (None, "none") else pretrained,
        checkpoint,
    )
    if isinstance(metrics, str):
        metrics = [m.strip() for m in metrics.split(",") if m.strip()]
    if isinstance(bias_classes, str):
        bias_classes = [c.strip() for c in bias_classes.split(",") if c.strip()]
    classes = None if bias_classes is None else tuple(bias_classes)
    return EvalConfig(model=spec, metrics=tuple(metrics), bias_classes=classes, **fields)
