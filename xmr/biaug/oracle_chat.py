"""``--llm oracle``: a chat backend that answers BiAug's two prompts from a ToyWorld's ground truth.

A scene ToyWorld knows what every image holds (:meth:`~xmr.biaug.oracle.ToyWorldOracle.scene`),
so BiAug's questions have exact answers there. :class:`ToyWorldOracleChat` reads the question
back from the prompt (:func:`~xmr.biaug.prompts.read_object_proposal_messages`,
:func:`~xmr.biaug.prompts.read_attribute_messages`) and the image from ``ChatRequest.image``,
and answers as text in the asked form, which then goes through the same strict parsing and
validation (:mod:`xmr.biaug.answers`) as any LLM's answer:

- object proposals: a JSON array of the classes in the image, largest total (annotation) box
  area first, at most the asked number;
- attributes: CSV rows of the ``color`` category only: ToyWorld draws colours, and its shapes,
  materials and other properties have no values to vary, so those categories are declined (no
  row). A colour row is written for an asked object naming a class in the image whose instances
  all have one colour; mixed colours are declined (no phrase is true of all of them), and so
  are persons: their outfit colours are drawn by gender, the cue the gender-bias experiments
  measure, so recolouring an outfit would edit the gender cue, not an attribute. The negative
  is another colour of the class's palette, a choice seeded by ``(request.seed, image id,
  object)``.

With the world's renderer as the inpainter (``--fill render``) and annotation boxes
(``--boxes gt``), BiAug runs with perfect components: what it gains there is its ceiling.
"""

from __future__ import annotations

import csv
import io
import json
import re
import zlib
from collections.abc import Sequence
from pathlib import Path

from xmr.biaug.oracle import ToyWorldOracle, toyworld_class
from xmr.biaug.prompts import (
    ATTRIBUTE_COLUMNS,
    read_attribute_messages,
    read_object_proposal_messages,
)
from xmr.llm.chat import ChatRequest, ChatResult, ResultCallback, one_line
from xmr.toyworld.scene.captions import EXTRA_WORDS, NUMBERS, WORDS, article, class_noun
from xmr.toyworld.scene.classes import palette
from xmr.toyworld.scene.generate import locate_image
from xmr.toyworld.scene.sample import Scene

_IMAGE_NAME = re.compile(r"(\d{12})\.png")


def colour_phrase(category: str, colour: str, count: int) -> str:
    """The attributive phrase of ``count`` instances of ToyWorld class ``category`` in
    ``colour``, with the class's plain caption word: ``"a red car"``, ``"two golden dogs"``."""
    if count == 1:
        return f"{article(colour)} {colour} {class_noun(category)}"
    return f"{NUMBERS.get(count, 'several')} {colour} {class_noun(category, plural=True)}"


def _word_pattern(words: Sequence[str]) -> re.Pattern[str]:
    """Any of ``words`` as whole words (longest first, any case, any run of spaces inside)."""
    alternatives = sorted(words, key=len, reverse=True)
    inner = "|".join(r"\s+".join(map(re.escape, word.split())) for word in alternatives)
    return re.compile(rf"(?<![\w-])(?:{inner})(?![\w-])", re.IGNORECASE)


def coloured_caption(caption: str, category: str, colour: str, phrase: str) -> str:
    """``caption`` saying that its ``category`` object is ``colour``.

    When the caption names the class (a word of its captions, :data:`~xmr.toyworld.scene.
    captions.WORDS`), ``colour`` goes before the first such word, replacing a palette colour
    already there and fixing an ``a`` / ``an`` before it; a word that implies a colour ("taxi",
    "soccer ball") becomes the class's plain word. Otherwise ``", with <phrase>"`` is added
    before the final full stop. ``"A taxi on a street."`` -> ``"A red car on a street."``.
    """
    singular_words, plural_words = WORDS[category]
    implying = {word for (c, _), (word, _) in EXTRA_WORDS.items() if c == category}
    words = [w for w, _ in singular_words + plural_words] + sorted(implying) + [category]
    found = _word_pattern(words).search(caption)
    if found is None:
        body = caption.rstrip()
        if body.endswith("."):
            return f"{body[:-1]}, with {phrase}."
        return f"{body}, with {phrase}"
    start, noun = found.start(), found.group()
    if " ".join(noun.casefold().split()) in implying:
        noun = class_noun(category)
    before = caption[:start]
    previous = re.search(r"(?<![\w-])([\w-]+)\s+$", before)
    if previous and previous.group(1).casefold() in palette(category):
        before = before[: previous.start()]
    determiner = re.search(r"(?<![\w-])(an?|An?)\s+$", before)
    if determiner:
        fixed = article(colour)
        fixed = fixed.capitalize() if determiner.group(1)[0].isupper() else fixed
        before = f"{before[: determiner.start()]}{fixed} "
    if before:
        coloured = f"{colour} {noun}"
    else:  # the caption starts with the object
        coloured = f"{colour.capitalize()} {noun[0].lower()}{noun[1:]}"
    return before + coloured + caption[found.end() :]


def _negative_colour(colour: str, category: str, seed: int | None, image_id: int, name: str) -> str:
    """Another palette colour of ``category``: a choice seeded by (seed, image id, object)."""
    others = [c for c in palette(category) if c != colour]
    choice = zlib.crc32(json.dumps([seed, image_id, name]).encode())
    return others[choice % len(others)]


def proposal_answer(scene: Scene, max_objects: int) -> str:
    """The classes of ``scene`` as a JSON array, largest total annotation-box area first (ties
    by name), at most ``max_objects``."""
    areas: dict[str, int] = {}
    for obj in scene.objects:
        _, _, w, h = obj.bbox(scene.size)
        areas[obj.category] = areas.get(obj.category, 0) + w * h
    ranked = sorted(areas, key=lambda category: (-areas[category], category))
    return json.dumps(ranked[:max_objects])


def attribute_answer(
    scene: Scene,
    image_id: int,
    caption: str,
    objects: Sequence[str],
    categories: Sequence[str],
    seed: int | None,
) -> str:
    """The CSV answer (header :data:`~xmr.biaug.prompts.ATTRIBUTE_COLUMNS`) for ``objects`` of
    ``scene``: one ``color`` row per object naming a non-person class present whose instances
    share one colour; everything else declined (see the module docstring)."""
    rows: list[Sequence[str]] = [ATTRIBUTE_COLUMNS]
    present = list(scene.counts)
    for name in objects if "color" in categories else ():
        try:
            category = toyworld_class(name, present)
        except ValueError:
            continue  # not in the image (or not a ToyWorld class): nothing true to say
        colours = {o.colour for o in scene.objects if o.category == category}
        if category == "person" or len(colours) != 1:
            continue
        (colour,) = colours
        negative = _negative_colour(colour, category, seed, image_id, name)
        count = scene.counts[category]
        phrase = colour_phrase(category, colour, count)
        negative_phrase = colour_phrase(category, negative, count)
        rows.append(
            (
                name,
                "color",
                phrase,
                coloured_caption(caption, category, colour, phrase),
                negative_phrase,
                coloured_caption(caption, category, negative, negative_phrase),
            )
        )
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


class ToyWorldOracleChat:
    """A :class:`~xmr.llm.chat.ChatBackend` answering BiAug's prompts from ToyWorld ground truth.

    Each request must name its image (``ChatRequest.image``) as ``<world>/<split>/
    <image_id:012d>.png`` in a scene ToyWorld (``<world>/world.json``); one
    :class:`~xmr.biaug.oracle.ToyWorldOracle` is kept per world folder. A request it cannot
    answer (no or unknown image, not a scene ToyWorld, not one of BiAug's prompts) is an
    ``engine_error`` result with a one-line reason, never an exception. Deterministic: the same
    request gets the same answer. Plain and picklable (no Ray, no model, no network).
    """

    name = "oracle"
    model = "toyworld"

    def __init__(self) -> None:
        self._oracles: dict[Path, ToyWorldOracle] = {}

    def _image(self, image: str | None) -> tuple[ToyWorldOracle, int]:
        """The world and the image id of a request's image. Raises ``ValueError``."""
        if image is None:
            raise ValueError("the request names no image: the oracle answers about one")
        path = Path(image)
        named = _IMAGE_NAME.fullmatch(path.name)
        if named is None:
            raise ValueError(f"{image}: not a ToyWorld image (<world>/<split>/<id:012d>.png)")
        if not path.is_file():
            raise ValueError(f"{image}: no such image")
        root = path.absolute().parent.parent
        if root not in self._oracles:
            self._oracles[root] = ToyWorldOracle(root)
        oracle, image_id = self._oracles[root], int(named.group(1))
        split, _ = locate_image(oracle.config, image_id)
        if split != path.parent.name:
            raise ValueError(f"{image}: image {image_id} of this world is in split {split}")
        return oracle, image_id

    def answer(self, request: ChatRequest) -> str:
        """The answer text to ``request``. Raises ``ValueError`` when it cannot be answered."""
        oracle, image_id = self._image(request.image)
        scene = oracle.scene(image_id)
        prompt = request.messages
        asks = prompt[-1][1].rstrip()
        if asks.endswith("Objects:"):
            _, max_objects = read_object_proposal_messages(prompt)
            return proposal_answer(scene, max_objects)
        if asks.endswith("Answer:"):
            caption, objects, categories = read_attribute_messages(prompt)
            return attribute_answer(scene, image_id, caption, objects, categories, request.seed)
        raise ValueError("not one of BiAug's prompts (object proposals or attributes)")

    def complete(
        self, requests: Sequence[ChatRequest], on_result: ResultCallback | None = None
    ) -> list[ChatResult]:
        """One result per request, in order: the answer, or ``engine_error`` and why."""
        results = []
        for index, request in enumerate(requests):
            try:
                result = ChatResult(self.answer(request), "ok")
            except (OSError, ValueError) as exc:
                result = ChatResult("", "engine_error", one_line(f"oracle: {exc}"))
            if on_result is not None:
                on_result(index, result)
            results.append(result)
        return results

    def close(self) -> None:
        """Forget the worlds read so far."""
        self._oracles.clear()
