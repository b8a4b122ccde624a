"""ToyWorld configuration: frozen dataclasses read from YAML, validated key by key.

The defaults live in ``default.yaml`` next to this module; its ``mode: scene`` tells this world
from the shop world (:mod:`xmr.data.toyworld.shop_config`). A user's YAML overrides them key by
key: the sections ``layout``, ``captions`` and ``counterfactuals`` merge, every other value
(lists, ``splits``) replaces the default. Unknown keys and bad values raise ``ValueError``
naming the file and the key (``world.yaml: captions.omit_prob: ...``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from xmr.data.toyworld.background import BACKGROUNDS
from xmr.data.toyworld.classes import CLASSES, GENDERS

DEFAULT_PATH = Path(__file__).with_name("default.yaml")
PACKAGED_WORLDS = {"binding": Path(__file__).with_name("binding.yaml")}
"""World YAMLs that ship with xmr, by the name ``--config`` takes instead of a path."""
_MERGED_SECTIONS = ("layout", "captions", "counterfactuals", "binding")
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_RESERVED_FOLDERS = ("annotations", "counterfactuals", "binding")


@dataclass(frozen=True)
class Cooccurrence:
    """In a biased split, when class ``a`` is in an image, ``b`` is too with probability ``p``."""

    a: str
    b: str
    p: float


@dataclass(frozen=True)
class GenderBias:
    """In a biased split, a person in an image with class ``with_class`` is ``gender`` w.p. ``p``.

    Several matching rules average their probabilities of "female"; no rule: 50/50.
    """

    with_class: str
    gender: str
    p: float


@dataclass(frozen=True)
class AttributeBias:
    """In a biased split, an instance of class ``category`` is ``colour`` with probability ``p``
    (otherwise one of the class's other palette colours, uniformly)."""

    category: str
    colour: str
    p: float


@dataclass(frozen=True)
class LayoutConfig:
    """Scene composition: object counts, interaction probabilities, pixel noise (grey levels)."""

    min_objects: int
    max_objects: int
    repeat_prob: float
    attach_prob: float
    ride_prob: float
    closeup_table_prob: float
    noise_std: float


@dataclass(frozen=True)
class CaptionConfig:
    """Caption sampling: reporting bias (``omit_prob`` for classes, ``colour_prob`` for the colour
    of a class whose instances share one) and gendered wording."""

    omit_prob: float
    colour_prob: float
    gendered_word_prob: float
    neutral_splits: tuple[str, ...]


@dataclass(frozen=True)
class CounterfactualConfig:
    """Splits that get exact counterfactual renders, and the removal-rule thresholds (§3.1)."""

    splits: tuple[str, ...]
    alpha1: float
    alpha2: float
    alpha3: float


@dataclass(frozen=True)
class BindingConfig:
    """The attribute-binding test (:mod:`xmr.data.toyworld.binding`): how many items of each kind.

    ``swap_items``: two objects of distinct colours, the true caption against the colours swapped.
    ``counter_items``: one object of an ``attribute_bias`` class drawn twice, in its stereotyped
    colour and in another one (none without an ``attribute_bias`` rule).
    """

    swap_items: int
    counter_items: int


@dataclass(frozen=True)
class WorldConfig:
    """A whole ToyWorld. ``image_size`` in pixels; ``splits`` maps split name -> image count."""

    seed: int
    image_size: int
    splits: Mapping[str, int]
    classes: tuple[str, ...]
    backgrounds: tuple[str, ...]
    biased_splits: tuple[str, ...]
    cooccurrence: tuple[Cooccurrence, ...]
    gender_bias: tuple[GenderBias, ...]
    female_share: float
    gender_splits: tuple[str, ...]
    attribute_bias: tuple[AttributeBias, ...]
    layout: LayoutConfig
    captions: CaptionConfig
    counterfactuals: CounterfactualConfig
    binding: BindingConfig

    mode = "scene"

    @property
    def gender_classes(self) -> tuple[str, ...]:
        """The classes of the ``gender_bias`` rules, each once, in rule order: the linked objects
        a gender split (:attr:`gender_splits`) pairs with persons and Bias@K reports on."""
        return tuple(dict.fromkeys(g.with_class for g in self.gender_bias))

    def to_dict(self) -> dict[str, Any]:
        """The YAML structure of this config (what ``world.json`` records)."""
        data = asdict(self)
        data["splits"] = dict(self.splits)
        data["gender_bias"] = [
            {"with": g.with_class, "gender": g.gender, "p": g.p} for g in self.gender_bias
        ]
        data["attribute_bias"] = [
            {"class": a.category, "colour": a.colour, "p": a.p} for a in self.attribute_bias
        ]
        for key, value in list(data.items()):
            if isinstance(value, tuple):
                data[key] = list(value)
        for section in _MERGED_SECTIONS:
            data[section] = {
                k: list(v) if isinstance(v, tuple) else v for k, v in data[section].items()
            }
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<config>") -> WorldConfig:
        """Validate ``data`` merged over the defaults; errors name ``source`` and the key."""
        return _parse(_merge(_default_dict(), data, source), source)


def load_config(path: str | Path | None = None) -> WorldConfig:
    """The defaults (``path=None``) or a world YAML merged over them. Raises ``ValueError``."""
    if path is None:
        return _parse(_default_dict(), str(DEFAULT_PATH))
    return WorldConfig.from_dict(read_world_yaml(path), str(path))


def world_config_path(config: str | Path) -> Path:
    """The world YAML ``config`` names: a file (made absolute), or a packaged world's name
    (:data:`PACKAGED_WORLDS`) when no such file exists."""
    path = Path(config).expanduser()
    if not path.exists() and str(config) in PACKAGED_WORLDS:
        return PACKAGED_WORLDS[str(config)]
    return path.resolve()


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


def _default_dict() -> dict[str, Any]:
    return yaml.safe_load(DEFAULT_PATH.read_text())


def _merge(default: dict[str, Any], data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``data`` over ``default`` key by key. A world that replaces ``splits`` without naming its
    ``gender_splits`` keeps the default gender splits it still has (none, when it leaves them
    out), so ``splits: {train: 100, test: 20}`` needs nothing more."""
    merged = dict(default)
    replaced = "splits" in data and isinstance(data["splits"], Mapping)
    if replaced and "gender_splits" in default and "gender_splits" not in data:
        merged["gender_splits"] = [s for s in default["gender_splits"] if s in data["splits"]]
    for key, value in data.items():
        if key not in default:
            raise ValueError(f"{source}: unknown key {key!r}")
        if key in _MERGED_SECTIONS:
            section = _mapping(value, key, source)
            for sub in section:
                if sub not in default[key]:
                    raise ValueError(f"{source}: unknown key '{key}.{sub}'")
            merged[key] = {**default[key], **section}
        else:
            merged[key] = value
    return merged


def _fail(source: str, key: str, message: str) -> ValueError:
    return ValueError(f"{source}: {key}: {message}")


def _mapping(value: Any, key: str, source: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(source, key, f"must be a mapping, got {value!r}")
    return value


def _int(value: Any, key: str, source: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _fail(source, key, f"must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def _float(value: Any, key: str, source: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise _fail(source, key, f"must be a number in [{lo}, {hi}], got {value!r}")
    return float(value)


def _names(value: Any, key: str, source: str, allowed: Mapping | tuple) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(source, key, f"must be a list of names, got {value!r}")
    unknown = [v for v in value if v not in allowed]
    if unknown:
        raise _fail(source, key, f"unknown {unknown}; choose from {sorted(allowed)}")
    if len(set(value)) != len(value):
        raise _fail(source, key, f"has duplicates: {value}")
    return tuple(value)


def _name(value: Any, key: str, source: str, allowed: Mapping | tuple) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise _fail(source, key, f"must be one of {sorted(allowed)}, got {value!r}")
    return value


def _entries(value: Any, key: str, source: str, fields: tuple[str, ...]) -> list[Mapping]:
    if not isinstance(value, list):
        raise _fail(source, key, f"must be a list, got {value!r}")
    for i, entry in enumerate(value):
        entry = _mapping(entry, f"{key}[{i}]", source)
        unknown = [k for k in entry if k not in fields]
        if unknown:
            raise ValueError(f"{source}: unknown key '{key}[{i}].{unknown[0]}'")
        missing = [k for k in fields if k not in entry]
        if missing:
            raise _fail(source, f"{key}[{i}]", f"missing {missing}")
    return value


def _splits(value: Any, source: str) -> dict[str, int]:
    """``splits``: split name -> image count, at least one split."""
    splits: dict[str, int] = {}
    for name, count in _mapping(value, "splits", source).items():
        if not isinstance(name, str) or not _SPLIT_NAME.match(name):
            raise _fail(source, "splits", f"split names are letters, digits, '_' or '-': {name!r}")
        if name in _RESERVED_FOLDERS:
            raise _fail(source, "splits", f"{name!r} is a folder of the world's own, not a split")
        splits[name] = _int(count, f"splits.{name}", source, 0, 10_000_000)
    if not splits:
        raise _fail(source, "splits", "needs at least one split")
    return splits


def _parse(data: Mapping[str, Any], source: str) -> WorldConfig:
    if data["mode"] != "scene":
        raise _fail(
            source,
            "mode",
            f"must be 'scene' for a scene world, got {data['mode']!r} "
            "(shop worlds load with xmr.data.toyworld.load_shop_config)",
        )
    splits = _splits(data["splits"], source)
    classes = _names(data["classes"], "classes", source, CLASSES)
    if not classes:
        raise _fail(source, "classes", "needs at least one class")

    def split_list(key: str, value: Any) -> tuple[str, ...]:
        return _names(value, key, source, tuple(splits))

    cooccurrence = []
    for i, entry in enumerate(
        _entries(data["cooccurrence"], "cooccurrence", source, ("a", "b", "p"))
    ):
        key = f"cooccurrence[{i}]"
        a = _name(entry["a"], f"{key}.a", source, classes)
        b = _name(entry["b"], f"{key}.b", source, classes)
        if a == b:
            raise _fail(source, key, f"a and b must differ, got {a!r} twice")
        cooccurrence.append(Cooccurrence(a, b, _float(entry["p"], f"{key}.p", source, 0, 1)))
    objects = tuple(c for c in classes if c != "person")
    gender_bias = []
    fields = ("with", "gender", "p")
    for i, entry in enumerate(_entries(data["gender_bias"], "gender_bias", source, fields)):
        key = f"gender_bias[{i}]"
        with_class = _name(entry["with"], f"{key}.with", source, objects)
        gender = _name(entry["gender"], f"{key}.gender", source, GENDERS)
        gender_bias.append(
            GenderBias(with_class, gender, _float(entry["p"], f"{key}.p", source, 0, 1))
        )

    gender_splits = split_list("gender_splits", data["gender_splits"])
    biased_splits = split_list("biased_splits", data["biased_splits"])
    if gender_splits and "person" not in classes:
        raise _fail(source, "gender_splits", "shows persons: add 'person' to classes")
    for split in gender_splits:
        if split in biased_splits:
            raise _fail(
                source, "gender_splits", f"{split!r} is also biased; a gender split is balanced"
            )

    attribute_bias = []
    fields = ("class", "colour", "p")
    for i, entry in enumerate(_entries(data["attribute_bias"], "attribute_bias", source, fields)):
        key = f"attribute_bias[{i}]"
        category = _name(entry["class"], f"{key}.class", source, objects)
        if any(a.category == category for a in attribute_bias):
            raise _fail(source, f"{key}.class", f"{category!r} has a rule already")
        colour = _name(entry["colour"], f"{key}.colour", source, tuple(CLASSES[category].palette))
        attribute_bias.append(
            AttributeBias(category, colour, _float(entry["p"], f"{key}.p", source, 0, 1))
        )

    lay = _mapping(data["layout"], "layout", source)
    layout = LayoutConfig(
        min_objects=_int(lay["min_objects"], "layout.min_objects", source, 1, 8),
        max_objects=_int(lay["max_objects"], "layout.max_objects", source, 1, 8),
        repeat_prob=_float(lay["repeat_prob"], "layout.repeat_prob", source, 0, 1),
        attach_prob=_float(lay["attach_prob"], "layout.attach_prob", source, 0, 1),
        ride_prob=_float(lay["ride_prob"], "layout.ride_prob", source, 0, 1),
        closeup_table_prob=_float(
            lay["closeup_table_prob"], "layout.closeup_table_prob", source, 0, 1
        ),
        noise_std=_float(lay["noise_std"], "layout.noise_std", source, 0, 50),
    )
    if layout.max_objects < layout.min_objects:
        raise _fail(source, "layout.max_objects", "must be >= layout.min_objects")
    cap = _mapping(data["captions"], "captions", source)
    captions = CaptionConfig(
        omit_prob=_float(cap["omit_prob"], "captions.omit_prob", source, 0, 1),
        colour_prob=_float(cap["colour_prob"], "captions.colour_prob", source, 0, 1),
        gendered_word_prob=_float(
            cap["gendered_word_prob"], "captions.gendered_word_prob", source, 0, 1
        ),
        neutral_splits=split_list("captions.neutral_splits", cap["neutral_splits"]),
    )
    cf = _mapping(data["counterfactuals"], "counterfactuals", source)
    counterfactuals = CounterfactualConfig(
        splits=split_list("counterfactuals.splits", cf["splits"]),
        alpha1=_float(cf["alpha1"], "counterfactuals.alpha1", source, 0, 1),
        alpha2=_float(cf["alpha2"], "counterfactuals.alpha2", source, 0, 1),
        alpha3=_float(cf["alpha3"], "counterfactuals.alpha3", source, 0, 1),
    )
    for name in ("alpha1", "alpha2", "alpha3"):
        if getattr(counterfactuals, name) == 0:
            raise _fail(source, f"counterfactuals.{name}", "must be in (0, 1], got 0")
    bind = _mapping(data["binding"], "binding", source)
    binding = BindingConfig(
        swap_items=_int(bind["swap_items"], "binding.swap_items", source, 0, 1_000_000),
        counter_items=_int(bind["counter_items"], "binding.counter_items", source, 0, 1_000_000),
    )
    if binding.counter_items and not attribute_bias:
        raise _fail(
            source, "binding.counter_items", "needs an attribute_bias rule (whose stereotype?)"
        )
    backgrounds = _names(data["backgrounds"], "backgrounds", source, BACKGROUNDS)
    if not backgrounds:
        raise _fail(source, "backgrounds", "needs at least one background")
    return WorldConfig(
        seed=_int(data["seed"], "seed", source, 0, 2**63 - 1),
        image_size=_int(data["image_size"], "image_size", source, 32, 1024),
        splits=splits,
        classes=classes,
        backgrounds=backgrounds,
        biased_splits=biased_splits,
        cooccurrence=tuple(cooccurrence),
        gender_bias=tuple(gender_bias),
        female_share=_float(data["female_share"], "female_share", source, 0, 1),
        gender_splits=gender_splits,
        attribute_bias=tuple(attribute_bias),
        layout=layout,
        captions=captions,
        counterfactuals=counterfactuals,
        binding=binding,
    )
