"""What defines one D′ build: :class:`SynthConfig` (what both methods use),
:class:`~xmr.synth.removal.config.RemovalConfig` and :class:`~xmr.synth.biaug.config.BiAugConfig`
(what only one method uses), together :class:`SynthOptions` (hashed, output-defining), and
:class:`SynthRuntime` (where and how fast it runs; never changes the output).

A YAML file (``--config``) holds the fields of any of these classes by name; command-line flags
override it. The config hash keys the output folder: a rerun with the same hash resumes, another
hash is refused. Each field declares its flag's help and bounds (:func:`xmr.fields.option`): the
``xmr synth`` command is built from these classes (:mod:`xmr.synth.command`), the configs' flags
in :data:`OPTION_ORDER`.
"""

from __future__ import annotations

import hashlib
import json
import typing
from dataclasses import asdict, dataclass, field, fields, make_dataclass, replace
from pathlib import Path
from typing import Any

from xmr import __version__
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
from xmr.synth.biaug.config import BIAUG_FILLS, BiAugConfig
from xmr.synth.removal.config import RemovalConfig

METHOD_CONFIGS: dict[str, type] = {"removal": RemovalConfig, "biaug": BiAugConfig}
"""Each D′ method's own config, by ``--mode``. A method adds its entry here, its fields to
:data:`OPTION_ORDER`, and its builder to :data:`~xmr.synth.methods.METHODS`; a method config
has ``to_dict()``, ``hashed()`` and ``check(fill, dataset)``."""
MODES = tuple(METHOD_CONFIGS)
BOX_SOURCES = ("gt", "groundingdino")
DEFAULT_OUT = Path("xmr-synth")
"""Where builds go by default: ``<dataset>-<split>`` inside, under ``$XMR_STORAGE`` when set,
else in the working directory."""


@dataclass(frozen=True)
class SynthConfig:
    """What decides D′ whichever the method: the mode, the source rows, the seed, the shards,
    the fill (inpainting) and the boxes.

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
            "boxes": (self.boxes, BOX_SOURCES),
            "detector": (self.detector, DETECTOR_BACKENDS),
        }
        for name, (value, allowed) in choices.items():
            if value not in allowed:
                mode = f" with --mode {self.mode}" if name == "fill" else ""
                raise ValueError(f"--{name} {value!r} is not one of {', '.join(allowed)}{mode}")
        check_options(self)
        try:
            local_model_dir(self.sd_model)
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"--sd-model: {exc}") from exc
        try:
            check_detector(self.detector, self.detector_model)
        except (FileNotFoundError, ValueError, ModuleNotFoundError) as exc:
            raise type(exc)(f"--detector-model: {exc}") from exc
        resolve_paths(self)
        check_data_root(self.dataset, self.data)
        if self.sd_resolution % 8:
            raise ValueError(f"--sd-resolution must be a multiple of 8, got {self.sd_resolution}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (the data folder as a string)."""
        data = asdict(self)
        data["data"] = None if self.data is None else str(self.data)
        return data

    def hashed(self) -> dict[str, Any]:
        """The fields as the config hash takes them: not the data folder's location (the
        data's content is hashed separately), nor what a mode's older hashes predate."""
        data = self.to_dict()
        data.pop("data")
        if self.mode == "removal":
            data.pop("mode")  # the removal mode's hashes predate --mode
            if self.detector == "hf":
                data.pop("detector")  # ... and --detector
        if self.mode == "biaug" and self.boxes == "groundingdino":
            data.pop("boxes")  # the biaug mode's hashes predate --boxes gt there
        return data


def fingerprint(config: SynthConfig, own: Any) -> str:
    """Hash of everything that decides the output of a build with ``config`` and its method's
    own config ``own``: their fields as hashed (``hashed()``), and the package version."""
    data = {**config.hashed(), **own.hashed()}
    data["xmr_version"] = __version__
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


OPTION_ORDER = (
    "mode", "dataset", "data", "split", "limit", "alpha1", "alpha2", "alpha3",
    "captions_per_image", "seed", "fill", "sd_model", "sd_steps", "sd_guidance", "sd_resolution",
    "caption", "captioner_model", "boxes", "detector_model", "box_threshold", "text_threshold",
    "rows_per_shard", "detector", "max_objects", "attributes", "min_box_share", "max_box_share",
    "max_overlap", "filter_confidence", "min_confidence", "llm_max_tokens", "object_vocabulary",
)  # fmt: skip
"""The fields of :data:`CONFIGS` in the order ``xmr synth`` lists their flags (and
:meth:`SynthOptions.to_dict` its keys): every field of every config, once (checked on import)."""
CONFIGS = (SynthConfig, *METHOD_CONFIGS.values())
"""The configs of a build: the shared one, then each method's."""


def _method_configs() -> dict[str, Any]:
    return {mode: config() for mode, config in METHOD_CONFIGS.items()}


@dataclass(frozen=True)
class SynthOptions:
    """A build's configs: the shared one and each method's (``methods``, by mode). The method
    of ``shared.mode`` builds from ``shared`` and its own (:attr:`own`); the other methods'
    options are checked and recorded (the manifest's ``config``, MLflow's params), not
    hashed."""

    shared: SynthConfig = field(default_factory=SynthConfig)
    methods: dict[str, Any] = field(default_factory=_method_configs)

    def __post_init__(self) -> None:
        self.own.check(self.shared.fill or "", self.shared.dataset)

    @classmethod
    def of(cls, **values: Any) -> SynthOptions:
        """The configs of these fields by name (any of :data:`OPTION_ORDER`; the rest default).

        Raises:
            ValueError: a name no config has, or a value out of bounds or contradicting another.
        """
        unknown = set(values) - set(OPTION_ORDER)
        if unknown:
            raise ValueError(f"unknown option(s) {', '.join(sorted(unknown))}")

        def given(config: type) -> dict[str, Any]:
            return {f.name: values[f.name] for f in fields(config) if f.name in values}

        methods = {mode: config(**given(config)) for mode, config in METHOD_CONFIGS.items()}
        return cls(SynthConfig(**given(SynthConfig)), methods)

    @property
    def mode(self) -> str:
        """The build's method (``shared.mode``)."""
        return self.shared.mode

    @property
    def own(self) -> Any:
        """The config of the build's method (``methods[mode]``)."""
        return self.methods[self.mode]

    def to_dict(self) -> dict[str, Any]:
        """Every config's JSON-ready fields, flat, in :data:`OPTION_ORDER`."""
        data = self.shared.to_dict()
        for config in self.methods.values():
            data |= config.to_dict()
        return {name: data[name] for name in OPTION_ORDER}

    def fingerprint(self) -> str:
        """The config hash of the method of ``mode`` (:func:`fingerprint`)."""
        return fingerprint(self.shared, self.own)


def _in_option_order() -> type:
    declared: dict[str, tuple] = {}
    for config in CONFIGS:
        hints = typing.get_type_hints(config)
        for item in fields(config):
            if item.name in declared:
                raise TypeError(f"{config.__name__}.{item.name}: another config has that field")
            spec = field(default=item.default, metadata=item.metadata)
            declared[item.name] = (item.name, hints[item.name], spec)
    if sorted(declared) != sorted(OPTION_ORDER):
        missing, extra = set(declared) - set(OPTION_ORDER), set(OPTION_ORDER) - set(declared)
        raise TypeError(f"OPTION_ORDER lacks {sorted(missing)}, or names no field {sorted(extra)}")
    return make_dataclass(
        "SynthFlags",
        [declared[name] for name in OPTION_ORDER],
        frozen=True,
        namespace={"__module__": __name__},
    )


SynthFlags: type = _in_option_order()
"""The fields of :data:`CONFIGS` in one dataclass, in :data:`OPTION_ORDER` (the same
declarations: names, defaults, help and bounds; no checks): what ``xmr synth`` makes its
configs' flags from."""


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


def synth_choice(name: str, names: tuple[str, ...], doc: str) -> type:
    """A dataclass named ``name`` of the ``xmr synth`` options ``names`` (of
    :data:`SynthFlags` and :class:`SynthRuntime`), with the command's declarations: flags,
    defaults, help and bounds. A job that builds D′ holds it as one option group
    (:func:`~xmr.fields.group`), so its flags read as the command's and cannot drift; the
    values are checked where the build's configs are made (:func:`load_configs`)."""
    declared = {f.name: (cls, f) for cls in (SynthFlags, SynthRuntime) for f in fields(cls)}
    unknown = [n for n in names if n not in declared]
    if unknown:
        raise TypeError(f"{name}: xmr synth has no option {unknown}")
    specs = []
    for option_name in names:
        cls, item = declared[option_name]
        spec = field(default=item.default, metadata=item.metadata)
        specs.append((option_name, typing.get_type_hints(cls)[option_name], spec))
    return make_dataclass(
        name, specs, frozen=True, namespace={"__module__": __name__, "__doc__": doc}
    )


BiAugSynthChoice: type = synth_choice(
    "BiAugSynthChoice",
    (
        "limit",
        "detector_model",
        "sd_model",
        "detect_actors",
        "fill_actors",
        "llm_actors",
        "gpus_per_actor",
    ),
    "The ``xmr synth`` flags the BiAug job passes on to its build of BiAug-D′ unchanged.",
)
RemovalSynthChoice: type = synth_choice(
    "RemovalSynthChoice",
    ("limit", "fill_actors", "gpus_per_actor"),
    "The ``xmr synth`` flags the ODmAP job passes on to its build of D′ unchanged.",
)


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


def load_configs(path: Path | None, overrides: dict[str, Any]) -> tuple[SynthOptions, SynthRuntime]:
    """Build the configs and the runtime from an optional YAML file and explicit overrides
    (None = not given).

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
    config_names = set(OPTION_ORDER)
    runtime_names = {f.name for f in fields(SynthRuntime)}
    llm_names = set(parameter_names(LLMSpec).values())  # read by load_llm_spec
    unknown = set(values) - config_names - runtime_names - llm_names
    if unknown:
        where = f"{path}: " if path else ""
        raise ValueError(f"{where}unknown option(s) {', '.join(sorted(unknown))}")
    values = {k: _coerce(k, v) for k, v in values.items()}
    options = SynthOptions.of(**{k: v for k, v in values.items() if k in config_names})
    runtime = SynthRuntime(**{k: v for k, v in values.items() if k in runtime_names})
    if runtime.out is None:
        shared = options.shared
        runtime = replace(
            runtime, out=default_output(DEFAULT_OUT / f"{shared.dataset}-{shared.split}")
        )
    if runtime.run_name is None:
        runtime = replace(runtime, run_name=runtime.out.name)
    return options, runtime


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
