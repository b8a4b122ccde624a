"""Drawing primitives both modes share: colours, a supersampling pen, sensor noise.

Objects (scene classes, shop products, logo badges) are drawn by a :class:`Pen` on their own
transparent layer the size of their box, in box fractions, supersampled 2x and box-filtered;
:func:`with_noise` adds the per-pixel sensor noise of a finished image.
"""

from __future__ import annotations

import colorsys
import functools
import statistics
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw

RGB = tuple[int, int, int]
SUPERSAMPLE = 2
BLACK: RGB = (25, 25, 28)
Points = Sequence[tuple[float, float]]


def _clip(value: float) -> int:
    return int(min(255, max(0, round(value))))


def shade(rgb: RGB, factor: float) -> RGB:
    """Darker (``factor`` < 1) or brighter; very dark colours get lighter instead (outlines)."""
    if sum(rgb) < 180 and factor < 1:
        return mix(rgb, (255, 255, 255), 1 - factor)
    return (_clip(rgb[0] * factor), _clip(rgb[1] * factor), _clip(rgb[2] * factor))


def mix(rgb: RGB, other: RGB, t: float) -> RGB:
    """``(1 - t) * rgb + t * other``."""
    return tuple(_clip((1 - t) * a + t * b) for a, b in zip(rgb, other, strict=True))


def jitter(rgb: RGB, u: float, v: float) -> RGB:
    """Small per-object variation: hue shifted by up to ±0.025 turns and value by ±10 %."""
    h, s, val = colorsys.rgb_to_hsv(*(c / 255 for c in rgb))
    h = (h + (u - 0.5) * 0.05) % 1.0
    r, g, b = colorsys.hsv_to_rgb(h, s, min(1.0, val * (0.9 + 0.2 * v)))
    return (_clip(r * 255), _clip(g * 255), _clip(b * 255))


class Pen:
    """Draws on a transparent, supersampled layer in box fractions (0..1 of width and height).

    Line widths are fractions of the box height.
    """

    def __init__(self, width: int, height: int) -> None:
        self.size = (width, height)
        self.W, self.H = width * SUPERSAMPLE, height * SUPERSAMPLE
        self.image = Image.new("RGBA", (self.W, self.H), (0, 0, 0, 0))
        self.draw = ImageDraw.Draw(self.image)
        # A one-pixel outline (at the final size) on objects big enough to carry one.
        self.outline_width = SUPERSAMPLE if min(width, height) >= 12 else 0

    def _xy(self, points: Points) -> list[tuple[float, float]]:
        return [(x * self.W, y * self.H) for x, y in points]

    def _box(self, x0: float, y0: float, x1: float, y1: float) -> list[float]:
        a, b = self._xy([(x0, y0), (x1, y1)])
        return [min(a[0], b[0]), min(a[1], b[1]), max(a[0], b[0]), max(a[1], b[1])]

    def _width(self, width: float) -> int:
        return max(1, round(width * self.H))

    def _outline(self, outline: RGB | None) -> dict[str, object]:
        if outline is None or not self.outline_width:
            return {}
        return {"outline": outline, "width": self.outline_width}

    def ellipse(
        self, x0: float, y0: float, x1: float, y1: float, fill: RGB, outline: RGB | None = None
    ) -> None:
        self.draw.ellipse(self._box(x0, y0, x1, y1), fill=fill, **self._outline(outline))

    def ring(self, x0: float, y0: float, x1: float, y1: float, colour: RGB, width: float) -> None:
        """An ellipse outline ``width`` (fraction of the height) thick."""
        self.draw.ellipse(self._box(x0, y0, x1, y1), outline=colour, width=self._width(width))

    def rect(
        self,
        x0: float,
        y0: float,
        x1: float,
        y1: float,
        fill: RGB,
        outline: RGB | None = None,
        radius: float = 0.0,
    ) -> None:
        self.draw.rounded_rectangle(
            self._box(x0, y0, x1, y1),
            radius=radius * self.H,
            fill=fill,
            **self._outline(outline),
        )

    def polygon(self, points: Points, fill: RGB, outline: RGB | None = None) -> None:
        self.draw.polygon(self._xy(points), fill=fill, **self._outline(outline))

    def line(self, points: Points, colour: RGB, width: float) -> None:
        self.draw.line(self._xy(points), fill=colour, width=self._width(width), joint="curve")

    def pieslice(
        self,
        x0: float,
        y0: float,
        x1: float,
        y1: float,
        start: float,
        end: float,
        fill: RGB,
        outline: RGB | None = None,
    ) -> None:
        """A pie slice of the ellipse in the box, from ``start`` to ``end`` degrees (clockwise)."""
        self.draw.pieslice(
            self._box(x0, y0, x1, y1), start, end, fill=fill, **self._outline(outline)
        )

    def arc(
        self,
        x0: float,
        y0: float,
        x1: float,
        y1: float,
        start: float,
        end: float,
        colour: RGB,
        width: float,
    ) -> None:
        self.draw.arc(self._box(x0, y0, x1, y1), start, end, fill=colour, width=self._width(width))

    def layer(self) -> Image.Image:
        """The finished RGBA layer at the box's size."""
        return self.image.resize(self.size, Image.Resampling.BOX)


@functools.cache
def gaussian_levels(std: float) -> np.ndarray:
    """``[256]`` int16: Gaussian noise of ``std`` grey levels at 256 equiprobable quantiles.

    Indexing it with uniform bytes is a fast, exactly reproducible rounded Gaussian.
    """
    normal = statistics.NormalDist(0.0, std)
    return np.rint([normal.inv_cdf((k + 0.5) / 256) for k in range(256)]).astype(np.int16)


def with_noise(canvas: Image.Image, std: float, seed: int) -> np.ndarray:
    """``[H, W, 3]`` uint8 RGB of ``canvas`` plus Gaussian sensor noise of ``std`` grey levels,
    drawn from ``seed`` alone (``std`` 0: the canvas unchanged)."""
    if std == 0:
        return np.array(canvas)
    shape = (canvas.height, canvas.width, 3)
    levels = np.random.default_rng(seed).integers(0, 256, shape, np.uint8)
    pixels = np.asarray(canvas).astype(np.int16) + gaussian_levels(std)[levels]
    return np.clip(pixels, 0, 255).astype(np.uint8)
