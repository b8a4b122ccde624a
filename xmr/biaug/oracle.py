"""The ToyWorld oracle for BiAug's inpainting (steps 6-7): an exact counterfactual by re-rendering.

A scene ToyWorld is drawn from its seed, so any of its images can be drawn again with an object
in another colour of its class's palette (:data:`xmr.toyworld.scene.classes.CLASSES`): the image
an ideal inpainting model would produce for "a <colour> <object>" with the object's box as mask.
Like the inpainting it stands in for, the oracle changes pixels only inside the box: inside, the
re-render (objects in front stay in front); outside, the original. With the colour unchanged
the result is byte-identical to the world's own image.

Exactness needs the renderer that wrote the world (same xmr). A world from another renderer
shows as boxes that match no instance or pixels that differ from its PNGs.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from xmr.storage import ObjectPath, StoragePath, as_path
from xmr.toyworld.scene.captions import class_words
from xmr.toyworld.scene.classes import palette
from xmr.toyworld.scene.config import WorldConfig
from xmr.toyworld.scene.generate import image_scene, locate_image
from xmr.toyworld.scene.render import render
from xmr.toyworld.scene.sample import Scene, SceneObject

MIN_INSIDE = 0.5
"""An instance is in a box when at least this share of its (annotation) box area lies inside."""


def _words(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", text.casefold())


def named_colour(phrase: str, colours: list[str]) -> str | None:
    """The one colour name of ``colours`` that ``phrase`` contains as whole words (any case).

    ``"a Wooden bench"`` with ``["green", "wooden", "red"]`` -> ``"wooden"``; None when the phrase
    names none of them. Raises ``ValueError`` when it names more than one.
    """
    words = _words(phrase)
    found = []
    for colour in colours:
        key = _words(colour)
        if any(words[i : i + len(key)] == key for i in range(len(words) - len(key) + 1)):
            found.append(colour)
    if len(found) > 1:
        raise ValueError(f"{phrase!r} names several colours ({', '.join(found)}): which one?")
    return found[0] if found else None


def toyworld_class(name: str, classes: Sequence[str]) -> str:
    """The class of ``classes`` that an object name denotes: the class name or one of the words
    ToyWorld captions use for it (:func:`~xmr.toyworld.scene.captions.class_words`), any case
    and spacing (``"Sports ball"``, ``"people"``, ``"soccer ball"``). Raises ``ValueError``
    when none does."""
    key = " ".join(name.casefold().split())
    for category in classes:
        if key == category.casefold() or key in class_words(category):
            return category
    raise ValueError(f"{name!r} is not a ToyWorld class ({', '.join(classes)})")


def _read_world(root: StoragePath) -> WorldConfig:
    """The config of the scene world at ``root`` from its ``world.json``. Raises ``ValueError``."""
    path = root / "world.json"
    if not path.is_file():
        raise ValueError(f"{path}: no such file (not a ToyWorld folder)")
    try:
        world = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(world, dict) or not isinstance(world.get("config"), dict):
        raise ValueError(f"{path}: no 'config' mapping")
    if world.get("mode") != "scene":
        raise ValueError(
            f"{path}: a {world.get('mode')!r} world; only scene worlds can re-draw an object"
        )
    return WorldConfig.from_dict(world["config"], source=str(path))


def _inside_share(instance: tuple[int, int, int, int], box: tuple[int, int, int, int]) -> float:
    """The share of ``instance``'s area inside ``box`` (both ``(x0, y0, x1, y1)`` pixels)."""
    width = min(instance[2], box[2]) - max(instance[0], box[0])
    height = min(instance[3], box[3]) - max(instance[1], box[1])
    area = (instance[2] - instance[0]) * (instance[3] - instance[1])
    return max(0, width) * max(0, height) / area if area > 0 else 0.0


class ToyWorldOracle:
    """Re-renders the images of one scene ToyWorld with objects recoloured.

    Reads the world's ``world.json`` once; each :meth:`recolour` rebuilds one scene from the
    world's seed and renders it twice (about 20 ms at the default 128 px on one core). Plain and
    picklable: one per Ray actor. ``root`` may be in an object store (``s3://…``).

    Raises:
        ValueError: ``root`` has no readable ``world.json`` of a scene world.
    """

    def __init__(self, root: str | Path | ObjectPath) -> None:
        self.root = as_path(root)
        self.config = _read_world(self.root)

    def scene(self, image_id: int) -> Scene:
        """The scene of image ``image_id``, as the world drew it. Raises ``ValueError``."""
        split, index = locate_image(self.config, image_id)
        return image_scene(self.config, split, index)[0]

    def recolour(
        self,
        image_id: int,
        bbox: tuple[float, float, float, float],
        category: str,
        phrase: str,
    ) -> np.ndarray:
        """Image ``image_id`` with the ``category`` instances in ``bbox`` in the colour ``phrase``
        names.

        Args:
            image_id: the world's image id (ids run across the splits).
            bbox: the box ``(x, y, w, h)`` in pixels (a detector's or the annotation's); pixels
                change only in the whole pixels it touches.
            category: the ToyWorld class (COCO name, any case: ``"Sports ball"``).
            phrase: an attributive phrase naming one palette colour of the class as whole words
                (``"a golden dog"``); persons take the outfit colours of their gender.

        Returns:
            ``[H, W, 3]`` uint8 RGB.

        Raises:
            ValueError: an unknown image id or class, a box outside the image, a phrase that
                names no (or more than one) colour of the class, or a box with no instance of
                the class (at least :data:`MIN_INSIDE` of its area inside the box).
        """
        known = {c.casefold(): c for c in self.config.classes}
        name = known.get(" ".join(category.casefold().split()))
        if name is None:
            raise ValueError(
                f"{category!r} is not a class of this ToyWorld ({', '.join(self.config.classes)})"
            )
        scene = self.scene(image_id)
        corners = _pixel_box(bbox, scene.size)
        instances = [
            i
            for i, obj in enumerate(scene.objects)
            if obj.category == name
            and _inside_share(_corners(obj, scene.size), corners) >= MIN_INSIDE
        ]
        if not instances:
            raise ValueError(f"box {tuple(bbox)} of image {image_id} holds no {name}")
        objects = list(scene.objects)
        for i in instances:
            obj = objects[i]
            colours = list(palette(name, obj.gender))
            colour = named_colour(phrase, colours)
            if colour is None:
                owner = f"{name} ({obj.gender})" if obj.gender else name
                raise ValueError(
                    f"{phrase!r} names no ToyWorld colour of {owner} ({', '.join(colours)})"
                )
            objects[i] = replace(obj, colour=colour)
        original = render(scene)
        recoloured = render(replace(scene, objects=tuple(objects)))
        x0, y0, x1, y1 = corners
        original[y0:y1, x0:x1] = recoloured[y0:y1, x0:x1]
        return original


def _corners(obj: SceneObject, size: int) -> tuple[int, int, int, int]:
    """The annotation box of ``obj`` as ``(x0, y0, x1, y1)`` pixels."""
    x, y, w, h = obj.bbox(size)
    return x, y, x + w, y + h


def _pixel_box(bbox: tuple[float, float, float, float], size: int) -> tuple[int, int, int, int]:
    """The whole pixels ``bbox`` touches, as ``(x0, y0, x1, y1)`` clipped to the image.

    Raises ``ValueError`` for a box that is not finite or has no area inside the image.
    """
    if len(bbox) != 4 or not all(math.isfinite(v) for v in bbox):
        raise ValueError(f"box must be 4 finite numbers (x, y, w, h), got {bbox!r}")
    x, y, w, h = bbox
    x0, y0 = max(0, math.floor(x)), max(0, math.floor(y))
    x1, y1 = min(size, math.ceil(x + w)), min(size, math.ceil(y + h))
    if x1 <= x0 or y1 <= y0:
        raise ValueError(f"box {tuple(bbox)} has no area inside the {size}x{size} image")
    return x0, y0, x1, y1


def recolour_toyworld_object(
    root: str | Path | ObjectPath,
    image_id: int,
    bbox: tuple[float, float, float, float],
    category: str,
    phrase: str,
) -> np.ndarray:
    """:meth:`ToyWorldOracle.recolour` for one image of the world at ``root`` (reads its
    ``world.json`` each call: for many images, keep a :class:`ToyWorldOracle`)."""
    return ToyWorldOracle(root).recolour(image_id, bbox, category, phrase)
