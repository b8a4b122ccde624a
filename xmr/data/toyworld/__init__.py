"""ToyWorld: a procedural image-caption world with planted biases and exact ground truth.

- Objects of 12 COCO classes on textured backgrounds, with interactions (a dog catching a
  frisbee, a person riding a horse, a cup on a table) that make every branch of the odmap
  removal rule occur.
- Planted co-occurrence in the biased splits (default: train): dog -> frisbee 0.9,
  horse -> person 0.9; classes independent elsewhere.
- Visible person gender (outfit, hair) recorded as ``attributes.gender``; in biased splits cups
  come with women (0.8) and bicycles with men (0.8); test captions are gender-neutral.
- Exact counterfactuals: each removal plan of a test image re-rendered without its classes.

``generate(out_dir, config=None, *, seed=None, progress=False)`` writes a world in COCO layout
(see :mod:`xmr.data.toyworld.generate`); ``load_config(path | None)`` reads a world YAML.
"""

from xmr.data.toyworld.config import WorldConfig, load_config
from xmr.data.toyworld.generate import generate

__all__ = ["WorldConfig", "generate", "load_config"]
