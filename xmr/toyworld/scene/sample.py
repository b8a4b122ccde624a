"""Sampling a scene: which objects, where, with which interactions, genders and colours.

A :class:`Scene` is everything needed to draw an image; drawing it again without some classes
gives the exact counterfactual. Boxes are ``(x, y, w, h)`` in integer pixels; a drawing box may
stick out of the image, its annotation (:meth:`SceneObject.bbox`) is clipped to the image.

Interactions (``relation`` of a child object to its ``parent``) make the overlaps of the odmap
removal rule (§3.1) frequent:

- ``hold``: a frisbee, ball or cup lies inside its holder's box (a person's hand, a dog's mouth),
  so removing the holder removes it too (multi-class plan);
- ``on`` / ``under``: a cup on a dining table, a cat under one (multi-class plan);
- ``ride``: a person on a horse or bicycle overlaps it by about half (removing the mount would
  cover the rider: rejected by alpha1);
- a close-up dining table fills 65-80 % of the image (rejected by alpha3 from 70 %).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from xmr.toyworld.scene.classes import CLASSES, palette
from xmr.toyworld.scene.config import AttributeBias, WorldConfig

Box = tuple[int, int, int, int]

HOLDABLE = {"frisbee": ("person", "dog"), "sports ball": ("person", "dog"), "cup": ("person",)}
MOUNTS = ("horse", "bicycle")
N_STYLE = 4


@dataclass(frozen=True)
class SceneObject:
    """One drawn object.

    ``box`` is the drawing box ``(x, y, w, h)`` in pixels; ``colour`` names a palette entry of the
    class (persons: an outfit of their gender); ``style`` holds ``N_STYLE`` numbers in [0, 1)
    that drawers turn into small variations (hue jitter, skin tone, ...); ``facing`` is +1 (right)
    or -1 (left); ``parent`` indexes :attr:`Scene.objects` for an interaction ``relation``.
    """

    category: str
    box: Box
    colour: str
    style: tuple[float, ...]
    facing: int
    gender: str | None = None
    parent: int | None = None
    relation: str | None = None

    def bbox(self, size: int) -> Box:
        """The annotation box: the drawing box clipped to a ``size`` x ``size`` image."""
        x, y, w, h = self.box
        x0, y0 = max(0, x), max(0, y)
        x1, y1 = min(size, x + w), min(size, y + h)
        return (x0, y0, x1 - x0, y1 - y0)


@dataclass(frozen=True)
class Scene:
    """A whole image: background kind, horizon row, seeds, and objects in drawing order."""

    size: int
    background: str
    horizon: int
    background_seed: int
    noise_seed: int
    noise_std: float
    objects: tuple[SceneObject, ...]

    @property
    def counts(self) -> dict[str, int]:
        """Instances per class, in order of first appearance."""
        return dict(Counter(o.category for o in self.objects))


def sample_counts(config: WorldConfig, rng: np.random.Generator, *, biased: bool) -> dict[str, int]:
    """Instances per class. Unbiased: classes drawn independently (uniformly, with repeats).

    Biased: then each co-occurrence pair (a, b, p) applies: with ``a`` present, ``b`` is made
    present w.p. ``p`` (replacing an instance of an unrelated class when the image is full)
    and absent otherwise. Classes of pairs already applied are not touched again.
    """
    lay = config.layout
    picks: list[str] = []
    for _ in range(int(rng.integers(lay.min_objects, lay.max_objects + 1))):
        if picks and rng.random() < lay.repeat_prob:
            picks.append(picks[int(rng.integers(len(picks)))])
        else:
            picks.append(config.classes[int(rng.integers(len(config.classes)))])
    counts = Counter(picks)
    if not biased:
        return dict(counts)
    protected: set[str] = set()
    for pair in config.cooccurrence:
        if not counts[pair.a]:
            continue
        if rng.random() < pair.p:
            if not counts[pair.b]:
                if sum(counts.values()) >= lay.max_objects:
                    spare = sorted(c for c in counts if counts[c] and c not in protected | {pair.a})
                    if not spare:
                        continue
                    counts[spare[int(rng.integers(len(spare)))]] -= 1
                counts[pair.b] = 1
            protected |= {pair.a, pair.b}
        elif pair.b not in protected:
            counts[pair.b] = 0
            protected.add(pair.a)
    return {c: n for c, n in counts.items() if n}


def sample_gender(
    config: WorldConfig, present: set[str], rng: np.random.Generator, *, biased: bool
) -> str:
    """``male`` / ``female`` for one person. In biased splits the gender rules of the classes
    ``present`` decide (the mean of their probabilities of a woman), and a person no rule
    governs is a woman w.p. ``config.female_share``; elsewhere either gender w.p. ½."""
    if not biased:
        p_female = 0.5
    elif rules := [g for g in config.gender_bias if g.with_class in present]:
        p_female = float(np.mean([g.p if g.gender == "female" else 1 - g.p for g in rules]))
    else:
        p_female = config.female_share
    return "female" if rng.random() < p_female else "male"


def sample_colour(
    category: str, gender: str | None, rule: AttributeBias | None, rng: np.random.Generator
) -> str:
    """A palette colour of one instance: uniform, or with ``rule`` its colour w.p. ``rule.p`` and
    one of the class's other colours (uniformly) otherwise."""
    names = list(palette(category, gender))
    if rule is None:
        return names[int(rng.integers(len(names)))]
    if rng.random() < rule.p:
        return rule.colour
    others = [name for name in names if name != rule.colour]
    return others[int(rng.integers(len(others)))]


@dataclass
class _Item:
    """A mutable object while the layout is built."""

    category: str
    box: tuple[float, float, float, float] = (0, 0, 0, 0)
    parent: int | None = None
    relation: str | None = None
    gender: str | None = None
    facing: int = 1
    scale: float = 1.0  # depth scale of the sizes


def object_size(
    category: str, size: int, scale: float, rng: np.random.Generator
) -> tuple[float, float]:
    """Width and height in pixels of a new instance (longer side from the class's range)."""
    spec = CLASSES[category]
    side = rng.uniform(*spec.size) * size * scale
    if spec.aspect >= 1:
        return side, side / spec.aspect
    return side * spec.aspect, side


def _relations(items: list[_Item], config: WorldConfig, rng: np.random.Generator) -> None:
    """Pick riders, held objects, cups on / cats under tables."""
    lay = config.layout
    busy: set[int] = set()  # persons and dogs already riding or holding something
    mounts = [i for i, it in enumerate(items) if it.category in MOUNTS]
    for i, item in enumerate(items):
        if item.category == "person" and mounts and rng.random() < lay.ride_prob:
            item.parent, item.relation = mounts.pop(int(rng.integers(len(mounts)))), "ride"
            busy.add(i)
    tables = [i for i, it in enumerate(items) if it.category == "dining table"]
    under_used: set[int] = set()
    for item in items:
        if item.category in HOLDABLE:
            holders = [
                j
                for j, it in enumerate(items)
                if it.category in HOLDABLE[item.category] and j not in busy
            ]
            if item.category == "cup":
                holders += tables
            if holders and rng.random() < lay.attach_prob:
                j = holders[int(rng.integers(len(holders)))]
                item.parent = j
                item.relation = "on" if items[j].category == "dining table" else "hold"
                if item.relation == "hold":
                    busy.add(j)
        elif item.category == "cat":
            free = [j for j in tables if j not in under_used]
            if free and rng.random() < lay.attach_prob / 2:
                j = free[int(rng.integers(len(free)))]
                item.parent, item.relation = j, "under"
                under_used.add(j)


def _place_child(item: _Item, parent: _Item, size: int, rng: np.random.Generator) -> None:
    px, py, pw, ph = parent.box
    if item.relation == "ride":
        height = ph * (0.85 if parent.category == "horse" else 2.1) * rng.uniform(0.95, 1.08)
        width = height * CLASSES["person"].aspect
        bottom = py + ph * (0.62 if parent.category == "horse" else 0.78)
        seat = 0.45 if parent.category == "horse" else 0.42  # facing right; mirrored otherwise
        cx = px + pw * (seat if parent.facing > 0 else 1 - seat)
        item.box = (cx - width / 2, bottom - height, width, height)
        return
    w, h = object_size(item.category, size, parent.scale, rng)
    tabled = parent.category == "dining table"
    shrink = min(1.0, (0.9 if tabled else 0.55) * pw / w, (0.42 if tabled else 0.6) * ph / h)
    w, h = w * shrink, h * shrink
    if item.relation == "hold" and parent.category == "person":
        side = rng.random() < 0.5
        x = px if side else px + pw - w
        if item.category == "sports ball" and rng.random() < 0.5:
            y = py + ph - h  # at the feet
        else:
            y = py + ph * rng.uniform(0.42, 0.55) - h / 2
    elif item.relation == "hold":  # in a dog's mouth
        x = px + pw - w if parent.facing > 0 else px
        y = py + ph * 0.45 - h / 2
    elif item.relation == "on":
        x = px + rng.uniform(0.05, 0.95) * (pw - w)
        bottom = py + ph * rng.uniform(0.2, 0.42)
        y = max(py, bottom - h)
    else:  # under a table
        x = px + rng.uniform(0.15, 0.85) * (pw - w)
        y = py + ph - h
    item.box = (x, y, w, h)


def _group_shift(items: list[_Item], root: int, size: int, *, vertical: bool) -> None:
    """Shift a root and its children so the group fits inside the image where it can.

    Without ``vertical`` only sideways (behind a close-up table: cropped at the top instead).
    """
    members = [root] + [i for i, it in enumerate(items) if it.parent == root]
    x0 = min(items[i].box[0] for i in members)
    y0 = min(items[i].box[1] for i in members)
    x1 = max(items[i].box[0] + items[i].box[2] for i in members)
    y1 = max(items[i].box[1] + items[i].box[3] for i in members)
    dx = -x0 if x0 < 0 else min(0.0, size - x1)
    dy = (-y0 if y0 < 0 else min(0.0, size - y1)) if vertical else 0.0
    for i in members:
        x, y, w, h = items[i].box
        items[i].box = (x + dx, y + dy, w, h)


def finish_scene(
    config: WorldConfig,
    rng: np.random.Generator,
    background: str,
    horizon: int,
    objects: list[SceneObject],
) -> Scene:
    """The :class:`Scene` of ``objects`` (in drawing order): its background and noise seeds are
    the last draws from ``rng``."""
    return Scene(
        size=config.image_size,
        background=background,
        horizon=horizon,
        background_seed=int(rng.integers(2**63)),
        noise_seed=int(rng.integers(2**63)),
        noise_std=config.layout.noise_std,
        objects=tuple(objects),
    )


def gender_scene_counts(
    config: WorldConfig, rng: np.random.Generator, index: int
) -> tuple[dict[str, int], str]:
    """Instances per class and the persons' gender of image ``index`` of a gender split.

    Image ``index`` pairs one or two persons (two w.p. ``layout.repeat_prob``) with one instance
    of the ``index mod C``-th of the C :attr:`~WorldConfig.gender_classes`; its gender alternates
    from one round of the C classes to the next (women first), so each class gets as many
    images of men as of women (within one). The remaining objects are drawn as in an unbiased
    scene from the classes no gender rule names, so a caption's linked class is the image's.
    A world without gender rules gets persons alone, genders alternating image by image.
    """
    linked = config.gender_classes
    cls = linked[index % len(linked)] if linked else None
    gender = ("female", "male")[(index // max(1, len(linked))) % 2]
    drawn = sample_counts(config, rng, biased=False)
    persons = 2 if rng.random() < config.layout.repeat_prob else 1
    counts = {"person": persons, **({cls: 1} if cls else {})}
    room = max(0, config.layout.max_objects - sum(counts.values()))
    for category, n in drawn.items():
        if category in linked or category == "person" or room == 0:
            continue
        counts[category] = min(n, room)
        room -= counts[category]
    return counts, gender


def sample_scene(
    config: WorldConfig,
    rng: np.random.Generator,
    *,
    biased: bool,
    counts: dict[str, int] | None = None,
    gender: str | None = None,
) -> Scene:
    """Sample one scene. ``biased``: plant the configured co-occurrence, gender, colour rules.

    ``counts`` (instances per class) and ``gender`` (every person's) fix what the scene shows
    instead of drawing it (a gender split's image, :func:`gender_scene_counts`).
    """
    size = config.image_size
    if counts is None:
        counts = sample_counts(config, rng, biased=biased)
    items = [
        _Item(c, facing=1 if rng.random() < 0.5 else -1)
        for c, n in counts.items()
        for _ in range(n)
    ]
    for item in items:
        if item.category == "person":
            item.gender = gender or sample_gender(config, set(counts), rng, biased=biased)
    _relations(items, config, rng)

    background = config.backgrounds[int(rng.integers(len(config.backgrounds)))]
    horizon = int(size * rng.uniform(0.3, 0.45))
    tables = [it for it in items if it.category == "dining table" and it.parent is None]
    closeup = tables[0] if tables and rng.random() < config.layout.closeup_table_prob else None
    if closeup is not None:
        w = size * rng.uniform(0.94, 1.0)
        h = size * rng.uniform(0.7, 0.8)
        closeup.box = (rng.uniform(0, size - w), size - h, w, h)

    roots = [i for i, it in enumerate(items) if it.parent is None and it is not closeup]
    for i in roots:
        item = items[i]
        if closeup is not None:  # behind the table, further away: feet just behind its edge
            bottom = closeup.box[1] + closeup.box[3] * rng.uniform(0.0, 0.1)
            scale = rng.uniform(0.55, 0.75)
        else:
            bottom = rng.uniform(horizon + 0.12 * size, size)
            scale = 0.8 + 0.4 * (bottom - horizon) / (size - horizon)
        item.scale = scale
        w, h = object_size(item.category, size, scale, rng)
        x = rng.uniform(0, max(0.0, size - w))
        item.box = (x, bottom - h, w, h)
    # Children after parents: riders after mounts, held / tabled things after their holders.
    for relation in ("ride", "under", "hold", "on"):
        for item in items:
            if item.relation == relation:
                _place_child(item, items[item.parent], size, rng)
    for i in roots:
        _group_shift(items, i, size, vertical=closeup is None)

    def depth(i: int) -> tuple[float, int, int]:
        """Far to near by the root's bottom edge; a root's children right after it."""
        root = i if items[i].parent is None else items[i].parent
        _, y, _, h = items[root].box
        return (y + h, root, int(i != root))

    order = sorted(range(len(items)), key=depth)
    position = {old: new for new, old in enumerate(order)}
    rules = {a.category: a for a in config.attribute_bias} if biased else {}
    objects = []
    for i in order:
        item = items[i]
        x, y, w, h = item.box
        box = (round(x), round(y), max(2, round(w)), max(2, round(h)))
        objects.append(
            SceneObject(
                category=item.category,
                box=box,
                colour=sample_colour(item.category, item.gender, rules.get(item.category), rng),
                style=tuple(float(v) for v in rng.random(N_STYLE)),
                facing=item.facing,
                gender=item.gender,
                parent=None if item.parent is None else position[item.parent],
                relation=item.relation,
            )
        )
    return finish_scene(config, rng, background, horizon, objects)
