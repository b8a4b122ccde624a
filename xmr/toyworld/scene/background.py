"""Textured backgrounds: grass, beach, indoor floor, road.

Each is a sky (or wall) above a ground band starting at ``horizon`` pixels from the top, with
multi-scale noise and a few structures (waves, planks, lane marks), so inpainting them is not
trivial. Everything is drawn from ``seed`` alone: a counterfactual re-render gets the same pixels.
"""

from __future__ import annotations

import cv2
import numpy as np

BACKGROUNDS = ("grass", "beach", "indoor", "road")


def smooth_noise(
    rng: np.random.Generator, height: int, width: int, cells: tuple[int, int]
) -> np.ndarray:
    """``[height, width]`` float32 noise of about unit amplitude, smooth over a ``cells`` grid.

    ``cells`` is ``(rows, cols)``: the number of independent values along each side.
    """
    grid = rng.standard_normal(cells).astype(np.float32)
    return cv2.resize(grid, (width, height), interpolation=cv2.INTER_CUBIC)


def _gradient(
    top: tuple[float, ...], bottom: tuple[float, ...], height: int, width: int
) -> np.ndarray:
    t = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None, None]
    colours = (1 - t) * np.asarray(top, np.float32) + t * np.asarray(bottom, np.float32)
    return np.broadcast_to(colours, (height, width, 3)).copy()


def _textured(
    base: tuple[int, int, int],
    rng: np.random.Generator,
    height: int,
    width: int,
    coarse: float,
    fine: float,
) -> np.ndarray:
    """``base`` colour (RGB) with coarse blotches and fine grain, amplitudes in grey levels."""
    texture = coarse * smooth_noise(rng, height, width, (max(2, height // 16), max(2, width // 16)))
    texture += fine * rng.standard_normal((height, width)).astype(np.float32)
    tint = np.asarray(base, np.float32) * rng.uniform(0.92, 1.08, 3).astype(np.float32)
    return tint + texture[:, :, None]


def _sky(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    top = np.array([110, 170, 230]) * rng.uniform(0.9, 1.05)
    sky = _gradient(tuple(top), (205, 228, 245), height, width)
    clouds = np.clip(smooth_noise(rng, height, width, (10, 3)) - 0.6, 0, None) * 60
    return sky + clouds[:, :, None]


def _grass(rng: np.random.Generator, size: int, horizon: int) -> np.ndarray:
    image = _sky(rng, size, size)
    ground = _textured((75, 145, 55), rng, size - horizon, size, 16, 3)
    # Blades: short vertical strokes, lighter and darker.
    n = size * 2
    ys = rng.integers(0, size - horizon - 3, n)
    xs = rng.integers(0, size, n)
    shades = rng.choice([-35.0, 30.0], n).astype(np.float32)
    for dy in range(3):
        ground[ys + dy, xs] += shades[:, None]
    image[horizon:] = ground
    # A dark tree line along the horizon.
    tree_h = (size * (0.04 + 0.05 * (smooth_noise(rng, 1, size, (1, 8))[0] + 1.5) / 3)).astype(int)
    rows = np.arange(size)[:, None]
    trees = (rows < horizon) & (rows >= horizon - tree_h[None, :])
    image[trees] = np.asarray((40, 85, 40), np.float32) + 10 * rng.standard_normal(
        (int(trees.sum()), 1)
    ).astype(np.float32)
    return image


def _beach(rng: np.random.Generator, size: int, horizon: int) -> np.ndarray:
    image = _sky(rng, size, size)
    sea_end = horizon + max(3, size // 9)
    sea = _textured((40, 110, 175), rng, sea_end - horizon, size, 8, 2)
    crest_rows = rng.integers(0, sea_end - horizon, 4)
    sea[crest_rows] += 55
    image[horizon:sea_end] = sea
    sand = _textured((220, 198, 145), rng, size - sea_end, size, 12, 4)
    image[sea_end:] = sand
    image[sea_end : sea_end + 2] = (240, 240, 235)  # surf line
    return image


def _indoor(rng: np.random.Generator, size: int, horizon: int) -> np.ndarray:
    wall_colours = [(235, 225, 200), (210, 215, 220), (205, 225, 205), (200, 215, 235)]
    wall = _textured(wall_colours[rng.integers(len(wall_colours))], rng, horizon, size, 5, 1)
    period = int(rng.integers(6, 12))
    wall[:, (np.arange(size) % period) < 2] -= 12  # wallpaper stripes
    # A window with a frame.
    w = int(size * rng.uniform(0.2, 0.3))
    h = min(horizon - 4, int(w * 1.2))
    if h > 8:
        x0 = int(rng.integers(2, size - w - 2))
        y0 = int(rng.integers(2, max(3, horizon - h - 1)))
        wall[y0 : y0 + h, x0 : x0 + w] = (250, 250, 250)
        wall[y0 + 2 : y0 + h - 2, x0 + 2 : x0 + w - 2] = (150, 200, 240)
        wall[y0 + h // 2, x0 : x0 + w] = (250, 250, 250)
    floor = _textured((150, 100, 60), rng, size - horizon, size, 6, 2)
    plank = max(3, size // 16)
    rows = np.arange(size - horizon)
    floor += (rng.uniform(-18, 18, size // plank + 2)[rows // plank])[:, None, None]
    floor[rows % plank == 0] -= 40  # seams
    grain = smooth_noise(rng, size - horizon, size, (max(2, (size - horizon) // 2), 4))
    floor += 8 * grain[:, :, None]
    image = np.empty((size, size, 3), np.float32)
    image[:horizon] = wall
    image[horizon:] = floor
    image[horizon : horizon + 2] = (90, 60, 40)  # skirting board
    return image


def _road(rng: np.random.Generator, size: int, horizon: int) -> np.ndarray:
    image = _sky(rng, size, size)
    verge_end = horizon + max(3, size // 12)
    image[horizon:verge_end] = _textured((80, 140, 60), rng, verge_end - horizon, size, 10, 3)
    road = _textured((100, 100, 105), rng, size - verge_end, size, 10, 4)
    road[:2] = (190, 190, 185)  # kerb
    lane = int((size - verge_end) * rng.uniform(0.45, 0.65))
    dash = max(4, size // 10)
    offset = int(rng.integers(0, 2 * dash))
    dashes = ((np.arange(size) + offset) % (2 * dash)) < dash
    road[lane : lane + max(2, size // 50), dashes] = (235, 235, 225)
    image[verge_end:] = road
    return image


_DRAW = {"grass": _grass, "beach": _beach, "indoor": _indoor, "road": _road}


def render_background(kind: str, size: int, horizon: int, seed: int) -> np.ndarray:
    """``[size, size, 3]`` float32 RGB in about 0..255; ground starts at row ``horizon``."""
    rng = np.random.default_rng(seed)
    return _DRAW[kind](rng, size, horizon)
