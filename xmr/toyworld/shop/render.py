"""Drawing shop products: one product photo on a plain light background, with its brand logo.

Products are flat front (garments, bags, caps, scarves) or side (shoes) views drawn with the
shared :class:`~xmr.toyworld.draw.Pen` in box fractions. The logo is a separate
layer pasted last inside its own box (:func:`logo_box`), so two renders of the same product with
different brands differ only there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps

from xmr.data.records import normalise_entity
from xmr.toyworld.draw import BLACK, RGB, Pen, jitter, mix, shade, with_noise
from xmr.toyworld.scene.render import draw_class
from xmr.toyworld.shop.catalogue import COLOURS, LOGO_COLOURS, SCENE_GLYPHS, SUBCATEGORIES
from xmr.toyworld.shop.config import Brand

Box = tuple[int, int, int, int]
WHITE: RGB = (246, 246, 242)
BADGE: RGB = (252, 252, 250)
Drawer = Callable[[Pen, RGB, int], None]


def _mirror(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(1 - x, y) for x, y in points]


def _neck(pen: Pen, colour: RGB, style: int, depth: float) -> None:
    """A crew neck (style 0) or v-neck (style 1): the garment's inside, seen through it."""
    inside = shade(colour, 0.55)
    if style == 0:
        pen.ellipse(0.39, -0.06, 0.61, 0.1, inside)
    else:
        pen.polygon([(0.38, 0.02), (0.62, 0.02), (0.5, depth)], inside)


def _tshirt(pen: Pen, colour: RGB, style: int) -> None:
    left = [(0.36, 0.02), (0.02, 0.26), (0.12, 0.44), (0.26, 0.36), (0.26, 1.0)]
    pen.polygon(left + _mirror(left)[::-1], colour, shade(colour, 0.6))
    _neck(pen, colour, style, 0.2)
    pen.line([(0.27, 0.96), (0.73, 0.96)], shade(colour, 0.8), 0.015)


def _shirt(pen: Pen, colour: RGB, style: int) -> None:
    if style == 0:  # long sleeves to the hem
        left = [(0.36, 0.02), (0.2, 0.08), (0.0, 0.9), (0.12, 0.93), (0.24, 0.42), (0.24, 1.0)]
    else:
        left = [(0.36, 0.02), (0.2, 0.08), (0.02, 0.36), (0.14, 0.44), (0.24, 0.34), (0.24, 1.0)]
    pen.polygon(left + _mirror(left)[::-1], colour, shade(colour, 0.6))
    collar = shade(colour, 1.25)
    pen.polygon([(0.36, 0.02), (0.5, 0.14), (0.38, 0.2)], collar, shade(colour, 0.6))
    pen.polygon([(0.64, 0.02), (0.5, 0.14), (0.62, 0.2)], collar, shade(colour, 0.6))
    pen.line([(0.5, 0.14), (0.5, 1.0)], shade(colour, 0.6), 0.015)
    for y in (0.3, 0.48, 0.66, 0.84):
        pen.ellipse(0.48, y - 0.02, 0.52, y + 0.02, WHITE)


def _sweater(pen: Pen, colour: RGB, style: int) -> None:
    left = [(0.36, 0.02), (0.2, 0.06), (0.0, 0.92), (0.14, 0.95), (0.25, 0.42), (0.25, 1.0)]
    pen.polygon(left + _mirror(left)[::-1], colour, shade(colour, 0.6))
    rib = shade(colour, 0.78)
    pen.rect(0.25, 0.88, 0.75, 1.0, rib)
    for x in (0.02, 0.86):  # cuffs
        pen.polygon([(x, 0.84), (x + 0.14, 0.87), (x + 0.12, 0.95), (x - 0.01, 0.92)], rib)
    for k in range(1, 10):  # ribbing of the hem band
        pen.line([(0.25 + 0.05 * k, 0.89), (0.25 + 0.05 * k, 0.99)], shade(colour, 0.6), 0.008)
    _neck(pen, colour, style, 0.26)


def _trousers(pen: Pen, colour: RGB, style: int) -> None:
    dark = shade(colour, 0.6)
    if style == 0:  # straight leg
        legs = [(0.1, 0.08), (0.9, 0.08), (0.9, 1.0), (0.54, 1.0), (0.5, 0.3), (0.46, 1.0)]
        legs.append((0.1, 1.0))
        waist = (0.1, 0.9)
    else:  # wide leg
        legs = [(0.16, 0.08), (0.84, 0.08), (1.0, 1.0), (0.56, 1.0), (0.5, 0.3), (0.44, 1.0)]
        legs.append((0.0, 1.0))
        waist = (0.16, 0.84)
    pen.polygon(legs, colour, dark)
    pen.rect(waist[0], 0.0, waist[1], 0.08, shade(colour, 0.8), dark)
    pen.line([(0.5, 0.08), (0.5, 0.28)], dark, 0.012)


def _shorts(pen: Pen, colour: RGB, style: int) -> None:
    dark = shade(colour, 0.6)
    legs = [(0.06, 0.14), (0.94, 0.14), (1.0, 1.0), (0.55, 1.0), (0.5, 0.6), (0.45, 1.0)]
    pen.polygon([*legs, (0.0, 1.0)], colour, dark)
    pen.rect(0.06, 0.0, 0.94, 0.14, shade(colour, 0.8), dark)
    if style == 0:  # a belt with a buckle
        pen.rect(0.06, 0.03, 0.94, 0.11, (70, 45, 25))
        pen.rect(0.44, 0.0, 0.56, 0.14, (200, 200, 205), (90, 90, 95))
    else:  # drawstrings
        pen.line([(0.46, 0.1), (0.42, 0.45)], WHITE, 0.03)
        pen.line([(0.54, 0.1), (0.58, 0.45)], WHITE, 0.03)


def _skirt(pen: Pen, colour: RGB, style: int) -> None:
    dark = shade(colour, 0.6)
    pen.polygon([(0.24, 0.1), (0.76, 0.1), (1.0, 1.0), (0.0, 1.0)], colour, dark)
    pen.rect(0.24, 0.0, 0.76, 0.1, shade(colour, 0.8), dark)
    if style == 1:  # pleats
        for k in range(1, 8):
            pen.line([(0.24 + 0.52 * k / 8, 0.1), (k / 8, 1.0)], dark, 0.012)


def _dress(pen: Pen, colour: RGB, style: int) -> None:
    dark = shade(colour, 0.6)
    if style == 1:  # short sleeves
        sleeve = [(0.33, 0.02), (0.12, 0.16), (0.2, 0.28), (0.31, 0.2)]
        pen.polygon(sleeve, colour, dark)
        pen.polygon(_mirror(sleeve), colour, dark)
    else:  # shoulder straps
        pen.line([(0.36, 0.0), (0.36, 0.08)], colour, 0.03)
        pen.line([(0.64, 0.0), (0.64, 0.08)], colour, 0.03)
    top = 0.02 if style == 1 else 0.07
    pen.polygon([(0.32, top), (0.68, top), (0.7, 0.4), (0.3, 0.4)], colour, dark)
    pen.polygon([(0.3, 0.38), (0.7, 0.38), (0.98, 1.0), (0.02, 1.0)], colour, dark)
    pen.line([(0.3, 0.39), (0.7, 0.39)], dark, 0.015)
    pen.pieslice(0.42, top - 0.07, 0.58, top + 0.07, 0, 180, shade(colour, 0.55))  # neckline


def _tote(pen: Pen, colour: RGB, style: int) -> None:
    dark = shade(colour, 0.55)
    if style == 0:  # two short handles
        for x0 in (0.2, 0.5):
            pen.arc(x0, 0.12, x0 + 0.3, 0.56, 180, 360, dark, 0.04)
    else:  # a long shoulder strap
        pen.line([(0.22, 0.36), (0.5, 0.01), (0.78, 0.36)], dark, 0.035)
    pen.rect(0.04, 0.32, 0.96, 1.0, colour, dark, radius=0.03)
    pen.line([(0.04, 0.4), (0.96, 0.4)], shade(colour, 0.8), 0.015)


def _backpack(pen: Pen, colour: RGB, style: int) -> None:
    dark = shade(colour, 0.55)
    pen.arc(0.38, 0.0, 0.62, 0.24, 180, 360, dark, 0.04)
    pen.rect(0.08, 0.1, 0.92, 1.0, colour, dark, radius=0.16)
    if style == 0:  # a zipped front pocket
        pen.rect(0.2, 0.55, 0.8, 0.93, shade(colour, 0.85), dark, radius=0.08)
        pen.line([(0.24, 0.62), (0.76, 0.62)], (190, 190, 195), 0.02)
    else:  # a flap with a strap
        flap = [(0.08, 0.16), (0.92, 0.16), (0.92, 0.5), (0.5, 0.6), (0.08, 0.5)]
        pen.polygon(flap, shade(colour, 0.8), dark)
        pen.rect(0.46, 0.55, 0.54, 0.8, dark)


def _clutch(pen: Pen, colour: RGB, style: int) -> None:
    dark = shade(colour, 0.55)
    pen.rect(0.0, 0.1, 1.0, 0.95, colour, dark, radius=0.06)
    if style == 0:  # an envelope flap with a clasp
        pen.polygon([(0.0, 0.1), (1.0, 0.1), (0.5, 0.62)], shade(colour, 0.82), dark)
        pen.ellipse(0.46, 0.52, 0.54, 0.66, (205, 175, 80))
    else:  # a zip along the top
        pen.line([(0.05, 0.24), (0.95, 0.24)], (190, 190, 195), 0.04)
        pen.rect(0.84, 0.2, 0.9, 0.42, (190, 190, 195))


def _sneaker(pen: Pen, colour: RGB, style: int) -> None:
    dark = shade(colour, 0.55)
    if style == 0:  # low top
        upper = [(0.02, 0.8), (0.0, 0.48), (0.26, 0.3), (0.44, 0.3), (0.6, 0.46), (0.86, 0.54)]
    else:  # high top, up the ankle
        upper = [(0.02, 0.8), (0.0, 0.02), (0.34, 0.0), (0.42, 0.34), (0.6, 0.46), (0.86, 0.54)]
    pen.polygon([*upper, (1.0, 0.68), (1.0, 0.8)], colour, dark)
    for k in range(4):  # laces
        x = 0.38 + 0.06 * k
        pen.line([(x, 0.36 + 0.04 * k), (x + 0.06, 0.4 + 0.04 * k)], WHITE, 0.03)
    pen.rect(0.0, 0.78, 1.0, 1.0, WHITE, (150, 150, 150), radius=0.05)


def _boot(pen: Pen, colour: RGB, style: int) -> None:
    dark = shade(colour, 0.55)
    pen.polygon(
        [(0.1, 0.0), (0.5, 0.0), (0.52, 0.52), (0.92, 0.66), (1.0, 0.88), (0.1, 0.88)],
        colour,
        dark,
    )
    pen.rect(0.06, 0.86, 1.0, 1.0, BLACK)
    if style == 0:  # laces up the front of the shaft
        for k in range(5):
            y = 0.1 + 0.09 * k
            pen.line([(0.44, y), (0.54, y + 0.05)], WHITE, 0.025)
    else:  # chelsea: elastic side panel and a pull tab
        pen.polygon([(0.24, 0.04), (0.38, 0.04), (0.34, 0.5), (0.28, 0.5)], BLACK)
        pen.rect(0.1, 0.0, 0.16, 0.12, dark)


def _cap(pen: Pen, colour: RGB, style: int) -> None:
    dark = shade(colour, 0.55)
    pen.pieslice(0.06, 0.08, 0.78, 1.28, 180, 360, colour, dark)
    if style == 0:  # a curved brim
        pen.pieslice(0.5, 0.5, 1.0, 0.84, 180, 360, shade(colour, 0.85), dark)
    else:  # a flat brim
        pen.rect(0.6, 0.6, 1.0, 0.72, shade(colour, 0.85), dark)
    pen.line([(0.08, 0.66), (0.76, 0.66)], dark, 0.03)
    pen.ellipse(0.39, 0.03, 0.45, 0.11, dark)


def _scarf(pen: Pen, colour: RGB, style: int) -> None:
    dark = shade(colour, 0.6)
    pen.rect(0.08, 0.0, 0.92, 0.9, colour, dark)
    if style == 0:  # fringes
        for k in range(8):
            x = 0.12 + 0.108 * k
            pen.line([(x, 0.9), (x, 1.0)], colour, 0.015)
    else:  # stripes across
        stripe = mix(colour, WHITE, 0.6)
        for y in (0.12, 0.3, 0.48, 0.66):
            pen.rect(0.08, y, 0.92, y + 0.06, stripe)


DRAWERS: dict[str, Drawer] = {
    "t-shirt": _tshirt,
    "shirt": _shirt,
    "sweater": _sweater,
    "trousers": _trousers,
    "shorts": _shorts,
    "skirt": _skirt,
    "dress": _dress,
    "tote": _tote,
    "backpack": _backpack,
    "clutch": _clutch,
    "sneaker": _sneaker,
    "boot": _boot,
    "cap": _cap,
    "scarf": _scarf,
}


def _glyph(pen: Pen, glyph: str, c: RGB) -> None:
    """Draw logo ``glyph`` (one of :data:`~xmr.toyworld.shop.catalogue.GLYPHS`) in ``c``."""
    match glyph:
        case "circle":
            pen.ellipse(0.2, 0.2, 0.8, 0.8, c)
        case "square":
            pen.rect(0.22, 0.22, 0.78, 0.78, c)
        case "triangle":
            pen.polygon([(0.5, 0.16), (0.84, 0.8), (0.16, 0.8)], c)
        case "diamond":
            pen.polygon([(0.5, 0.14), (0.86, 0.5), (0.5, 0.86), (0.14, 0.5)], c)
        case "cross":
            pen.rect(0.4, 0.16, 0.6, 0.84, c)
            pen.rect(0.16, 0.4, 0.84, 0.6, c)
        case "ring":
            pen.ring(0.18, 0.18, 0.82, 0.82, c, 0.15)
        case "bars":
            pen.rect(0.2, 0.16, 0.4, 0.84, c)
            pen.rect(0.6, 0.16, 0.8, 0.84, c)
        case "chevron":
            pen.line([(0.18, 0.3), (0.5, 0.7), (0.82, 0.3)], c, 0.17)
        case "star":
            angles = np.deg2rad(90 + 36 * np.arange(10))
            radii = np.where(np.arange(10) % 2 == 0, 0.36, 0.15)
            xs, ys = 0.5 + radii * np.cos(angles), 0.53 - radii * np.sin(angles)
            pen.polygon(list(zip(xs.tolist(), ys.tolist(), strict=True)), c)
        case "hourglass":
            pen.polygon([(0.2, 0.16), (0.8, 0.16), (0.5, 0.5)], c)
            pen.polygon([(0.2, 0.84), (0.8, 0.84), (0.5, 0.5)], c)
        case "tee":
            pen.rect(0.16, 0.18, 0.84, 0.36, c)
            pen.rect(0.41, 0.36, 0.59, 0.84, c)
        case "zig":
            pen.line([(0.2, 0.22), (0.8, 0.22), (0.2, 0.78), (0.8, 0.78)], c, 0.14)
        case _:
            raise ValueError(f"unknown logo glyph {glyph!r}")


@functools.lru_cache(maxsize=256)
def draw_logo(glyph: str, colour: str, side: int) -> Image.Image:
    """The RGBA logo badge, ``side`` x ``side`` pixels: ``glyph`` in logo colour ``colour``.

    Cached: callers must not modify the returned image.
    """
    pen = Pen(side, side)
    pen.rect(0.03, 0.03, 0.97, 0.97, BADGE, (60, 60, 64), radius=0.18)
    if glyph not in SCENE_GLYPHS:
        _glyph(pen, glyph, LOGO_COLOURS[colour])
        return pen.layer()
    badge = pen.layer()
    inner = max(1, round(side * 0.72))
    figure = Pen(inner, inner)
    draw_class(figure, glyph, LOGO_COLOURS[colour], colour)
    offset = (side - inner) // 2
    badge.alpha_composite(figure.layer(), (offset, offset))
    return badge


def logo_box(subcategory: str, box: Box, facing: int, side: int) -> Box:
    """Where the ``side`` px logo goes on a product drawn in ``box`` ``(x, y, w, h)``.

    Centred on the subcategory's ``logo_at`` point (mirrored for a product facing left) and kept
    inside the product's box.
    """
    x, y, w, h = box
    fx, fy = SUBCATEGORIES[subcategory].logo_at
    if facing < 0:
        fx = 1 - fx
    lx = min(max(round(x + fx * w - side / 2), x), x + w - side)
    ly = min(max(round(y + fy * h - side / 2), y), y + h - side)
    return (lx, ly, side, side)


@dataclass(frozen=True)
class Product:
    """One product photo: everything needed to draw it and to describe it.

    ``size`` is the image side and ``background`` its plain colour; ``style`` indexes the
    subcategory's styles; ``colour`` names a product colour, ``tint`` (two numbers in [0, 1))
    jitters it slightly; ``box`` is the product's drawing box ``(x, y, w, h)`` in pixels inside
    the image, ``facing`` -1 mirrors it; ``logo`` is the logo badge's box; ``noise_std`` (grey
    levels) and ``noise_seed`` give the sensor noise.
    """

    size: int
    background: RGB
    brand: Brand
    subcategory: str
    style: int
    colour: str
    composition: str
    season: str
    tint: tuple[float, float]
    box: Box
    facing: int
    logo: Box
    noise_std: float = 0.0
    noise_seed: int = 0

    @property
    def category(self) -> str:
        return SUBCATEGORIES[self.subcategory].category

    @property
    def style_word(self) -> str:
        return SUBCATEGORIES[self.subcategory].styles[self.style]

    @property
    def entities(self) -> dict[str, str]:
        """EI-CLIP's entity groups of the product, in ``normalise_entity`` form."""
        return {
            "brand": self.brand.entity,
            "category": self.category,
            "subcategory": self.subcategory,
            "season": normalise_entity(self.season),
            "composition": self.composition,
        }


def render_product(product: Product) -> np.ndarray:
    """``[size, size, 3]`` uint8 RGB of ``product`` on its plain background, logo on top."""
    size = product.size
    canvas = Image.new("RGB", (size, size), product.background)
    x, y, w, h = product.box
    pen = Pen(w, h)
    DRAWERS[product.subcategory](pen, jitter(COLOURS[product.colour], *product.tint), product.style)
    layer = pen.layer()
    if product.facing < 0:
        layer = ImageOps.mirror(layer)
    canvas.paste(layer, (x, y), layer)
    lx, ly, side, _ = product.logo
    badge = draw_logo(product.brand.glyph, product.brand.colour, side)
    canvas.paste(badge, (lx, ly), badge)
    return with_noise(canvas, product.noise_std, product.noise_seed)
