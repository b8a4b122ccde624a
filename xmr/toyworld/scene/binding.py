"""The attribute-binding test of a scene ToyWorld: exact renders whose captions differ only in
which colour goes with which object.

Two kinds of item, written to ``binding/`` when the world's ``binding`` section asks for them:

- **swap** (ARO's VG-Attribution idea, with the truth known): two objects of different classes
  in two different colours that both classes can have, side by side; the true caption ("a red
  car and a blue umbrella") against the one with the colours swapped ("a blue car and a red
  umbrella"). Same words, so a bag-of-words model cannot tell them apart.
- **counter** (the planted cause): one object of an ``attribute_bias`` class and one other
  object, drawn twice, identical but for that object's colour: its stereotyped colour ("a red
  car") and another of its palette ("a blue car"). A model that learned "cars are red" from the
  biased train split prefers the stereotyped caption, or image, in both directions.

Layout (paths relative to the world's folder)::

    binding/items.json                    the items, below
    binding/swap_{i:05d}.png              a swap item's image
    binding/counter_{i:05d}_{side}.png    a counter item's images, side "stereotype" / "counter"

``items.json`` is a list of::

    {"id": "swap/0", "kind": "swap", "image": "binding/swap_00000.png",
     "caption": "...", "negative_caption": "...", "objects": [["car", "red"], ...]}
    {"id": "counter/0", "kind": "counter", "class": "car", "stereotype": "red",
     "counter": "blue", "images": {"stereotype": "...", "counter": "..."},
     "captions": {"stereotype": "...", "counter": "..."}}

Item ``i`` of a kind draws everything from its own RNG (seed, kind, i): the test is the same
for a seed, whatever the world's other splits.
"""

from __future__ import annotations

import itertools
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from xmr.toyworld.scene.captions import PLACES, article, class_noun
from xmr.toyworld.scene.classes import CLASSES
from xmr.toyworld.scene.config import WorldConfig
from xmr.toyworld.scene.render import render
from xmr.toyworld.scene.sample import N_STYLE, Scene, SceneObject, finish_scene, object_size
from xmr.toyworld.world import save_png, write_json

BINDING_DIR = "binding"
ITEMS_FILE = "binding/items.json"
"""The item list, relative to the world's folder."""

SIDES = ("stereotype", "counter")
"""The two renders of a counter item."""

PLACE_PROB = 0.5
"""A binding caption ends with a place phrase ("on the road") with this probability."""


def _phrase(colour: str | None, category: str) -> str:
    words = f"{colour} {class_noun(category)}" if colour else class_noun(category)
    return f"{article(words)} {words}"


def swap_pairs(classes: tuple[str, ...]) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(a, b, shared colours)`` for every pair of non-person classes whose palettes share at
    least two colours (so their colours can be swapped), in a fixed order."""
    objects = [c for c in classes if c != "person"]
    pairs = []
    for a, b in itertools.combinations(objects, 2):
        shared = tuple(c for c in CLASSES[a].palette if c in CLASSES[b].palette)
        if len(shared) >= 2:
            pairs.append((a, b, shared))
    return pairs


def _rng(seed: int, kind: str, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(f"binding/{kind}".encode()), index])


def side_by_side(
    config: WorldConfig, rng: np.random.Generator, objects: list[tuple[str, str]]
) -> Scene:
    """A scene of ``objects`` (``(category, colour)``) standing on the ground side by side, left
    to right, each inside its own slot of the image width (no overlaps, no interactions)."""
    size = config.image_size
    background = config.backgrounds[int(rng.integers(len(config.backgrounds)))]
    horizon = int(size * rng.uniform(0.3, 0.45))
    slot = size / len(objects)
    placed = []
    for k, (category, colour) in enumerate(objects):
        bottom = rng.uniform(horizon + 0.4 * (size - horizon), size)
        scale = 0.8 + 0.4 * (bottom - horizon) / (size - horizon)
        w, h = object_size(category, size, scale, rng)
        shrink = min(1.0, 0.92 * slot / w)
        w, h = w * shrink, h * shrink
        x = k * slot + rng.uniform(0, slot - w)
        box = (round(x), round(bottom - h), max(2, round(w)), max(2, round(h)))
        placed.append(
            SceneObject(
                category=category,
                box=box,
                colour=colour,
                style=tuple(float(v) for v in rng.random(N_STYLE)),
                facing=1 if rng.random() < 0.5 else -1,
            )
        )
    far_to_near = sorted(placed, key=lambda o: o.box[1] + o.box[3])
    return finish_scene(config, rng, background, horizon, far_to_near)


def _place(rng: np.random.Generator, background: str) -> str | None:
    """A place phrase for ``background`` with probability :data:`PLACE_PROB`, else None."""
    places = PLACES[background]
    place = places[int(rng.integers(len(places)))]
    return place if rng.random() < PLACE_PROB else None


def _caption(phrases: list[str], place: str | None) -> str:
    """``phrases`` joined with "and", then the place: "A red car and a blue umbrella."."""
    text = " and ".join(phrases) + (f" {place}" if place else "")
    return text[0].upper() + text[1:] + "."


def swap_item(config: WorldConfig, index: int) -> tuple[dict[str, Any], Scene]:
    """Swap item ``index``: its ``items.json`` entry and its scene.

    Raises ``ValueError`` when no two classes of the world can swap colours.
    """
    pairs = swap_pairs(config.classes)
    if not pairs:
        raise ValueError("binding.swap_items: no two classes of this world share two colours")
    rng = _rng(config.seed, "swap", index)
    a, b, shared = pairs[int(rng.integers(len(pairs)))]
    colour_a, colour_b = (str(c) for c in rng.choice(shared, size=2, replace=False))
    if rng.random() < 0.5:
        (a, colour_a), (b, colour_b) = (b, colour_b), (a, colour_a)
    scene = side_by_side(config, rng, [(a, colour_a), (b, colour_b)])
    mentions = [(a, colour_a, colour_b), (b, colour_b, colour_a)]
    if rng.random() < 0.5:
        mentions.reverse()
    place = _place(rng, scene.background)
    entry = {
        "id": f"swap/{index}",
        "kind": "swap",
        "image": f"{BINDING_DIR}/swap_{index:05d}.png",
        "caption": _caption([_phrase(c, k) for k, c, _ in mentions], place),
        "negative_caption": _caption([_phrase(s, k) for k, _, s in mentions], place),
        "objects": [[a, colour_a], [b, colour_b]],
    }
    return entry, scene


def counter_item(config: WorldConfig, index: int) -> tuple[dict[str, Any], dict[str, Scene]]:
    """Counter item ``index``: its ``items.json`` entry and its two scenes by side.

    Items cycle through the world's ``attribute_bias`` rules; the other object is a class
    without a rule where there is one. Raises ``ValueError`` when the world has no rule.
    """
    if not config.attribute_bias:
        raise ValueError("binding.counter_items: needs an attribute_bias rule")
    rng = _rng(config.seed, "counter", index)
    rule = config.attribute_bias[index % len(config.attribute_bias)]
    others = [name for name in CLASSES[rule.category].palette if name != rule.colour]
    counter = others[int(rng.integers(len(others)))]
    ruled = {a.category for a in config.attribute_bias}
    candidates = [c for c in config.classes if c != "person" and c != rule.category]
    unruled = [c for c in candidates if c not in ruled]
    distractors = unruled or candidates
    if not distractors:
        raise ValueError("binding.counter_items: the world needs a second non-person class")
    other = distractors[int(rng.integers(len(distractors)))]
    other_colours = list(CLASSES[other].palette)
    other_colour = other_colours[int(rng.integers(len(other_colours)))]
    left_first = rng.random() < 0.5
    state = rng.bit_generator.state
    scenes = {}
    for side, colour in zip(SIDES, (rule.colour, counter), strict=True):
        rng.bit_generator.state = state  # the same draws: only the colour differs
        pair = [(rule.category, colour), (other, other_colour)]
        scenes[side] = side_by_side(config, rng, pair if left_first else pair[::-1])
    mention_first = rng.random() < 0.5
    place = _place(rng, scenes[SIDES[0]].background)

    def caption(colour: str) -> str:
        phrases = [_phrase(colour, rule.category), _phrase(None, other)]
        return _caption(phrases if mention_first else phrases[::-1], place)

    entry = {
        "id": f"counter/{index}",
        "kind": "counter",
        "class": rule.category,
        "stereotype": rule.colour,
        "counter": counter,
        "images": {side: f"{BINDING_DIR}/counter_{index:05d}_{side}.png" for side in SIDES},
        "captions": {
            side: caption(c) for side, c in zip(SIDES, (rule.colour, counter), strict=True)
        },
    }
    return entry, scenes


def write_binding(out: Path, config: WorldConfig) -> dict[str, int]:
    """Render the world's binding items into ``out/binding`` and write ``items.json``.

    Returns the counts ``world.json`` records: ``{"swap_items": n, "counter_items": m}``.
    """
    (out / BINDING_DIR).mkdir(exist_ok=True)
    entries = []
    for index in range(config.binding.swap_items):
        entry, scene = swap_item(config, index)
        save_png(render(scene), out / entry["image"])
        entries.append(entry)
    for index in range(config.binding.counter_items):
        entry, scenes = counter_item(config, index)
        for side in SIDES:
            save_png(render(scenes[side]), out / entry["images"][side])
        entries.append(entry)
    write_json(out / ITEMS_FILE, entries, indent=1)
    return {"swap_items": config.binding.swap_items, "counter_items": config.binding.counter_items}
