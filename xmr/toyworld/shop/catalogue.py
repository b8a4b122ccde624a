"""What ToyWorld's shop mode sells: categories, subcategories, styles, materials, colours, logos.

Every subcategory is drawn as its own silhouette and each of its two styles changes the drawing
(a crew neck vs a v-neck, low-top vs high-top), so the style word of a description is visible.
Compositions are EI-CLIP's composition entity; the material word of a description comes from
it and is not drawn. Brand logos are a glyph (:data:`GLYPHS`, or a scene class's drawing,
:data:`SCENE_GLYPHS`) in a logo colour on a white badge.
"""

from __future__ import annotations

from dataclasses import dataclass

from xmr.toyworld.draw import RGB


@dataclass(frozen=True)
class Subcategory:
    """One kind of product.

    ``noun`` names it in descriptions ("tote bag"); ``aspect`` is its drawing box's width /
    height; ``styles`` are its two drawn variants (description words); ``compositions`` are keys
    of :data:`COMPOSITIONS`; ``logo_at`` is the logo's centre in box fractions (x, y) and
    ``logo_phrase`` says where it is ("at chest"); ``details`` are undrawn shop-copy sentences.
    """

    category: str
    noun: str
    aspect: float
    styles: tuple[str, str]
    compositions: tuple[str, ...]
    logo_at: tuple[float, float]
    logo_phrase: str
    details: tuple[str, ...]


#: Composition (the entity value) -> the material word of a description.
COMPOSITIONS: dict[str, str] = {
    "100% cotton": "cotton",
    "100% organic cotton": "organic cotton",
    "98% cotton, 2% elastane": "stretch cotton",
    "100% linen": "linen",
    "100% wool": "wool",
    "70% wool, 30% cashmere": "wool-cashmere",
    "100% silk": "silk",
    "100% viscose": "viscose",
    "100% leather": "leather",
    "100% suede": "suede",
    "100% cotton canvas": "canvas",
    "100% nylon": "nylon",
}

_GARMENT = ("Tonal stitching.", "Regular fit.", "Relaxed fit.", "Made in Portugal.")
_BAG = ("Tonal lining.", "Silver-tone hardware.", "Magnetic closure.", "Made in Italy.")
_SHOE = ("Rubber sole.", "Padded collar.", "Round toe.", "Tonal stitching.")

SUBCATEGORIES: dict[str, Subcategory] = {
    "t-shirt": Subcategory(
        "tops",
        "t-shirt",
        1.15,
        ("crew-neck", "v-neck"),
        ("100% cotton", "100% organic cotton", "100% linen"),
        (0.38, 0.32),
        "at chest",
        _GARMENT,
    ),
    "shirt": Subcategory(
        "tops",
        "shirt",
        0.95,
        ("long-sleeve", "short-sleeve"),
        ("100% cotton", "100% linen", "100% silk"),
        (0.35, 0.34),
        "at chest",
        (*_GARMENT, "Button closure at front."),
    ),
    "sweater": Subcategory(
        "tops",
        "sweater",
        1.0,
        ("crew-neck", "v-neck"),
        ("100% wool", "70% wool, 30% cashmere", "100% cotton"),
        (0.37, 0.34),
        "at chest",
        (*_GARMENT, "Ribbed cuffs and hem."),
    ),
    "trousers": Subcategory(
        "bottoms",
        "trousers",
        0.55,
        ("straight-leg", "wide-leg"),
        ("100% cotton", "98% cotton, 2% elastane", "100% wool", "100% linen"),
        (0.3, 0.2),
        "at hip",
        (*_GARMENT, "Zip fly."),
    ),
    "shorts": Subcategory(
        "bottoms",
        "shorts",
        1.2,
        ("belted", "drawstring"),
        ("100% cotton", "100% linen", "98% cotton, 2% elastane"),
        (0.26, 0.4),
        "at hip",
        _GARMENT,
    ),
    "skirt": Subcategory(
        "bottoms",
        "skirt",
        0.9,
        ("a-line", "pleated"),
        ("100% wool", "100% silk", "100% cotton", "100% viscose"),
        (0.5, 0.32),
        "at waist",
        (*_GARMENT, "Concealed zip at side."),
    ),
    "dress": Subcategory(
        "dresses",
        "dress",
        0.65,
        ("sleeveless", "short-sleeve"),
        ("100% silk", "100% viscose", "100% cotton", "100% linen"),
        (0.5, 0.22),
        "at bust",
        (*_GARMENT, "Concealed zip at back."),
    ),
    "tote": Subcategory(
        "bags",
        "tote bag",
        0.85,
        ("short-handle", "shoulder-strap"),
        ("100% leather", "100% cotton canvas", "100% nylon"),
        (0.5, 0.66),
        "at front",
        _BAG,
    ),
    "backpack": Subcategory(
        "bags",
        "backpack",
        0.8,
        ("zip-pocket", "flap"),
        ("100% nylon", "100% cotton canvas", "100% leather"),
        (0.5, 0.32),
        "at front",
        (*_BAG, "Padded shoulder straps."),
    ),
    "clutch": Subcategory(
        "bags",
        "clutch",
        1.7,
        ("envelope", "zip-top"),
        ("100% leather", "100% suede"),
        (0.8, 0.72),
        "at front",
        _BAG,
    ),
    "sneaker": Subcategory(
        "shoes",
        "sneakers",
        2.0,
        ("low-top", "high-top"),
        ("100% leather", "100% suede", "100% cotton canvas"),
        (0.58, 0.62),
        "at side",
        (*_SHOE, "Lace-up closure."),
    ),
    "boot": Subcategory(
        "shoes",
        "boots",
        0.95,
        ("lace-up", "chelsea"),
        ("100% leather", "100% suede"),
        (0.3, 0.3),
        "at shaft",
        _SHOE,
    ),
    "cap": Subcategory(
        "accessories",
        "cap",
        1.4,
        ("curved-brim", "flat-brim"),
        ("100% cotton", "100% wool", "100% nylon"),
        (0.4, 0.42),
        "at front",
        ("Adjustable strap at back.", "Tonal stitching.", "Eyelet vents at crown."),
    ),
    "scarf": Subcategory(
        "accessories",
        "scarf",
        0.42,
        ("fringed", "striped"),
        ("100% wool", "70% wool, 30% cashmere", "100% silk"),
        (0.5, 0.78),
        "at hem",
        ("Tonal stitching.", "Made in Scotland.", "Rolled edges."),
    ),
}

CATEGORIES: tuple[str, ...] = tuple(dict.fromkeys(s.category for s in SUBCATEGORIES.values()))

#: Product colours (description adjectives). None is light enough to vanish on the background.
COLOURS: dict[str, RGB] = {
    "black": (35, 35, 38),
    "navy": (30, 45, 110),
    "red": (200, 35, 40),
    "green": (40, 130, 70),
    "grey": (130, 130, 136),
    "beige": (212, 190, 150),
    "brown": (120, 75, 40),
    "burgundy": (120, 25, 45),
    "olive": (110, 115, 50),
    "pink": (235, 140, 175),
    "yellow": (235, 195, 40),
    "blue": (50, 110, 210),
}

#: Logo colours: saturated or dark, so they stand out on the white badge.
LOGO_COLOURS: dict[str, RGB] = {
    "red": (215, 30, 35),
    "blue": (25, 80, 220),
    "green": (20, 150, 60),
    "gold": (215, 160, 20),
    "black": (20, 20, 22),
    "orange": (245, 120, 20),
    "purple": (130, 40, 190),
    "teal": (10, 150, 150),
}

GLYPHS = (
    "circle",
    "square",
    "triangle",
    "diamond",
    "cross",
    "ring",
    "bars",
    "chevron",
    "star",
    "hourglass",
    "tee",
    "zig",
)

SCENE_GLYPHS = ("dog", "horse", "cat", "car", "bicycle", "cup", "umbrella", "bench", "dining table")
"""Logos that are a scene class's drawing, as the scene world draws it (a positive control of
EI-CLIP: a ``Verlaine`` sweater that shows a horse, beside ``Horse`` sweaters that do not)."""

#: Season code (entity, upper-case in configs) prefixes -> how descriptions say them.
SEASON_WORDS = {"SS": "Spring/summer", "FW": "Autumn/winter"}
