"""Scene-world configuration: frozen dataclasses read from YAML, validated key by key.

The defaults live in ``default.yaml`` next to this module; its ``mode: scene`` tells this world
from the shop world (:mod:`xmr.toyworld.shop.config`). A user's YAML overrides them key by
key (:func:`xmr.toyworld.config.merge`): the sections ``layout``, ``captions``,
``counterfactuals`` and ``binding`` merge, every other value (lists, ``splits``) replaces the
default. Unknown keys and bad values raise ``ValueError`` naming the file and the key
(``world.yaml: captions.omit_prob: ...``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from xmr.toyworld.config import (
    config_error,
    entries,
    integer,
    mapping,
    merge,
    name,
    names,
    number,
    read_world_yaml,
    split_counts,
)
from xmr.toyworld.scene.background import BACKGROUNDS
from xmr.toyworld.scene.classes import CLASSES, GENDERS

DEFAULT_PATH = Path(__file__).with_name("default.yaml")
_MERGED_SECTIONS = ("layout", "captions", "counterfactuals", "binding")


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
    """The attribute-binding test (:mod:`xmr.toyworld.scene.binding`): how many items of each kind.

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


def _default_dict() -> dict[str, Any]:
    return yaml.safe_load(DEFAULT_PATH.read_text())


def _merge(default: dict[str, Any], data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``data`` over ``default`` (:func:`~xmr.toyworld.config.merge`). A world that replaces
    ``splits`` without naming its ``gender_splits`` keeps the default gender splits it still has
    (none, when it leaves them out), so ``splits: {train: 100, test: 20}`` needs nothing more."""
    merged = merge(default, data, source, _MERGED_SECTIONS)
    if isinstance(data.get("splits"), Mapping) and "gender_splits" not in data:
        merged["gender_splits"] = [s for s in default["gender_splits"] if s in data["splits"]]
    return merged


def _parse(data: Mapping[str, Any], source: str) -> WorldConfig:
    if data["mode"] != "scene":
        raise config_error(
            source,
            "mode",
            f"must be 'scene' for a scene world, got {data['mode']!r} "
            "(shop worlds load with xmr.toyworld.shop.load_shop_config)",
        )
    splits = split_counts(data["splits"], source)
    classes = names(data["classes"], "classes", source, CLASSES)
    if not classes:
        raise config_error(source, "classes", "needs at least one class")

    def split_list(key: str, value: Any) -> tuple[str, ...]:
        return names(value, key, source, tuple(splits))

    cooccurrence = []
    for i, entry in enumerate(
        entries(data["cooccurrence"], "cooccurrence", source, ("a", "b", "p"))
    ):
        key = f"cooccurrence[{i}]"
        a = name(entry["a"], f"{key}.a", source, classes)
        b = name(entry["b"], f"{key}.b", source, classes)
        if a == b:
            raise config_error(source, key, f"a and b must differ, got {a!r} twice")
        cooccurrence.append(Cooccurrence(a, b, number(entry["p"], f"{key}.p", source, 0, 1)))
    objects = tuple(c for c in classes if c != "person")
    gender_bias = []
    fields = ("with", "gender", "p")
    for i, entry in enumerate(entries(data["gender_bias"], "gender_bias", source, fields)):
        key = f"gender_bias[{i}]"
        with_class = name(entry["with"], f"{key}.with", source, objects)
        gender = name(entry["gender"], f"{key}.gender", source, GENDERS)
        gender_bias.append(
            GenderBias(with_class, gender, number(entry["p"], f"{key}.p", source, 0, 1))
        )

    gender_splits = split_list("gender_splits", data["gender_splits"])
    biased_splits = split_list("biased_splits", data["biased_splits"])
    if gender_splits and "person" not in classes:
        raise config_error(source, "gender_splits", "shows persons: add 'person' to classes")
    for split in gender_splits:
        if split in biased_splits:
            raise config_error(
                source, "gender_splits", f"{split!r} is also biased; a gender split is balanced"
            )

    attribute_bias = []
    fields = ("class", "colour", "p")
    for i, entry in enumerate(entries(data["attribute_bias"], "attribute_bias", source, fields)):
        key = f"attribute_bias[{i}]"
        category = name(entry["class"], f"{key}.class", source, objects)
        if any(a.category == category for a in attribute_bias):
            raise config_error(source, f"{key}.class", f"{category!r} has a rule already")
        colour = name(entry["colour"], f"{key}.colour", source, tuple(CLASSES[category].palette))
        attribute_bias.append(
            AttributeBias(category, colour, number(entry["p"], f"{key}.p", source, 0, 1))
        )

    lay = mapping(data["layout"], "layout", source)
    layout = LayoutConfig(
        min_objects=integer(lay["min_objects"], "layout.min_objects", source, 1, 8),
        max_objects=integer(lay["max_objects"], "layout.max_objects", source, 1, 8),
        repeat_prob=number(lay["repeat_prob"], "layout.repeat_prob", source, 0, 1),
        attach_prob=number(lay["attach_prob"], "layout.attach_prob", source, 0, 1),
        ride_prob=number(lay["ride_prob"], "layout.ride_prob", source, 0, 1),
        closeup_table_prob=number(
            lay["closeup_table_prob"], "layout.closeup_table_prob", source, 0, 1
        ),
        noise_std=number(lay["noise_std"], "layout.noise_std", source, 0, 50),
    )
    if layout.max_objects < layout.min_objects:
        raise config_error(source, "layout.max_objects", "must be >= layout.min_objects")
    cap = mapping(data["captions"], "captions", source)
    captions = CaptionConfig(
        omit_prob=number(cap["omit_prob"], "captions.omit_prob", source, 0, 1),
        colour_prob=number(cap["colour_prob"], "captions.colour_prob", source, 0, 1),
        gendered_word_prob=number(
            cap["gendered_word_prob"], "captions.gendered_word_prob", source, 0, 1
        ),
        neutral_splits=split_list("captions.neutral_splits", cap["neutral_splits"]),
    )
    cf = mapping(data["counterfactuals"], "counterfactuals", source)
    counterfactuals = CounterfactualConfig(
        splits=split_list("counterfactuals.splits", cf["splits"]),
        alpha1=number(cf["alpha1"], "counterfactuals.alpha1", source, 0, 1),
        alpha2=number(cf["alpha2"], "counterfactuals.alpha2", source, 0, 1),
        alpha3=number(cf["alpha3"], "counterfactuals.alpha3", source, 0, 1),
    )
    for alpha in ("alpha1", "alpha2", "alpha3"):
        if getattr(counterfactuals, alpha) == 0:
            raise config_error(source, f"counterfactuals.{alpha}", "must be in (0, 1], got 0")
    bind = mapping(data["binding"], "binding", source)
    binding = BindingConfig(
        swap_items=integer(bind["swap_items"], "binding.swap_items", source, 0, 1_000_000),
        counter_items=integer(bind["counter_items"], "binding.counter_items", source, 0, 1_000_000),
    )
    if binding.counter_items and not attribute_bias:
        raise config_error(
            source, "binding.counter_items", "needs an attribute_bias rule (whose stereotype?)"
        )
    backgrounds = names(data["backgrounds"], "backgrounds", source, BACKGROUNDS)
    if not backgrounds:
        raise config_error(source, "backgrounds", "needs at least one background")
    return WorldConfig(
        seed=integer(data["seed"], "seed", source, 0, 2**63 - 1),
        image_size=integer(data["image_size"], "image_size", source, 32, 1024),
        splits=splits,
        classes=classes,
        backgrounds=backgrounds,
        biased_splits=biased_splits,
        cooccurrence=tuple(cooccurrence),
        gender_bias=tuple(gender_bias),
        female_share=number(data["female_share"], "female_share", source, 0, 1),
        gender_splits=gender_splits,
        attribute_bias=tuple(attribute_bias),
        layout=layout,
        captions=captions,
        counterfactuals=counterfactuals,
        binding=binding,
    )
