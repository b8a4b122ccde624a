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

``shop`` (``shop.yaml``, :mod:`xmr.toyworld.shop`): one product per image on a plain
background, a shop description, and EI-CLIP's entities (brand, category, subcategory, season,
composition); brands have visible logos and several brand names are ordinary words.

``generate(out_dir, config=None, *, mode=None, seed=None, progress=False)`` writes a world of
either mode in COCO layout (:mod:`xmr.toyworld.modes`); ``load_config`` / ``load_shop_config``
read a world YAML; ``default_toyworld`` is the default world, generated once into the user's
cache.

Layout: the world core every mode shares (:mod:`~xmr.toyworld.config`: reading, merging and
checking world YAMLs; :mod:`~xmr.toyworld.draw`: colours, the pen, sensor noise;
:mod:`~xmr.toyworld.world`: the writer, chunked parallel rendering, COCO files, ``world.json``),
one subpackage per mode (:mod:`xmr.toyworld.scene`, :mod:`xmr.toyworld.shop`) that gives the
writer a :class:`~xmr.toyworld.world.WorldMode`, and the entry point over them
(:mod:`~xmr.toyworld.modes`). The folders a world is read back from are in
:mod:`xmr.data.toyworld_reader`.
"""

from xmr.toyworld.default_world import default_toyworld
from xmr.toyworld.modes import MODES, config_mode, generate
from xmr.toyworld.scene import WorldConfig, load_config
from xmr.toyworld.shop import ShopConfig, load_shop_config

__all__ = [
    "MODES",
    "ShopConfig",
    "WorldConfig",
    "config_mode",
    "default_toyworld",
    "generate",
    "load_config",
    "load_shop_config",
]
