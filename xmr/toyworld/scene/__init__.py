"""The scene world: objects of COCO classes on textured backgrounds, planted biases, captions,
exact counterfactuals and the attribute-binding test (``default.yaml``, ``binding.yaml``).

Modules in order of use: :mod:`~.config` (the YAML), :mod:`~.classes` and :mod:`~.background`
(what can be drawn), :mod:`~.sample` (a scene's objects and interactions), :mod:`~.render`
(its pixels), :mod:`~.captions`, :mod:`~.binding`, and :mod:`~.generate` (one image's files and
the annotations: the :data:`~.generate.SCENE` mode).
"""

from xmr.toyworld.scene.config import WorldConfig, load_config

__all__ = ["WorldConfig", "load_config"]
