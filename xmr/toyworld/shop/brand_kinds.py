"""Which kind of word each shop brand's name is: what a pretrained CLIP may already read in it.

EI-CLIP's case (paper §1, figure 1) is a brand whose name is a word with another meaning: a CLIP
that learned the word pulls the product towards that meaning. The shop world's brands are of
three kinds (:data:`BRAND_KINDS`):

- ``scene_word``: a word the scene world's captions use for a class (``Horse``, ``Dog``,
  ``Table``, ``Umbrella``, ``Cup``, ``Bench``): the toy CLIP (``--pretrained toy``) learned it
  in pretraining as that object, so a ``Horse`` sweater is confounded for it;
- ``shop_word``: a word the shop's own copy uses for something else (``Canvas``: a material,
  ``Autumn``: a season, ``Navy``: a colour): confounded within the shop world itself;
- ``invented``: neither (``Verlaine``, ``Osterby``, …).

Training on a shop world scores each product protocol on each kind's queries alone
(:func:`xmr.eval.product_retrieval.product_retrieval`'s ``split_by``).
"""

from __future__ import annotations

import json
from functools import cache

from xmr.storage import StoragePath
from xmr.toyworld.scene.captions import class_words
from xmr.toyworld.scene.classes import CLASSES
from xmr.toyworld.shop.catalogue import COMPOSITIONS, SEASON_WORDS
from xmr.toyworld.shop.config import ShopConfig

BRAND_KINDS = ("scene_word", "shop_word", "invented")
"""The kinds of brand name, from most to least confounded for the toy CLIP."""

BRAND_GROUP = "brand"
"""The entity group the kinds split queries by."""


@cache
def scene_words() -> frozenset[str]:
    """Every word the scene world's captions use for a class (``horse``, ``table``, ...)."""
    return frozenset(word for name in CLASSES for word in class_words(name) if " " not in word)


def shop_words(config: ShopConfig) -> frozenset[str]:
    """The words the shop's copy uses for colours, seasons and materials."""
    seasons = {part for text in SEASON_WORDS.values() for part in text.lower().split("/")}
    materials = {word for text in COMPOSITIONS.values() for word in text.lower().split()}
    return frozenset({c.lower() for c in config.colours} | seasons | materials)


def brand_kind(name: str, config: ShopConfig) -> str:
    """The kind of the brand ``name`` (:data:`BRAND_KINDS`).

    >>> from xmr.toyworld import load_shop_config
    >>> shop = load_shop_config(None)
    >>> [brand_kind(name, shop) for name in ("Horse", "Navy", "Verlaine")]
    ['scene_word', 'shop_word', 'invented']
    """
    word = name.lower()
    if word in scene_words():
        return "scene_word"
    return "shop_word" if word in shop_words(config) else "invented"


def brand_kinds(config: ShopConfig) -> dict[str, str]:
    """Each brand's entity value -> its kind."""
    return {brand.entity: brand_kind(brand.name, config) for brand in config.brands}


def world_brand_kinds(root: StoragePath) -> dict[str, str] | None:
    """The brand kinds of the ToyWorld shop at ``root`` (its ``world.json``); None for any
    other data (no ``world.json``, or a scene world)."""
    record = root / "world.json"
    if not record.is_file():
        return None
    world = json.loads(record.read_text())
    if world.get("mode") != "shop":
        return None
    return brand_kinds(ShopConfig.from_dict(world["config"], str(record)))
