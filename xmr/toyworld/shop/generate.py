"""The shop world as a :class:`~xmr.toyworld.world.WorldMode`: product photos with shop
descriptions and EI-CLIP's tag entities.

Each image is one product on a plain light background. A product has a brand (a logo badge
drawn on it: learnable from pixels), a category and subcategory (the silhouette), a style (drawn
variant), a colour, a composition and a season (neither drawn). Brands sell a few categories
each; several brand names are ordinary words (``Horse`` sweaters, ``Dog`` sneakers, ``Navy``
trousers in red): the confounding entities EI-CLIP's entity encoder is for. Descriptions read
like shop copy and name the brand with probability ``captions.brand_prob``::

    Horse wool crew-neck sweater in navy. Ribbed cuffs and hem. Logo patch at chest.
    Autumn/winter 2024 collection.

Layout under ``out_dir`` (what :func:`xmr.data.toyworld_reader.read_toyworld` reads)::

    world.json                              mode "shop", resolved config, seed, xmr version, counts
    annotations/captions_{split}.json       one description per image; each image entry carries
                                            "entities": {brand, category, subcategory, season,
                                            composition} (ImageRecord.entities)
    annotations/instances_{split}.json      the product (category = subcategory, attributes
                                            colour and style) and its logo badge (category
                                            "logo", attributes.brand) per image
    {split}/{image_id:012d}.png             images

Ids and seeding follow the scene world (the driver both share: :mod:`xmr.toyworld.world`):
image ids run from 1 across the splits in config order, image ``i`` of a split draws everything
from :func:`~xmr.toyworld.world.scene_rng` ``(seed, split, i)``, so the output is
byte-identical for a seed at any process count.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from xmr.toyworld.shop.catalogue import COMPOSITIONS, SEASON_WORDS, SUBCATEGORIES
from xmr.toyworld.shop.config import ShopCaptions, ShopConfig, load_shop_config
from xmr.toyworld.shop.render import Product, logo_box, render_product
from xmr.toyworld.world import Item, Items, WorldMode, image_entry, save_png, scene_rng, write_coco

#: COCO category ids: the subcategories in catalogue order, then the logo badge.
CATEGORY_IDS = {name: i for i, name in enumerate([*SUBCATEGORIES, "logo"], start=1)}


def sample_product(config: ShopConfig, rng: np.random.Generator) -> Product:
    """Draw one product: brand, then one of its categories, subcategory, style, colour,
    composition, season (each uniform), then size, position and background."""
    brand = config.brands[int(rng.integers(len(config.brands)))]
    category = brand.sells[int(rng.integers(len(brand.sells)))]
    names = [name for name, spec in SUBCATEGORIES.items() if spec.category == category]
    subcategory = names[int(rng.integers(len(names)))]
    spec = SUBCATEGORIES[subcategory]
    style = int(rng.integers(len(spec.styles)))
    colour = config.colours[int(rng.integers(len(config.colours)))]
    composition = spec.compositions[int(rng.integers(len(spec.compositions)))]
    season = config.seasons[int(rng.integers(len(config.seasons)))]
    tint = (float(rng.random()), float(rng.random()))

    lay, size = config.layout, config.image_size
    longer = float(rng.uniform(lay.min_scale, lay.max_scale)) * size
    if spec.aspect >= 1:
        width, height = longer, longer / spec.aspect
    else:
        width, height = longer * spec.aspect, longer
    w, h = max(8, round(width)), max(8, round(height))
    cx, cy = (size / 2 + rng.uniform(-lay.offset, lay.offset, 2) * size).tolist()
    x = min(max(round(cx - w / 2), 0), size - w)
    y = min(max(round(cy - h / 2), 0), size - h)
    facing = -1 if category == "shoes" and rng.random() < 0.5 else 1
    side = min(max(8, round(lay.logo_size * size)), w, h)
    level = float(rng.uniform(232, 250))
    background = tuple(round(level + d) for d in rng.uniform(-4, 4, 3).tolist())
    return Product(
        size=size,
        background=background,
        brand=brand,
        subcategory=subcategory,
        style=style,
        colour=colour,
        composition=composition,
        season=season,
        tint=tint,
        box=(x, y, w, h),
        facing=facing,
        logo=logo_box(subcategory, (x, y, w, h), facing, side),
        noise_std=lay.noise_std,
        noise_seed=int(rng.integers(2**63)),
    )


def describe(product: Product, rng: np.random.Generator, captions: ShopCaptions) -> str:
    """Shop copy for ``product``: "[Brand] material style noun in colour.", 0..``max_details``
    detail sentences, maybe where the logo is, and the season's collection."""
    spec = SUBCATEGORIES[product.subcategory]
    words = [COMPOSITIONS[product.composition], product.style_word, spec.noun]
    if rng.random() < captions.brand_prob:
        words.insert(0, product.brand.name)
    first = " ".join(words)
    sentences = [f"{first[0].upper()}{first[1:]} in {product.colour}."]
    n_details = min(int(rng.integers(captions.max_details + 1)), len(spec.details))
    picks = rng.choice(len(spec.details), size=n_details, replace=False)
    sentences += [spec.details[int(i)] for i in picks]
    if rng.random() < captions.logo_prob:
        sentences.append(f"Logo patch {spec.logo_phrase}.")
    sentences.append(f"{SEASON_WORDS[product.season[:2]]} {product.season[2:]} collection.")
    return " ".join(sentences)


def render_product_image(cfg: ShopConfig, out: Path, split: str, index: int, image_id: int) -> Item:
    """Render image ``index`` of ``split`` into ``out``; return its item
    (:data:`~xmr.toyworld.world.Item`): the product and its logo badge, one description."""
    rng = scene_rng(cfg.seed, split, index)
    product = sample_product(cfg, rng)
    description = describe(product, rng, cfg.captions)
    image = image_entry(image_id, cfg.image_size, entities=product.entities)
    save_png(render_product(product), out / split / image["file_name"])
    return {
        "image": image,
        "objects": [
            (
                product.subcategory,
                list(product.box),
                {"colour": product.colour, "style": product.style_word},
            ),
            ("logo", list(product.logo), {"brand": product.brand.entity}),
        ],
        "captions": [description],  # one per image: caption ids are image ids
    }


def write_shop_annotations(
    out: Path, cfg: ShopConfig, items: Items, info: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """The COCO files of every split; returns the per-split counts."""
    categories = [
        {
            "id": CATEGORY_IDS[name],
            "name": name,
            "supercategory": spec.category if (spec := SUBCATEGORIES.get(name)) else "brand",
        }
        for name in CATEGORY_IDS
    ]
    counts: dict[str, dict[str, Any]] = {}
    for split, coco in write_coco(out, items, categories, info).items():
        entities = [image["entities"] for image in coco.images]
        counts[split] = {
            "images": len(coco.images),
            "captions": len(coco.captions),
            **{
                f"per_{group}": dict(sorted(Counter(e[group] for e in entities).items()))
                for group in ("brand", "subcategory")
            },
        }
    return counts


SHOP = WorldMode(
    name="shop",
    config_type=ShopConfig,
    load_config=load_shop_config,
    render_image=render_product_image,
    write_annotations=write_shop_annotations,
    description="ToyWorld shop (xmr)",
)
"""The shop world, for :func:`xmr.toyworld.generate`."""
