"""World YAMLs of either mode: reading, packaged worlds, key-by-key merging and validation.

A mode's config (:class:`~xmr.toyworld.scene.config.WorldConfig`,
:class:`~xmr.toyworld.shop.config.ShopConfig`) is a frozen dataclass read from its packaged
defaults with a user's YAML merged over them (:func:`merge`): the mode's sections merge key by
key, every other value (lists, ``splits``) replaces the default. The checks here turn a bad
value into a ``ValueError`` naming the file and the key (``world.yaml: captions.omit_prob:
...``), the form every mode's errors take.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self, TypeVar

import yaml

PACKAGED_WORLDS = {
    **{
        name: Path(__file__).parent / "scene" / f"{name}.yaml"
        for name in ("binding", "pets", "street", "pretrain", "odmap-control")
    },
    "shop-confounded": Path(__file__).parent / "shop" / "shop-confounded.yaml",
}
"""World YAMLs that ship with xmr, by the name ``--config`` takes instead of a path."""
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_RESERVED_FOLDERS = ("annotations", "counterfactuals", "binding")


class ModeConfig(Protocol):
    """What every mode's config offers the world writer (:mod:`xmr.toyworld.world`)."""

    mode: ClassVar[str]
    seed: int
    image_size: int
    splits: Mapping[str, int]

    def to_dict(self) -> dict[str, Any]:
        """The YAML structure of the config (what ``world.json`` records)."""
        ...

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<config>") -> Self:
        """Validate ``data`` merged over the mode's defaults; errors name ``source``."""
        ...


AnyConfig = TypeVar("AnyConfig", bound=ModeConfig)


def world_config_path(config: str | Path) -> Path:
    """The world YAML ``config`` names: a file (made absolute), or a packaged world's name
    (:data:`PACKAGED_WORLDS`) when no such file exists."""
    path = Path(config).expanduser()
    if not path.exists() and str(config) in PACKAGED_WORLDS:
        return PACKAGED_WORLDS[str(config)]
    return path.resolve()


def world_config_option(value: str | Path | None) -> str | Path | None:
    """A job's ``--world-config`` as the driver resolves it: a packaged world's name stays a
    name (when no such file is here), any other value becomes an absolute path (the steps run
    in other folders).

    >>> world_config_option("binding"), world_config_option(None)
    ('binding', None)
    """
    if value is None or (str(value) in PACKAGED_WORLDS and not Path(value).exists()):
        return value
    return Path(value).expanduser().resolve()


def read_world_yaml(path: str | Path) -> Mapping[str, Any]:
    """The top-level mapping of a world YAML file (scene or shop), or of a packaged world by name.

    Raises ``FileNotFoundError`` for a missing file, ``ValueError`` naming the file for bad YAML
    or a top level that is not a mapping.
    """
    path = world_config_path(path)
    if not path.is_file():
        packaged = ", ".join(PACKAGED_WORLDS)
        raise FileNotFoundError(f"{path}: no such world config (packaged worlds: {packaged})")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: the top level must be a mapping, got {type(data).__name__}")
    return data


def resolve_config(
    config: AnyConfig | str | Path | None,
    seed: int | None,
    config_type: type[AnyConfig],
    load: Callable[[str | Path | None], AnyConfig],
) -> AnyConfig:
    """``load(config)`` for a world YAML path or None (the packaged defaults), else ``config``
    re-validated as a ``config_type``; ``seed``, when given, replaces the config's seed.

    Raises:
        ValueError: an invalid config.
        FileNotFoundError: the config file does not exist.
    """
    if config is None or isinstance(config, str | Path):
        cfg = load(config)
    else:  # re-validate a programmatic config
        cfg = config_type.from_dict(config.to_dict(), source=config_type.__name__)
    return cfg if seed is None else replace(cfg, seed=seed)


def merge(
    default: Mapping[str, Any], data: Mapping[str, Any], source: str, sections: tuple[str, ...]
) -> dict[str, Any]:
    """``data`` over ``default`` key by key: the mappings named in ``sections`` merge key by key,
    every other value replaces the default. Unknown keys raise ``ValueError``."""
    merged = dict(default)
    for key, value in data.items():
        if key not in default:
            raise ValueError(f"{source}: unknown key {key!r}")
        if key in sections:
            section = mapping(value, key, source)
            for sub in section:
                if sub not in default[key]:
                    raise ValueError(f"{source}: unknown key '{key}.{sub}'")
            merged[key] = {**default[key], **section}
        else:
            merged[key] = value
    return merged


def config_error(source: str, key: str, message: str) -> ValueError:
    """The error for a bad value: ``{source}: {key}: {message}``."""
    return ValueError(f"{source}: {key}: {message}")


def mapping(value: Any, key: str, source: str) -> Mapping[str, Any]:
    """``value``, which must be a mapping."""
    if not isinstance(value, Mapping):
        raise config_error(source, key, f"must be a mapping, got {value!r}")
    return value


def integer(value: Any, key: str, source: str, lo: int, hi: int) -> int:
    """``value``, which must be an integer (not a bool) in ``[lo, hi]``."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise config_error(source, key, f"must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def number(value: Any, key: str, source: str, lo: float, hi: float) -> float:
    """``value`` as a float; it must be a number (not a bool) in ``[lo, hi]``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise config_error(source, key, f"must be a number in [{lo}, {hi}], got {value!r}")
    return float(value)


def names(value: Any, key: str, source: str, allowed: Collection[str]) -> tuple[str, ...]:
    """``value``, which must be a list of distinct names from ``allowed``, as a tuple."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise config_error(source, key, f"must be a list of names, got {value!r}")
    unknown = [v for v in value if v not in allowed]
    if unknown:
        raise config_error(source, key, f"unknown {unknown}; choose from {sorted(allowed)}")
    if len(set(value)) != len(value):
        raise config_error(source, key, f"has duplicates: {value}")
    return tuple(value)


def name(value: Any, key: str, source: str, allowed: Collection[str]) -> str:
    """``value``, which must be one of ``allowed``."""
    if not isinstance(value, str) or value not in allowed:
        raise config_error(source, key, f"must be one of {sorted(allowed)}, got {value!r}")
    return value


def entries(value: Any, key: str, source: str, fields: tuple[str, ...]) -> list[Mapping]:
    """``value``, which must be a list of mappings with exactly the keys ``fields``."""
    if not isinstance(value, list):
        raise config_error(source, key, f"must be a list, got {value!r}")
    for i, entry in enumerate(value):
        entry = mapping(entry, f"{key}[{i}]", source)
        unknown = [k for k in entry if k not in fields]
        if unknown:
            raise ValueError(f"{source}: unknown key '{key}[{i}].{unknown[0]}'")
        missing = [k for k in fields if k not in entry]
        if missing:
            raise config_error(source, f"{key}[{i}]", f"missing {missing}")
    return value


def split_counts(value: Any, source: str) -> dict[str, int]:
    """``splits``: split name -> image count, at least one split; a name is a folder of the
    world, so letters, digits, ``_`` or ``-`` and none of the world's own folders."""
    splits: dict[str, int] = {}
    for split, count in mapping(value, "splits", source).items():
        if not isinstance(split, str) or not _SPLIT_NAME.match(split):
            raise config_error(
                source, "splits", f"split names are letters, digits, '_' or '-': {split!r}"
            )
        if split in _RESERVED_FOLDERS:
            raise config_error(
                source, "splits", f"{split!r} is a folder of the world's own, not a split"
            )
        splits[split] = integer(count, f"splits.{split}", source, 0, 10_000_000)
    if not splits:
        raise config_error(source, "splits", "needs at least one split")
    return splits
