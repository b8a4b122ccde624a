"""Which words of a caption name which object class.

COCO: the odmap paper's matching table (appendix A, table 4) plus every class name and its plural.
Flickr30k: the Flickr30k Entities phrase types, annotated per phrase, so no word table is needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TypeAlias

ClassWordTable: TypeAlias = Mapping[str, frozenset[str]]
"""Class name -> the lower-case words (or word sequences, space-separated) that name it."""

COCO_CLASSES: tuple[str, ...] = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog",
    "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella",
    "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball", "kite",
    "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich",
    "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote",
    "keyboard", "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator", "book",
    "clock", "vase", "scissors", "teddy bear", "hair drier", "toothbrush",
)  # fmt: skip
"""The 80 COCO object classes, in category-id order."""

# The odmap paper's table 4, verbatim (its spellings too: "siverware", "hydrate", "hydra",
# "gay"). The paper leaves out the class name itself; it is added below.
_PAPER_TABLE: dict[str, tuple[str, ...]] = {
    "person": (
        "man", "woman", "player", "child", "girl", "boy", "boys", "people", "lady", "guy", "kid",
        "kids", "surfer", "cowboy", "cowboys", "adult", "adults", "cop", "soldier", "police",
        "catcher", "pitcher", "jockey", "baby", "men", "women", "biker", "spectator", "rider",
        "batter", "gay", "anyone", "someone", "reporter", "somebody", "anybody", "everyone",
        "worker", "workers",
    ),
    "airplane": ("plane", "jet", "aircraft"),
    "bicycle": ("bike", "biking", "cycling"),
    "motorcycle": ("motor",),
    "bus": ("trolley",),
    "car": ("van", "taxi", "trunk", "truck", "suv"),
    "train": ("tram", "subway"),
    "traffic light": ("traffic",),
    "stop sign": ("sign",),
    "parking meter": ("meter",),
    "fire hydrant": ("hydrant", "hydrate", "hydra"),
    "bird": ("beak", "duck", "goose", "gull", "pigeon", "chicken", "penguin"),
    "cat": ("kitty", "kitten"),
    "dog": ("puppy", "puppies"),
    "sheep": ("lamb",),
    "horse": ("pony", "foal"),
    "cow": ("cattle", "oxen", "ox", "herd", "calves", "bull", "calf"),
    "handbag": ("bag",),
    "suitcase": ("bag", "luggage", "case"),
    "frisbee": ("disc", "disk", "frisby"),
    "sports ball": ("ball",),
    "baseball bat": ("bat",),
    "baseball glove": ("glove",),
    "skateboard": ("board", "skate"),
    "surfboard": ("board",),
    "snowboard": ("board",),
    "skis": ("ski",),
    "tennis racket": ("racket", "racquet"),
    "wine glass": ("glass", "wine", "beverage"),
    "bottle": ("thermos", "flask", "beer", "beverage"),
    "cup": ("glass", "mug", "beverage", "coffee", "tea"),
    "spoon": ("siverware",),
    "donut": ("doughnut", "dough"),
    "cake": ("dessert", "frosting"),
    "dining table": ("desk", "table", "tables"),
    "chair": ("stool",),
    "potted plant": ("plant", "flower"),
    "vase": ("pot", "vase"),
    "tv": ("television", "screen"),
    "laptop": ("computer", "monitor", "screen"),
    "cell phone": ("phone",),
    "refrigerator": ("fridge",),
    "book": ("novel",),
    "scissors": ("scissor",),
    "toothbrush": ("brush",),
    "hair drier": ("drier",),
    "teddy bear": ("teddy", "toy", "bear", "doll"),
}  # fmt: skip

_PLURALS: dict[str, str] = {
    "person": "people", "bicycle": "bicycles", "car": "cars", "motorcycle": "motorcycles",
    "airplane": "airplanes", "bus": "buses", "train": "trains", "truck": "trucks",
    "boat": "boats", "traffic light": "traffic lights", "fire hydrant": "fire hydrants",
    "stop sign": "stop signs", "parking meter": "parking meters", "bench": "benches",
    "bird": "birds", "cat": "cats", "dog": "dogs", "horse": "horses", "sheep": "sheep",
    "cow": "cows", "elephant": "elephants", "bear": "bears", "zebra": "zebras",
    "giraffe": "giraffes", "backpack": "backpacks", "umbrella": "umbrellas",
    "handbag": "handbags", "tie": "ties", "suitcase": "suitcases", "frisbee": "frisbees",
    "skis": "skis", "snowboard": "snowboards", "sports ball": "sports balls", "kite": "kites",
    "baseball bat": "baseball bats", "baseball glove": "baseball gloves",
    "skateboard": "skateboards", "surfboard": "surfboards", "tennis racket": "tennis rackets",
    "bottle": "bottles", "wine glass": "wine glasses", "cup": "cups", "fork": "forks",
    "knife": "knives", "spoon": "spoons", "bowl": "bowls", "banana": "bananas",
    "apple": "apples", "sandwich": "sandwiches", "orange": "oranges", "broccoli": "broccoli",
    "carrot": "carrots", "hot dog": "hot dogs", "pizza": "pizzas", "donut": "donuts",
    "cake": "cakes", "chair": "chairs", "couch": "couches", "potted plant": "potted plants",
    "bed": "beds", "dining table": "dining tables", "toilet": "toilets", "tv": "tvs",
    "laptop": "laptops", "mouse": "mice", "remote": "remotes", "keyboard": "keyboards",
    "cell phone": "cell phones", "microwave": "microwaves", "oven": "ovens",
    "toaster": "toasters", "sink": "sinks", "refrigerator": "refrigerators", "book": "books",
    "clock": "clocks", "vase": "vases", "scissors": "scissors", "teddy bear": "teddy bears",
    "hair drier": "hair driers", "toothbrush": "toothbrushes",
}  # fmt: skip

COCO_CLASS_WORDS: ClassWordTable = MappingProxyType(
    {name: frozenset((name, _PLURALS[name], *_PAPER_TABLE.get(name, ()))) for name in COCO_CLASSES}
)
"""COCO class -> its words: the class name, its plural and the paper's table-4 words."""

FLICKR30K_ENTITY_TYPES: tuple[str, ...] = (
    "people", "clothing", "bodyparts", "animals", "vehicles", "instruments", "scene", "other",
)  # fmt: skip
"""The phrase types of Flickr30k Entities."""

FLICKR30K_ODMAP_CLASSES: tuple[str, ...] = ("people", "animals", "vehicles", "instruments")
"""The 4 Flickr30k classes ODmAP removes and matches.

The odmap paper (§4.1) uses 4 classes on Flickr30k without naming them. These are the entity
types whose boxes are separable objects that can be cut out of an image; clothing and body
parts sit on people, "scene" is background and "other" is a catch-all.
"""
