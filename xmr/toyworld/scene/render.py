"""Drawing a :class:`~xmr.toyworld.scene.sample.Scene`: background, objects, pixel noise.

Each object is drawn by a :class:`~xmr.toyworld.draw.Pen` on its own transparent layer the size of
its box (supersampled 2x, then box-filtered), so its pixels never leave its box: a re-render
without some classes equals the original everywhere outside their boxes. Silhouettes and colour
schemes per class are chosen to stay distinguishable at 64 px: upright figures with a pink dress
and long hair (women) or a blue shirt, trousers and short hair (men); long-legged horses with a
raised neck; low dogs with a floppy ear; sitting cats with pointed ears; cars with wheels and
windows; two-wheel bicycles; mugs with a handle; flat frisbees; soccer balls and basketballs;
tables; striped umbrella domes; slatted benches.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from PIL import Image, ImageOps

from xmr.toyworld.draw import BLACK, RGB, Pen, jitter, mix, shade, with_noise
from xmr.toyworld.scene.background import render_background
from xmr.toyworld.scene.classes import palette
from xmr.toyworld.scene.sample import Scene, SceneObject

SKINS: tuple[RGB, ...] = ((250, 215, 180), (225, 175, 130), (175, 120, 80), (115, 75, 50))
HAIRS: tuple[RGB, ...] = ((30, 25, 20), (95, 60, 30), (200, 160, 80), (60, 40, 30))


def _person(pen: Pen, obj: SceneObject, colour: RGB, target: tuple[float, float] | None) -> None:
    skin = SKINS[int(obj.style[1] * len(SKINS))]
    hair = HAIRS[int(obj.style[2] * len(HAIRS))]
    dark = shade(colour, 0.55)
    r = pen.H / pen.W  # height units -> width fractions

    def x(d: float) -> float:
        return 0.5 + d * r

    female = obj.gender == "female"
    legs = skin if female else jitter((45, 45, 70), obj.style[3], 0.5)
    if female:  # long hair, behind head and shoulders
        pen.rect(x(-0.12), 0.03, x(0.12), 0.34, hair, radius=0.06)
    if obj.relation == "ride":  # side view, one leg bent over the mount's flank
        pen.line([(x(0.0), 0.55), (x(0.14), 0.72), (x(0.09), 0.94)], legs, 0.09 if female else 0.11)
        pen.ellipse(x(0.05), 0.92, x(0.2), 1.0, BLACK)
    elif female:
        pen.rect(x(-0.075), 0.72, x(-0.03), 0.97, skin)
        pen.rect(x(0.03), 0.72, x(0.075), 0.97, skin)
    else:
        pen.rect(x(-0.11), 0.55, x(-0.012), 0.97, legs, shade(legs, 0.6))
        pen.rect(x(0.012), 0.55, x(0.11), 0.97, legs, shade(legs, 0.6))
    if obj.relation != "ride":
        pen.ellipse(x(-0.13), 0.93, x(-0.01), 1.0, BLACK)
        pen.ellipse(x(0.01), 0.93, x(0.13), 1.0, BLACK)
    if female:
        hem = 0.66 if obj.relation == "ride" else 0.77
        pen.polygon(
            [(x(-0.09), 0.2), (x(0.09), 0.2), (x(0.22), hem), (x(-0.22), hem)], colour, dark
        )
    else:
        pen.rect(x(-0.13), 0.2, x(0.13), 0.6, colour, dark, radius=0.04)
    hands = [(x(-0.2), 0.52), (x(0.2), 0.52)]
    if target is not None:
        tx, ty = min(0.95, max(0.05, target[0])), min(0.95, max(0.05, target[1]))
        hands[int(tx >= 0.5)] = (tx, ty)
    for side, hand in zip((-1, 1), hands, strict=True):
        pen.line([(x(0.11 * side), 0.25), hand], colour, 0.055)
        pen.ellipse(hand[0] - 0.03 * r, hand[1] - 0.03, hand[0] + 0.03 * r, hand[1] + 0.03, skin)
    pen.ellipse(x(-0.085), 0.02, x(0.085), 0.2, skin, shade(skin, 0.7))
    pen.pieslice(x(-0.092), 0.005, x(0.092), 0.17, 180, 360, hair)
    if female:  # fringe
        pen.rect(x(-0.09), 0.05, x(-0.05), 0.2, hair)
        pen.rect(x(0.05), 0.05, x(0.09), 0.2, hair)


def _dog(pen: Pen, colour: RGB, name: str) -> None:
    dark = shade(colour, 0.55)
    pen.line([(0.2, 0.45), (0.1, 0.3), (0.05, 0.14)], colour, 0.09)
    for x0 in (0.2, 0.3, 0.6, 0.7):
        pen.rect(x0, 0.52, x0 + 0.075, 0.97, colour, dark)
        pen.ellipse(x0 - 0.01, 0.92, x0 + 0.09, 1.0, dark)
    pen.ellipse(0.12, 0.3, 0.8, 0.72, colour, dark)
    pen.ellipse(0.63, 0.05, 0.9, 0.5, colour, dark)
    pen.ellipse(0.8, 0.24, 1.0, 0.47, mix(colour, (255, 255, 255), 0.25), dark)
    pen.ellipse(0.94, 0.25, 1.0, 0.34, BLACK)
    pen.ellipse(0.64, 0.06, 0.75, 0.45, dark)  # floppy ear
    pen.ellipse(0.79, 0.15, 0.84, 0.22, BLACK)
    pen.line([(0.7, 0.47), (0.8, 0.5)], (210, 30, 30), 0.06)  # collar


def _horse(pen: Pen, colour: RGB, name: str) -> None:
    dark = shade(colour, 0.5)
    mane = BLACK if sum(colour) > 180 else (90, 80, 75)
    pen.polygon([(0.17, 0.33), (0.1, 0.36), (0.02, 0.72), (0.09, 0.74), (0.15, 0.5)], mane)
    for x0 in (0.2, 0.29, 0.63, 0.72):
        pen.rect(x0, 0.5, x0 + 0.065, 0.94, colour, dark)
        pen.rect(x0 - 0.005, 0.93, x0 + 0.07, 1.0, BLACK)
    pen.ellipse(0.13, 0.27, 0.8, 0.63, colour, dark)
    pen.polygon([(0.6, 0.42), (0.7, 0.12), (0.8, 0.08), (0.82, 0.4)], colour, dark)
    pen.polygon(
        [(0.7, 0.1), (0.82, 0.02), (1.0, 0.22), (0.97, 0.3), (0.86, 0.27), (0.8, 0.2)], colour, dark
    )
    pen.polygon([(0.69, 0.1), (0.78, 0.03), (0.67, 0.42), (0.6, 0.4)], mane)
    pen.polygon([(0.76, 0.06), (0.79, -0.02), (0.83, 0.05)], dark)
    pen.ellipse(0.84, 0.1, 0.88, 0.15, BLACK)


def _cat(pen: Pen, colour: RGB, name: str) -> None:
    dark = shade(colour, 0.55)
    pen.line([(0.75, 0.95), (0.93, 0.87), (0.98, 0.62), (0.9, 0.48)], colour, 0.08)
    pen.ellipse(0.14, 0.4, 0.84, 1.0, colour, dark)
    pen.polygon([(0.2, 0.28), (0.24, 0.0), (0.44, 0.14)], colour, dark)
    pen.polygon([(0.52, 0.14), (0.72, 0.0), (0.76, 0.28)], colour, dark)
    pen.ellipse(0.2, 0.07, 0.76, 0.5, colour, dark)
    pen.polygon([(0.26, 0.22), (0.27, 0.07), (0.37, 0.15)], (240, 150, 170))
    pen.polygon([(0.59, 0.15), (0.69, 0.07), (0.7, 0.22)], (240, 150, 170))
    for cx in (0.36, 0.6):
        pen.ellipse(cx - 0.055, 0.22, cx + 0.055, 0.31, (190, 220, 60))
    pen.polygon([(0.44, 0.35), (0.52, 0.35), (0.48, 0.4)], (230, 120, 140))


def _car(pen: Pen, colour: RGB, name: str) -> None:
    dark = shade(colour, 0.55)
    pen.polygon([(0.2, 0.42), (0.3, 0.05), (0.7, 0.05), (0.82, 0.42)], colour, dark)
    glass = (165, 205, 235)
    pen.polygon([(0.27, 0.4), (0.34, 0.11), (0.48, 0.11), (0.48, 0.4)], glass)
    pen.polygon([(0.52, 0.4), (0.52, 0.11), (0.67, 0.11), (0.75, 0.4)], glass)
    if name == "yellow":  # a taxi sign
        pen.rect(0.44, 0.0, 0.56, 0.06, BLACK)
    pen.rect(0.0, 0.38, 1.0, 0.8, colour, dark, radius=0.14)
    pen.rect(0.93, 0.45, 0.99, 0.56, (250, 230, 120))
    pen.rect(0.01, 0.45, 0.04, 0.56, (200, 30, 30))
    r = pen.H / pen.W
    for cx in (0.22, 0.78):
        pen.ellipse(cx - 0.2 * r, 0.6, cx + 0.2 * r, 1.0, BLACK)
        pen.ellipse(cx - 0.08 * r, 0.72, cx + 0.08 * r, 0.88, (170, 170, 175))


def _bicycle(pen: Pen, colour: RGB, name: str) -> None:
    r = pen.H / pen.W
    for cx in (0.2, 0.8):
        pen.ring(cx - 0.3 * r, 0.38, cx + 0.3 * r, 0.98, BLACK, 0.07)
        pen.line([(cx, 0.4), (cx, 0.96)], (150, 150, 150), 0.02)
        pen.line([(cx - 0.28 * r, 0.68), (cx + 0.28 * r, 0.68)], (150, 150, 150), 0.02)
    rear, crank, head, seat, front = (0.2, 0.68), (0.47, 0.7), (0.74, 0.3), (0.4, 0.3), (0.8, 0.68)
    pen.line([rear, crank, head, seat, rear], colour, 0.07)
    pen.line([seat, crank], colour, 0.07)
    pen.line([head, front], colour, 0.07)
    pen.line([(0.4, 0.3), (0.39, 0.22)], BLACK, 0.05)
    pen.line([(0.32, 0.21), (0.46, 0.21)], BLACK, 0.08)
    pen.line([(0.74, 0.3), (0.72, 0.14), (0.81, 0.12)], BLACK, 0.06)
    pen.ellipse(crank[0] - 0.04, 0.63, crank[0] + 0.04, 0.77, BLACK)


def _cup(pen: Pen, colour: RGB, name: str) -> None:
    dark = shade(colour, 0.55) if sum(colour) < 600 else (90, 90, 100)
    pen.ring(0.5, 0.3, 0.98, 0.78, dark, 0.13)
    pen.rect(0.04, 0.14, 0.74, 1.0, colour, dark, radius=0.1)
    pen.ellipse(0.04, 0.04, 0.74, 0.24, (95, 55, 30), dark)


def _frisbee(pen: Pen, colour: RGB, name: str) -> None:
    dark = shade(colour, 0.6)
    pen.ellipse(0.0, 0.05, 1.0, 0.95, colour, dark)
    pen.ring(0.14, 0.28, 0.86, 0.74, dark, 0.1)
    pen.arc(0.08, 0.12, 0.7, 0.6, 190, 260, mix(colour, (255, 255, 255), 0.6), 0.1)


def _ball(pen: Pen, colour: RGB, name: str) -> None:
    if name == "white":  # a soccer ball
        pen.ellipse(0.0, 0.0, 1.0, 1.0, colour, (70, 70, 70))
        angles = np.deg2rad(90 + 72 * np.arange(5))
        pen.polygon([(0.5 + 0.17 * np.cos(a), 0.5 - 0.17 * np.sin(a)) for a in angles], BLACK)
        for a in angles + np.pi / 5:
            cx, cy = 0.5 + 0.36 * np.cos(a), 0.5 - 0.36 * np.sin(a)
            pen.ellipse(cx - 0.08, cy - 0.08, cx + 0.08, cy + 0.08, BLACK)
    else:  # basketball seams
        pen.ellipse(0.0, 0.0, 1.0, 1.0, colour, BLACK)
        pen.line([(0.5, 0.02), (0.5, 0.98)], BLACK, 0.05)
        pen.line([(0.02, 0.5), (0.98, 0.5)], BLACK, 0.05)
        pen.arc(-0.35, 0.1, 0.35, 0.9, -60, 60, BLACK, 0.05)
        pen.arc(0.65, 0.1, 1.35, 0.9, 120, 240, BLACK, 0.05)


def _table(pen: Pen, colour: RGB, name: str) -> None:
    cloth = name == "white"  # a white tablecloth
    wood = (160, 105, 55) if cloth else colour
    legs = shade(wood, 0.6)
    pen.rect(0.12, 0.3, 0.18, 0.86, shade(legs, 0.8))
    pen.rect(0.82, 0.3, 0.88, 0.86, shade(legs, 0.8))
    pen.polygon([(0.08, 0.0), (0.92, 0.0), (1.0, 0.42), (0.0, 0.42)], colour, shade(colour, 0.6))
    if cloth:
        pen.rect(0.0, 0.42, 1.0, 0.66, colour, (150, 150, 150))
        pen.rect(0.0, 0.6, 1.0, 0.66, (200, 40, 40))
        pen.rect(0.02, 0.66, 0.09, 1.0, legs)
        pen.rect(0.91, 0.66, 0.98, 1.0, legs)
        return
    for y in (0.1, 0.2, 0.31):
        pen.line([(0.1, y), (0.9, y)], shade(colour, 0.85), 0.015)
    pen.rect(0.0, 0.42, 1.0, 0.52, shade(colour, 0.75))
    pen.rect(0.02, 0.5, 0.09, 1.0, legs)
    pen.rect(0.91, 0.5, 0.98, 1.0, legs)


def _umbrella(pen: Pen, colour: RGB, name: str) -> None:
    pen.line([(0.5, 0.45), (0.5, 0.92)], (70, 55, 45), 0.04)
    pen.arc(0.38, 0.86, 0.5, 0.98, 0, 180, (70, 55, 45), 0.04)
    second = (250, 250, 250) if name == "striped" else shade(colour, 0.75)
    dark = shade(colour, 0.55)
    for k in range(6):
        fill = colour if k % 2 == 0 else second
        pen.pieslice(0.0, 0.04, 1.0, 0.9, 180 + 30 * k, 210 + 30 * k, fill, dark)
    pen.line([(0.5, 0.0), (0.5, 0.05)], (70, 55, 45), 0.04)


def _bench(pen: Pen, colour: RGB, name: str) -> None:
    dark = shade(colour, 0.55)
    metal = (55, 55, 60)
    pen.rect(0.07, 0.02, 0.11, 0.62, metal)
    pen.rect(0.89, 0.02, 0.93, 0.62, metal)
    pen.rect(0.02, 0.04, 0.98, 0.17, colour, dark)
    pen.rect(0.02, 0.23, 0.98, 0.36, colour, dark)
    pen.polygon([(0.0, 0.48), (1.0, 0.48), (0.97, 0.64), (0.03, 0.64)], shade(colour, 1.15), dark)
    pen.rect(0.05, 0.62, 0.1, 1.0, metal)
    pen.rect(0.9, 0.62, 0.95, 1.0, metal)


_DRAWERS: dict[str, Callable[[Pen, RGB, str], None]] = {
    "dog": _dog,
    "horse": _horse,
    "cat": _cat,
    "car": _car,
    "bicycle": _bicycle,
    "cup": _cup,
    "frisbee": _frisbee,
    "sports ball": _ball,
    "dining table": _table,
    "umbrella": _umbrella,
    "bench": _bench,
}


def draw_class(pen: Pen, category: str, colour: RGB, colour_name: str = "") -> None:
    """Draw an object of ``category`` (not a person) in ``colour`` over ``pen``'s whole box,
    as scenes draw it (a shop logo that shows the class, :mod:`xmr.toyworld.shop.render`)."""
    _DRAWERS[category](pen, colour, colour_name)


def draw_object(scene: Scene, index: int) -> Image.Image:
    """The RGBA layer of ``scene.objects[index]``, the size of its drawing box."""
    obj = scene.objects[index]
    x, y, w, h = obj.box
    pen = Pen(w, h)
    colour = jitter(palette(obj.category, obj.gender)[obj.colour], obj.style[0], obj.style[3])
    if obj.category == "person":
        held = [o for o in scene.objects if o.relation == "hold" and o.parent == index]
        target = None
        if held:
            hx, hy, hw, hh = held[0].box
            target = ((hx + hw / 2 - x) / w, (hy + hh / 2 - y) / h)
        _person(pen, obj, colour, target)
        return pen.layer()
    _DRAWERS[obj.category](pen, colour, obj.colour)
    layer = pen.layer()
    return ImageOps.mirror(layer) if obj.facing < 0 else layer


def render(scene: Scene, omit: frozenset[str] | set[str] = frozenset()) -> np.ndarray:
    """``[size, size, 3]`` uint8 RGB of ``scene`` without the objects of the classes in ``omit``.

    Background and noise depend on the scene's seeds only, so pixels outside the boxes of the
    omitted objects equal those of the full render.
    """
    size = scene.size
    background = render_background(scene.background, size, scene.horizon, scene.background_seed)
    canvas = Image.fromarray(np.clip(background, 0, 255).astype(np.uint8))
    for i, obj in enumerate(scene.objects):
        if obj.category not in omit:
            layer = draw_object(scene, i)
            canvas.paste(layer, obj.box[:2], layer)
    return with_noise(canvas, scene.noise_std, scene.noise_seed)
