"""ToyWorld: a procedural image-caption world with planted biases and exact ground truth.

Two modes. ``scene`` (the default, ``default.yaml``):

- Objects of 12 COCO classes on textured backgrounds, with interactions (a dog catching a
  frisbee, a person riding a horse, a cup on a table) that make every branch of the odmap
  removal rule occur.
- Planted co-occurrence in the biased splits (default: train): dog -> frisbee 0.9,
  horse -> person 0.9; classes independent elsewhere.
- Visible person gender (outfit, hair) recorded as ``attributes.gender``; in biased splits cups
  come with women (0.8) and bicycles with men (0.8); test captions are gender-neutral.
- Exact counterfactuals: each removal plan of a test image re-rendered without its classes.

``shop`` (``shop.yaml``, :mod:`xmr.data.toyworld.shop`): one product per image on a plain
background, a shop description, and EI-CLIP's entities (brand, category, subcategory, season,
composition); brands have visible logos and several brand names are ordinary words.

``generate(out_dir, config=None, *, seed=None, progress=False)`` writes a scene world in COCO
layout (see :mod:`xmr.data.toyworld.generate`), ``generate_shop`` a shop world,
``generate_world(..., mode=)`` either; ``load_config`` / ``load_shop_config`` read a world YAML.
"""

from xmr.data.toyworld.config import WorldConfig, load_config
from xmr.data.toyworld.generate import generate
from xmr.data.toyworld.modes import MODES, config_mode, generate_world
from xmr.data.toyworld.shop import generate_shop
from xmr.data.toyworld.shop_config import ShopConfig, load_shop_config

__all__ = [
    "MODES",
    "ShopConfig",
    "WorldConfig",
    "config_mode",
    "generate",
    "generate_shop",
    "generate_world",
    "load_config",
    "load_shop_config",
]
