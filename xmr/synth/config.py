"""What defines one D′ build: :class:`SynthConfig` (hashed, output-defining) and
:class:`SynthRuntime` (where and how fast it runs; never changes the output).

A YAML file (``--config``) holds the fields of either class by name; command-line flags override
it. The config hash keys the output folder: a rerun with the same hash resumes, another hash is
refused. Each field declares its flag's help and bounds (:func:`xmr.fields.option`): the
``xmr synth`` command is built from these two classes (:mod:`xmr.synth.command`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from xmr import __version__
from xmr.biaug import ProposalFilter
from xmr.biaug.validation import normalise_name
from xmr.data.registry import DATASETS, check_data_root
from xmr.detection import DEFAULT_DETECTOR, DETECTOR_BACKENDS, check_detector
from xmr.fields import (
    address_option,
    check_options,
    load_yaml,
    option,
    parameter_names,
    resolve_paths,
    tracking_uri_option,
)
from xmr.llm import LLMSpec
from xmr.pretrained import local_model_dir
from xmr.removal.fill import FILL_METHODS
from xmr.removal.sd_inpaint import DEFAULT_SD_MODEL
from xmr.storage import STORAGE_ENV, StoragePath, default_output
from xmr.synth.removal.captions import CAPTION_METHODS, DEFAULT_CAPTIONER

MODES = ("removal", "biaug")
BOX_SOURCES = ("gt", "groundingdino")
BIAUG_FILLS = ("sd", "render")
"""``--mode biaug`` fills: Stable Diffusion inpainting with the attributive phrase, or (ToyWorld
only) the world's own renderer re-drawing the object in the named colour."""
BIAUG_ATTRIBUTES = ("color", "shape", "material", "other")
REMOVAL_ONLY = ("alpha1", "alpha2", "alpha3", "caption", "captioner_model")
"""Fields that ``--mode biaug`` ignores (left out of its config hash)."""
BIAUG_ONLY = (
    "mode", "max_objects", "attributes", "min_box_share", "max_box_share", "max_overlap",
    "filter_confidence", "min_confidence", "llm_max_tokens", "object_vocabulary",
)  # fmt: skip
"""Fields that the removal mode ignores (left out of its config hash, which they predate)."""
DEFAULT_OUT = Path("xmr-synth")
"""Where builds go by default: ``<dataset>-<split>`` inside, under ``$XMR_STORAGE`` when set,
else in the working directory."""


@dataclass(frozen=True)
class SynthConfig:
    """Everything that decides which rows D′ has and what is in them.

    ``mode``: ``removal`` (odmap paper: remove co-occurring objects and rewrite the caption) or
    ``biaug`` (BiAug paper: an LLM proposes objects, the detector verifies them, the LLM writes
    attribute phrases and hard negatives, inpainting edits the object). ``captions_per_image``
    is how many captions of an image each removal plan (or BiAug source example) uses (the
    papers use 1; ``None`` means all of them).
    """

    mode: str = option("removal", " | ".join(MODES))
    dataset: str = option("toyworld", " | ".join(DATASETS))
    data: StoragePath | None = option(
        None, "Dataset folder, a path or s3://…; default: the embedded ToyWorld."
    )
    split: str = option("train", "Split to synthesize from.")
    limit: int | None = option(None, "Only the first N images (by image id).", ge=1)
    alpha1: float = option(0.4, "Max share of a kept class hidden.", gt=0, le=1)
    alpha2: float = option(
        0.8, "Share hidden under a removed class that removes it too.", gt=0, le=1
    )
    alpha3: float = option(0.7, "Max removed share of the image.", gt=0, le=1)
    captions_per_image: int | None = option(
        1, "Captions paired with each removal: N or 'all'.", ge=1, cli_type=str
    )
    seed: int = option(0, "Seed of every random choice.", ge=0)
    fill: str | None = option(
        None,
        f"removal: {' | '.join(FILL_METHODS)} (default telea); "
        f"biaug: {' | '.join(BIAUG_FILLS)} (default sd).",
    )
    sd_model: str = option(DEFAULT_SD_MODEL, "Stable Diffusion inpainting repo id or local folder.")
    sd_steps: int = option(25, "Diffusion steps.", ge=1)
    sd_guidance: float = option(7.5, "Guidance scale.")
    sd_resolution: int = option(512, "SD working size in px (a multiple of 8).", ge=8)
    caption: str = option("np-removal", " | ".join(CAPTION_METHODS))
    captioner_model: str = option(DEFAULT_CAPTIONER, "Image-captioning repo id or local folder.")
    boxes: str | None = option(
        None,
        "gt (annotations) | groundingdino (detections); default gt for removal, groundingdino "
        "for biaug (where gt confirms the LLM's proposals from the annotations).",
    )
    detector_model: str = option(DEFAULT_DETECTOR, "GroundingDINO repo id or local folder.")
    box_threshold: float = option(0.35, "Detection score threshold.", gt=0, lt=1)
    text_threshold: float = option(0.25, "Phrase score threshold.", gt=0, lt=1)
    rows_per_shard: int = option(256, "Rows per Parquet shard.", ge=1)
    detector: str = option("hf", f"Detector implementation: {' | '.join(DETECTOR_BACKENDS)}.")
    max_objects: int = option(5, "biaug: objects the LLM proposes per caption.", ge=1, le=20)
    attributes: str | None = option(
        None,
        f"biaug: attribute categories, comma-separated (default {','.join(BIAUG_ATTRIBUTES)}; "
        "color with --fill render).",
    )
    min_box_share: float = option(
        0.05, "biaug: drop boxes smaller than this share of the image.", gt=0, lt=1
    )
    max_box_share: float = option(
        0.8, "biaug: drop boxes larger than this share of the image.", gt=0, le=1
    )
    max_overlap: float = option(
        0.7, "biaug: drop an object whose box covers more of a kept one's box.", gt=0, le=1
    )
    filter_confidence: bool = option(
        False, "biaug: keep only detections scoring above --min-confidence (the paper's filter)."
    )
    min_confidence: float = option(
        0.9, "biaug: the score --filter-confidence asks for.", gt=0, lt=1
    )
    llm_max_tokens: int = option(1024, "biaug: the longest LLM answer, in tokens.", ge=16)
    object_vocabulary: Path | None = option(
        None,
        "biaug: a text file of object names, one per line: proposals naming another object are "
        "dropped (validation:object_vocabulary).",
    )

    def __post_init__(self) -> None:
        if self.fill is None:
            object.__setattr__(self, "fill", "sd" if self.mode == "biaug" else "telea")
        if self.boxes is None:
            object.__setattr__(self, "boxes", "groundingdino" if self.mode == "biaug" else "gt")
        fills = BIAUG_FILLS if self.mode == "biaug" else FILL_METHODS
        choices = {
            "mode": (self.mode, MODES),
            "dataset": (self.dataset, tuple(DATASETS)),
            "fill": (self.fill, fills),
            "caption": (self.caption, CAPTION_METHODS),
            "boxes": (self.boxes, BOX_SOURCES),
            "detector": (self.detector, DETECTOR_BACKENDS),
        }
        for name, (value, allowed) in choices.items():
            if value not in allowed:
                mode = f" with --mode {self.mode}" if name == "fill" else ""
                raise ValueError(f"--{name} {value!r} is not one of {', '.join(allowed)}{mode}")
        check_options(self)
        for name in ("sd_model", "captioner_model"):
            try:
                local_model_dir(getattr(self, name))
            except FileNotFoundError as exc:
                raise FileNotFoundError(f"--{name.replace('_', '-')}: {exc}") from exc
        try:
            check_detector(self.detector, self.detector_model)
        except (FileNotFoundError, ValueError, ModuleNotFoundError) as exc:
            raise type(exc)(f"--detector-model: {exc}") from exc
        resolve_paths(self)
        check_data_root(self.dataset, self.data)
        if self.sd_resolution % 8:
            raise ValueError(f"--sd-resolution must be a multiple of 8, got {self.sd_resolution}")
        if self.mode == "biaug":
            self._check_biaug()

    def _check_biaug(self) -> None:
        categories = self.attribute_categories()
        unknown = sorted(set(categories) - set(BIAUG_ATTRIBUTES))
        if unknown or not categories or len(set(categories)) != len(categories):
            raise ValueError(
                f"--attributes {self.attributes!r}: give distinct categories of "
                f"{', '.join(BIAUG_ATTRIBUTES)}"
            )
        if self.fill == "render":
            if self.dataset != "toyworld":
                raise ValueError(
                    "--fill render re-draws ToyWorld objects: it needs --dataset toyworld"
                )
            if categories != ("color",):
                raise ValueError("--fill render draws colours only: use --attributes color")
        if self.min_box_share >= self.max_box_share:
            raise ValueError(
                f"--min-box-share {self.min_box_share} must be below --max-box-share "
                f"{self.max_box_share}"
            )
        self.proposal_filter()

    def proposal_filter(self) -> ProposalFilter:
        """The §4.1 filters these options set (``--filter-confidence``: the paper's optional
        confidence filter)."""
        return ProposalFilter(
            min_area_share=self.min_box_share,
            max_area_share=self.max_box_share,
            max_overlap=self.max_overlap,
            min_confidence=self.min_confidence if self.filter_confidence else None,
        )

    def attribute_categories(self) -> tuple[str, ...]:
        """``--attributes`` as a tuple; by default all four, or color with ``--fill render``."""
        if self.attributes is None:
            return ("color",) if self.fill == "render" else BIAUG_ATTRIBUTES
        return tuple(part.strip() for part in self.attributes.split(",") if part.strip())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (paths as strings)."""
        data = asdict(self)
        data["data"] = None if self.data is None else str(self.data)
        vocabulary = self.object_vocabulary
        data["object_vocabulary"] = None if vocabulary is None else str(vocabulary)
        return data

    def object_names(self) -> frozenset[str] | None:
        """``--object-vocabulary``'s names, normalised (:func:`~xmr.biaug.validation.
        normalise_name`); None without one. Read in the driver, where the path is.

        Raises:
            ValueError: the file cannot be read or names no object (the message names the
                flag and the file).
        """
        if self.object_vocabulary is None:
            return None
        try:
            lines = self.object_vocabulary.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--object-vocabulary {self.object_vocabulary}: {exc}") from None
        names = frozenset(filter(None, (normalise_name(line) for line in lines)))
        if not names:
            raise ValueError(f"--object-vocabulary {self.object_vocabulary} names no object")
        return names

    def fingerprint(self) -> str:
        """Hash of everything that decides the output: the fields but the data folder's
        location (the data's content is hashed separately), and the package version."""
        data = self.to_dict()
        data.pop("data")
        if self.object_vocabulary is None:
            data.pop("object_vocabulary")  # the hashes predate it
        else:  # the names, not where the file is
            data["object_vocabulary"] = sorted(self.object_names() or ())
        for name in REMOVAL_ONLY if self.mode == "biaug" else BIAUG_ONLY:
            data.pop(name, None)
        if self.mode == "removal" and self.detector == "hf":
            data.pop("detector")  # the removal mode's hashes predate --detector
        if self.mode == "biaug" and self.boxes == "groundingdino":
            data.pop("boxes")  # the biaug mode's hashes predate --boxes gt there
        data["xmr_version"] = __version__
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class SynthRuntime:
    """Where and how the build runs. Actor counts of ``None`` are chosen from the cluster."""

    out: StoragePath | None = option(
        None,
        "Output folder: a local or shared path, or s3://bucket/folder "
        f"(default ./{DEFAULT_OUT}/<dataset>-<split>, or ${STORAGE_ENV}/{DEFAULT_OUT}/... when "
        f"{STORAGE_ENV} is set).",
        output=True,
    )
    address: str | None = address_option()
    num_cpus: int | None = option(None, "CPUs for a local Ray.", ge=1)
    plan_actors: int | None = option(None, "Planning actors.", ge=1)
    detect_actors: int | None = option(None, "Detection actors.", ge=1)
    fill_actors: int | None = option(None, "Fill actors.", ge=1)
    caption_actors: int | None = option(None, "Caption actors.", ge=1)
    llm_actors: int | None = option(
        None, "biaug: actors of each LLM stage (vllm: engine replicas).", ge=1
    )
    gpus_per_actor: float = option(
        1.0, "GPUs per actor of a GPU stage (sd, captioner).", gt=0, le=8
    )
    batch_size: int = option(32, "Rows per batch.", ge=1)
    max_error_rate: float = option(
        0.01, "Exit non-zero above this share of failed rows.", ge=0, le=1
    )
    retry_errors: bool = option(
        True,
        "A rerun into the same --out asks again what failed transiently before (rate limits, "
        "5xx, timeouts, out of memory, lost actors); --no-retry-errors keeps those errors.",
    )
    progress: bool = option(True, "Progress bars.")
    tracking_uri: str | None = tracking_uri_option()
    run_name: str | None = option(None, "MLflow run name (default: the --out folder's name).")
    log_mlflow: bool = option(True, "Log the build to MLflow.", flag="mlflow")

    def __post_init__(self) -> None:
        check_options(self)
        resolve_paths(self)


def _coerce(name: str, value: Any) -> Any:
    if name == "captions_per_image" and isinstance(value, str):
        return parse_captions_per_image(value)
    return value


def parse_captions_per_image(value: str | int | None) -> int | None:
    """``"all"`` -> None (every caption), else a positive integer."""
    if value is None or value == "all":
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise ValueError(
            f"--captions-per-image must be a positive integer or 'all', got {value!r}"
        ) from exc


def load_configs(path: Path | None, overrides: dict[str, Any]) -> tuple[SynthConfig, SynthRuntime]:
    """Build both configs from an optional YAML file and explicit overrides (None = not given).

    Raises:
        ValueError: bad YAML or an unknown key in the file, or an invalid value (the message
            names the file or the flag).
        FileNotFoundError: ``path`` does not exist.
    """
    values: dict[str, Any] = {}
    if path is not None:
        if not Path(path).is_file():
            raise FileNotFoundError(f"config file {path} does not exist")
        loaded = load_yaml(Path(path).read_text(), str(path)) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: expected a mapping of option names to values")
        values.update({str(k).replace("-", "_"): v for k, v in loaded.items()})
    values.update({k: v for k, v in overrides.items() if v is not None})
    config_names = {f.name for f in fields(SynthConfig)}
    runtime_names = {f.name for f in fields(SynthRuntime)}
    llm_names = set(parameter_names(LLMSpec).values())  # read by load_llm_spec
    unknown = set(values) - config_names - runtime_names - llm_names
    if unknown:
        where = f"{path}: " if path else ""
        raise ValueError(f"{where}unknown option(s) {', '.join(sorted(unknown))}")
    values = {k: _coerce(k, v) for k, v in values.items()}
    config = SynthConfig(**{k: v for k, v in values.items() if k in config_names})
    runtime = SynthRuntime(**{k: v for k, v in values.items() if k in runtime_names})
    if runtime.out is None:
        runtime = replace(
            runtime, out=default_output(DEFAULT_OUT / f"{config.dataset}-{config.split}")
        )
    if runtime.run_name is None:
        runtime = replace(runtime, run_name=runtime.out.name)
    return config, runtime


def load_llm_spec(path: Path | None, overrides: dict[str, Any]) -> LLMSpec:
    """The LLM of a ``--mode biaug`` build: the ``llm*`` keys of the YAML file at ``path``
    (named as the flags are: ``llm_model``), then ``overrides`` (field names; None = not
    given). Raises ValueError naming the flag for a bad value."""
    names = parameter_names(LLMSpec)
    values: dict[str, Any] = {}
    if path is not None and Path(path).is_file():
        loaded = load_yaml(Path(path).read_text(), str(path)) or {}
        if isinstance(loaded, dict):
            given = {str(k).replace("-", "_"): v for k, v in loaded.items()}
            values = {name: given[flag] for name, flag in names.items() if flag in given}
    values.update({k: v for k, v in overrides.items() if v is not None})
    return LLMSpec(**values)
