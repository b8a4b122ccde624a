"""Shop-mode configuration: frozen dataclasses read from YAML, validated key by key.

The defaults live in ``shop.yaml`` next to this module. A user's YAML overrides them key by key
(:func:`xmr.toyworld.config.merge`): the sections ``layout`` and ``captions`` merge, every other
value (lists, ``splits``, ``brands``) replaces the default. Unknown keys and bad values raise
``ValueError`` naming the file and the key (``shop.yaml: brands[2].glyph: ...``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from xmr.data.records import normalise_entity
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
from xmr.toyworld.shop.catalogue import (
    CATEGORIES,
    COLOURS,
    GLYPHS,
    LOGO_COLOURS,
    SCENE_GLYPHS,
)

SHOP_PATH = Path(__file__).with_name("shop.yaml")
_MERGED_SECTIONS = ("layout", "captions")
_SEASON = re.compile(r"(SS|FW)(\d{4})")
_BRAND_NAME = re.compile(r"[A-Za-z][A-Za-z0-9 '&.-]*")


@dataclass(frozen=True)
class Brand:
    """A brand: ``name`` as shop copy writes it, its logo (``glyph`` drawn in logo colour
    ``colour``) and the categories it ``sells``."""

    name: str
    glyph: str
    colour: str
    sells: tuple[str, ...]

    @property
    def entity(self) -> str:
        """The brand entity value (:func:`~xmr.data.records.normalise_entity` of the name)."""
        return normalise_entity(self.name)


@dataclass(frozen=True)
class ShopLayout:
    """Product size range and centre shift, logo badge side (fractions of the image side), and
    per-pixel noise (grey levels)."""

    min_scale: float
    max_scale: float
    offset: float
    logo_size: float
    noise_std: float


@dataclass(frozen=True)
class ShopCaptions:
    """Description sampling: how often the brand and the logo are named, how many details."""

    brand_prob: float
    logo_prob: float
    max_details: int


@dataclass(frozen=True)
class ShopConfig:
    """A whole shop world. ``image_size`` in pixels; ``splits`` maps split name -> image count;
    ``seasons`` are codes like ``SS2024``."""

    seed: int
    image_size: int
    splits: Mapping[str, int]
    colours: tuple[str, ...]
    seasons: tuple[str, ...]
    brands: tuple[Brand, ...]
    layout: ShopLayout
    captions: ShopCaptions

    mode = "shop"

    def to_dict(self) -> dict[str, Any]:
        """The YAML structure of this config (what ``world.json`` records)."""
        data = asdict(self)
        data["splits"] = dict(self.splits)
        data["colours"] = list(self.colours)
        data["seasons"] = list(self.seasons)
        data["brands"] = [{**asdict(b), "sells": list(b.sells)} for b in self.brands]
        return {"mode": self.mode, **data}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<config>") -> ShopConfig:
        """Validate ``data`` merged over the defaults; errors name ``source`` and the key."""
        return _parse(merge(_default_dict(), data, source, _MERGED_SECTIONS), source)


def load_shop_config(path: str | Path | None = None) -> ShopConfig:
    """The defaults (``path=None``) or a shop YAML merged over them. Raises ``ValueError``."""
    if path is None:
        return _parse(_default_dict(), str(SHOP_PATH))
    return ShopConfig.from_dict(read_world_yaml(path), str(path))


def _default_dict() -> dict[str, Any]:
    return yaml.safe_load(SHOP_PATH.read_text())


def _brands(value: Any, source: str) -> tuple[Brand, ...]:
    fields = ("name", "glyph", "colour", "sells")
    brands: list[Brand] = []
    seen_names: dict[str, int] = {}
    seen_logos: dict[tuple[str, str], int] = {}
    for i, entry in enumerate(entries(value, "brands", source, fields)):
        key = f"brands[{i}]"
        brand_name = entry["name"]
        if not isinstance(brand_name, str) or not _BRAND_NAME.fullmatch(brand_name):
            raise config_error(
                source,
                f"{key}.name",
                "must start with a letter and hold letters, digits, spaces or '&.-, "
                f"got {brand_name!r}",
            )
        brand = Brand(
            name=brand_name,
            glyph=name(entry["glyph"], f"{key}.glyph", source, (*GLYPHS, *SCENE_GLYPHS)),
            colour=name(entry["colour"], f"{key}.colour", source, LOGO_COLOURS),
            sells=names(entry["sells"], f"{key}.sells", source, CATEGORIES),
        )
        if not brand.sells:
            raise config_error(source, f"{key}.sells", "needs at least one category")
        if brand.entity in seen_names:
            first = seen_names[brand.entity]
            raise config_error(source, f"{key}.name", f"{brand_name!r} repeats brands[{first}]")
        logo = (brand.glyph, brand.colour)
        if logo in seen_logos:
            raise config_error(
                source, key, f"logo {brand.colour} {brand.glyph} repeats brands[{seen_logos[logo]}]"
            )
        seen_names[brand.entity] = seen_logos[logo] = i
        brands.append(brand)
    if not brands:
        raise config_error(source, "brands", "needs at least one brand")
    return tuple(brands)


def _parse(data: Mapping[str, Any], source: str) -> ShopConfig:
    if data["mode"] != "shop":
        raise config_error(source, "mode", f"must be 'shop' for a shop world, got {data['mode']!r}")
    splits = split_counts(data["splits"], source)
    colours = names(data["colours"], "colours", source, COLOURS)
    if not colours:
        raise config_error(source, "colours", "needs at least one colour")
    seasons = data["seasons"]
    if (
        not isinstance(seasons, list)
        or not seasons
        or not all(isinstance(s, str) and _SEASON.fullmatch(s) for s in seasons)
        or len(set(seasons)) != len(seasons)
    ):
        raise config_error(
            source, "seasons", f"must be distinct codes like SS2024 or FW2023, got {seasons!r}"
        )
    lay = mapping(data["layout"], "layout", source)
    layout = ShopLayout(
        min_scale=number(lay["min_scale"], "layout.min_scale", source, 0.2, 1),
        max_scale=number(lay["max_scale"], "layout.max_scale", source, 0.2, 1),
        offset=number(lay["offset"], "layout.offset", source, 0, 0.25),
        logo_size=number(lay["logo_size"], "layout.logo_size", source, 0.05, 0.3),
        noise_std=number(lay["noise_std"], "layout.noise_std", source, 0, 50),
    )
    if layout.max_scale < layout.min_scale:
        raise config_error(source, "layout.max_scale", "must be >= layout.min_scale")
    cap = mapping(data["captions"], "captions", source)
    captions = ShopCaptions(
        brand_prob=number(cap["brand_prob"], "captions.brand_prob", source, 0, 1),
        logo_prob=number(cap["logo_prob"], "captions.logo_prob", source, 0, 1),
        max_details=integer(cap["max_details"], "captions.max_details", source, 0, 3),
    )
    return ShopConfig(
        seed=integer(data["seed"], "seed", source, 0, 2**63 - 1),
        image_size=integer(data["image_size"], "image_size", source, 48, 1024),
        splits=splits,
        colours=colours,
        seasons=tuple(seasons),
        brands=_brands(data["brands"], source),
        layout=layout,
        captions=captions,
    )
