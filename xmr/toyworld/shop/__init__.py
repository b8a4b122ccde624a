"""The shop world: one product photo per image with a shop description and EI-CLIP's entities
(``shop.yaml``).

Modules in order of use: :mod:`~.config` (the YAML), :mod:`~.catalogue` (what the shop sells),
:mod:`~.render` (a product's pixels and logo badge) and :mod:`~.generate` (sampling a product,
its description, and the annotations: the :data:`~.generate.SHOP` mode).
"""

from xmr.toyworld.shop.config import ShopConfig, load_shop_config

__all__ = ["ShopConfig", "load_shop_config"]
