"""The options of ``xmr eval`` (:class:`EvalOptions`): its flags, their defaults and help.

They resolve to an :class:`~xmr.eval.config.EvalConfig`
(:meth:`~xmr.eval.config.EvalConfig.from_options`): the family and architecture default to the
checkpoint's, the metrics are comma-separated. Importing this module loads neither torch, Ray
nor a command-line library (the command line builds its help from it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from xmr.compare.bootstrap import CONFIDENCE, RESAMPLES
from xmr.data.registry import DATASETS
from xmr.fields import check_options, option, resolve_paths, run_name_option
from xmr.storage import StoragePath


@dataclass(frozen=True)
class EvalOptions:
    """``xmr eval``'s options that define the evaluation, named as its flags (paths absolute).

    These are also the options an eval sweep may set (``xmr tune``).
    """

    dataset: str = option("toyworld", " | ".join(DATASETS))
    data: StoragePath | None = option(
        None, "Dataset folder, a path or s3://…; default: the embedded ToyWorld."
    )
    split: str = option("test", "Split to evaluate.")
    model: str | None = option(
        None, "Model family (see `xmr models`); default: the checkpoint's, or clip."
    )
    arch: str | None = option(
        None,
        "Architecture, e.g. ViT-B-32; default: the checkpoint's, or the family's tiny one "
        "(xmr-tiny, xmr-tiny-vgg, xmr-tiny-blip).",
    )
    pretrained: str = option("none", "Pretrained tag (e.g. openai), or 'none' for random init.")
    checkpoint: StoragePath | None = option(
        None, "Checkpoint to load, a path or s3://… (e.g. xmr-runs/<run>/last.pt)."
    )
    metrics: str = option("recall,odmap,bias", "Comma-separated: recall,odmap,bias.")
    bias_split: str | None = option(
        None,
        "Split whose images and gender-neutral captions Bias@K ranks (default: the ToyWorld's "
        "gender split gender_<split> when it has one, else --split).",
    )
    bias_classes: str | None = option(
        None,
        "Comma-separated classes that each get a Bias@K over the queries mentioning them "
        "(default: the ToyWorld's gender_bias classes; none elsewhere).",
    )
    batch_size: int = option(128, "Encoding batch size.", ge=1)
    actors: int | None = option(
        None, "Encoder actors (default: one per GPU or CPU core, at most one per 2 batches).", ge=1
    )
    device: str = option("auto", "auto | cpu | cuda")
    seed: int = option(0, "Seed for random init, example sampling and the bootstrap.", ge=0)
    bootstrap: int = option(
        RESAMPLES, "Bootstrap resamples of the queries for each metric's interval (0: none).", ge=0
    )
    confidence: float = option(CONFIDENCE, "Coverage of the bootstrap intervals.", gt=0, lt=1)
    clip_m: int = option(0, "CLIP-clip: drop the m dims with the most gender information.", ge=0)
    mi_estimator: str = option(
        "histogram", "histogram (the reference code's) | ksg (Gao et al. 2017)"
    )
    mi_split: str = option(
        "train",
        "Split whose images estimate the MI (not the scored one: its labels would leak).",
    )
    mi_samples: int = option(5000, "At most this many MI images.", ge=2)
    mi_bins: int = option(64, "histogram: bins per axis.", ge=2)
    mi_sigma: float = option(1.0, "histogram: Gaussian smoothing (bins).", ge=0)
    mi_neighbors: int = option(3, "ksg: neighbours k.", ge=1)
    clip_renormalize: bool = option(
        False, "L2-normalise the clipped embeddings (the reference does not)."
    )

    def __post_init__(self) -> None:
        check_options(self)
        resolve_paths(self)


BENCHMARK_NAMES = ("aro", "sugarcrepe", "toyworld-binding")
"""The values of ``--benchmark`` (:data:`xmr.eval.benchmark.BENCHMARKS`)."""


@dataclass(frozen=True)
class BenchmarkOptions:
    """``xmr eval --benchmark``: score a compositional benchmark read from ``--data`` instead of
    a retrieval split (the model options are ``xmr eval``'s)."""

    benchmark: str | None = option(
        None,
        "aro | sugarcrepe | toyworld-binding: score this benchmark, read from --data (for "
        "toyworld-binding a world with a binding test), instead of a split.",
    )
    subset: str = option(
        "all", "ARO: vg-relation | vg-attribution | coco-order | flickr-order | all."
    )
    images: Path | None = option(
        None, "SugarCrepe: the COCO val2017 images (default: DATA/val2017)."
    )
    strict: bool = option(
        False,
        "--benchmark: stop at the first bad item (an image missing, unreadable or named "
        "outside the images folder, an empty caption), naming its file and item, instead of "
        "skipping it and scoring the rest.",
    )

    def __post_init__(self) -> None:
        check_options(self)
        if self.strict and self.benchmark is None:
            raise ValueError("--strict applies to --benchmark (a split's bad images are skipped)")
        if self.benchmark is not None and self.benchmark not in BENCHMARK_NAMES:
            raise ValueError(
                f"--benchmark must be one of {', '.join(BENCHMARK_NAMES)}, got {self.benchmark!r}"
            )
        if self.benchmark == "aro":
            from xmr.benchmarks import aro_subsets

            try:
                aro_subsets(self.subset)
            except ValueError as exc:
                raise ValueError(f"--subset: {exc}") from None
        resolve_paths(self)


@dataclass(frozen=True)
class EvalOutputOptions:
    """Where ``xmr eval`` reports besides the console: a JSON file and the MLflow run's name."""

    output: Path | None = option(None, "Also write the metrics JSON here.", output=True)
    run_name: str | None = run_name_option()

    def __post_init__(self) -> None:
        resolve_paths(self)
