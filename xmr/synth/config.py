"""What defines one D′ build: :class:`SynthConfig` (hashed, output-defining) and
:class:`SynthRuntime` (where and how fast it runs; never changes the output).

A YAML file (``--config``) holds the fields of either class by name; command-line flags override
it. The config hash keys the output folder: a rerun with the same hash resumes, another hash is
refused.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

from xmr import __version__
from xmr.detection import DEFAULT_DETECTOR
from xmr.pretrained import local_model_dir
from xmr.removal.fill import FILL_METHODS
from xmr.removal.sd_inpaint import DEFAULT_SD_MODEL
from xmr.synth.captions import CAPTION_METHODS, DEFAULT_CAPTIONER

BOX_SOURCES = ("gt", "groundingdino")


@dataclass(frozen=True)
class SynthConfig:
    """Everything that decides which rows D′ has and what is in them.

    ``captions_per_image`` is how many captions of an image each removal plan is paired with
    (the paper uses 1; ``None`` means all of them).
    """

    dataset: str = "toyworld"
    data: Path | None = None  # None: the embedded default ToyWorld (generated into the cache)
    split: str = "train"
    limit: int | None = None  # first N images of the split (by image id)
    alpha1: float = 0.4
    alpha2: float = 0.8
    alpha3: float = 0.7
    captions_per_image: int | None = 1
    seed: int = 0
    fill: str = "telea"
    sd_model: str = DEFAULT_SD_MODEL
    sd_steps: int = 25
    sd_guidance: float = 7.5
    sd_resolution: int = 512
    caption: str = "np-removal"
    captioner_model: str = DEFAULT_CAPTIONER
    boxes: str = "gt"
    detector_model: str = DEFAULT_DETECTOR
    box_threshold: float = 0.35
    text_threshold: float = 0.25
    rows_per_shard: int = 256

    def __post_init__(self) -> None:
        from xmr.data import DATASETS

        choices = {
            "dataset": (self.dataset, tuple(DATASETS)),
            "fill": (self.fill, FILL_METHODS),
            "caption": (self.caption, CAPTION_METHODS),
            "boxes": (self.boxes, BOX_SOURCES),
        }
        for name, (value, allowed) in choices.items():
            if value not in allowed:
                raise ValueError(f"--{name} {value!r} is not one of {', '.join(allowed)}")
        for name in ("alpha1", "alpha2", "alpha3"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"--{name} must be in (0, 1], got {getattr(self, name)}")
        for name in ("box_threshold", "text_threshold"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be in (0, 1)")
        for name in ("sd_model", "captioner_model", "detector_model"):
            try:
                local_model_dir(getattr(self, name))
            except FileNotFoundError as exc:
                raise FileNotFoundError(f"--{name.replace('_', '-')}: {exc}") from exc
        positive = {
            "captions-per-image": self.captions_per_image,
            "limit": self.limit,
            "rows-per-shard": self.rows_per_shard,
            "sd-steps": self.sd_steps,
            "sd-resolution": self.sd_resolution,
        }
        for name, value in positive.items():
            if value is not None and value < 1:
                raise ValueError(f"--{name} must be a positive integer, got {value}")
        if self.sd_resolution % 8:
            raise ValueError(f"--sd-resolution must be a multiple of 8, got {self.sd_resolution}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (paths as strings)."""
        data = asdict(self)
        data["data"] = None if self.data is None else str(self.data)
        return data

    def fingerprint(self) -> str:
        """Hash of everything that decides the output: the fields but the data folder's
        location (the data's content is hashed separately), and the package version."""
        data = self.to_dict()
        data.pop("data")
        data["xmr_version"] = __version__
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class SynthRuntime:
    """Where and how the build runs. Actor counts of ``None`` are chosen from the cluster."""

    out: Path | None = None  # None: xmr-synth/<dataset>-<split> in the working directory
    address: str | None = None
    num_cpus: int | None = None
    plan_actors: int | None = None
    detect_actors: int | None = None
    fill_actors: int | None = None
    caption_actors: int | None = None
    gpus_per_actor: float = 1.0
    batch_size: int = 32
    max_error_rate: float = 0.01
    progress: bool = True
    tracking_uri: str | None = None
    run_name: str | None = None
    log_mlflow: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.max_error_rate <= 1:
            raise ValueError(f"--max-error-rate must be in [0, 1], got {self.max_error_rate}")
        if not 0 < self.gpus_per_actor <= 8:
            raise ValueError(f"--gpus-per-actor must be in (0, 8], got {self.gpus_per_actor}")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be positive, got {self.batch_size}")
        for name in ("plan_actors", "detect_actors", "fill_actors", "caption_actors"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be positive, got {value}")


_PATH_FIELDS = {"data", "out"}


def _coerce(name: str, value: Any) -> Any:
    if name in _PATH_FIELDS and value is not None:
        return Path(value)
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
        ValueError: an unknown key in the file, or an invalid value (the message names it).
        FileNotFoundError: ``path`` does not exist.
    """
    values: dict[str, Any] = {}
    if path is not None:
        if not Path(path).is_file():
            raise FileNotFoundError(f"config file {path} does not exist")
        loaded = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: expected a mapping of option names to values")
        values.update({str(k).replace("-", "_"): v for k, v in loaded.items()})
    values.update({k: v for k, v in overrides.items() if v is not None})
    config_names = {f.name for f in fields(SynthConfig)}
    runtime_names = {f.name for f in fields(SynthRuntime)}
    unknown = set(values) - config_names - runtime_names
    if unknown:
        where = f"{path}: " if path else ""
        raise ValueError(f"{where}unknown option(s) {', '.join(sorted(unknown))}")
    values = {k: _coerce(k, v) for k, v in values.items()}
    config = SynthConfig(**{k: v for k, v in values.items() if k in config_names})
    runtime = SynthRuntime(**{k: v for k, v in values.items() if k in runtime_names})
    if runtime.out is None:
        runtime = replace(runtime, out=Path("xmr-synth") / f"{config.dataset}-{config.split}")
    return config, runtime
