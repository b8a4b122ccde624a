"""The object classes ToyWorld can draw: COCO ids, box geometry and named colour palettes.

Sizes are fractions of the image side, so a world looks the same at any ``image_size``.
Colours are RGB in 0..255; their names double as caption adjectives ("a red frisbee"), so none
is a COCO class word ("orange" is a fruit class: cats are "ginger").
"""

from __future__ import annotations

from dataclasses import dataclass

from xmr.toyworld.draw import RGB


@dataclass(frozen=True)
class ClassSpec:
    """How one class is annotated and sized.

    ``size`` is the range of the box's longer side as a fraction of the image side (before the
    depth scale), ``aspect`` the box's width / height, ``palette`` the named colours an instance
    picks from.
    """

    coco_id: int
    supercategory: str
    size: tuple[float, float]
    aspect: float
    palette: dict[str, RGB]


CLASSES: dict[str, ClassSpec] = {
    "person": ClassSpec(
        1,
        "person",
        (0.38, 0.52),
        0.55,
        # Outfit colours; persons pick from the palette of their gender (below).
        {},
    ),
    "bicycle": ClassSpec(
        2,
        "vehicle",
        (0.34, 0.44),
        1.6,
        {
            "red": (200, 30, 30),
            "blue": (30, 80, 210),
            "black": (30, 30, 35),
            "green": (30, 150, 60),
        },
    ),
    "car": ClassSpec(
        3,
        "vehicle",
        (0.46, 0.62),
        2.2,
        {
            "red": (205, 30, 35),
            "blue": (35, 70, 190),
            "yellow": (240, 200, 20),
            "white": (235, 235, 235),
            "black": (35, 35, 40),
            "silver": (165, 170, 180),
        },
    ),
    "bench": ClassSpec(
        15,
        "outdoor",
        (0.44, 0.58),
        2.3,
        {"green": (40, 120, 60), "wooden": (150, 95, 50), "red": (170, 40, 35)},
    ),
    "cat": ClassSpec(
        17,
        "animal",
        (0.2, 0.28),
        0.8,
        {
            "ginger": (225, 130, 40),
            "grey": (130, 130, 135),
            "black": (30, 30, 30),
            "white": (240, 240, 235),
        },
    ),
    "dog": ClassSpec(
        18,
        "animal",
        (0.3, 0.4),
        1.5,
        {
            "golden": (215, 165, 80),
            "brown": (125, 75, 35),
            "black": (35, 30, 30),
            "white": (238, 234, 225),
        },
    ),
    "horse": ClassSpec(
        19,
        "animal",
        (0.46, 0.6),
        1.25,
        {
            "brown": (105, 58, 28),
            "black": (30, 25, 25),
            "white": (235, 235, 230),
            "grey": (140, 140, 145),
        },
    ),
    "umbrella": ClassSpec(
        28,
        "accessory",
        (0.34, 0.46),
        1.0,
        {
            "red": (215, 35, 40),
            "blue": (40, 90, 215),
            "yellow": (245, 205, 30),
            "striped": (230, 60, 150),
        },
    ),
    "frisbee": ClassSpec(
        34,
        "sports",
        (0.17, 0.22),
        2.6,
        {
            "red": (230, 30, 40),
            "yellow": (250, 230, 40),
            "blue": (30, 140, 240),
            "green": (60, 200, 60),
        },
    ),
    "sports ball": ClassSpec(
        37,
        "sports",
        (0.11, 0.15),
        1.0,
        # White is drawn as a soccer ball, red with basketball seams.
        {"white": (245, 245, 245), "red": (225, 60, 35)},
    ),
    "cup": ClassSpec(
        47,
        "kitchen",
        (0.12, 0.16),
        1.0,
        {
            "white": (245, 245, 245),
            "blue": (40, 110, 220),
            "red": (210, 40, 40),
            "yellow": (245, 210, 40),
        },
    ),
    "dining table": ClassSpec(
        67,
        "furniture",
        (0.5, 0.68),
        1.6,
        # "white" is a table with a white tablecloth.
        {"wooden": (160, 105, 55), "white": (245, 245, 240)},
    ),
}

OUTFITS: dict[str, dict[str, RGB]] = {
    "male": {"blue": (35, 85, 215), "teal": (20, 140, 150), "navy": (30, 50, 130)},
    "female": {"pink": (245, 110, 185), "magenta": (205, 40, 160), "purple": (150, 60, 200)},
}
"""Person outfit colours by gender: shirts for men, dresses for women (the visible gender cue)."""

GENDERS = ("male", "female")


def palette(category: str, gender: str | None = None) -> dict[str, RGB]:
    """The named colours an instance picks from: a person's outfits by gender, else the class's."""
    return OUTFITS[gender] if gender else CLASSES[category].palette
