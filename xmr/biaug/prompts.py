"""The two LLM prompts of BiAug (paper §3.1-§3.2): object proposals, then attribute decoupling.

Each builder returns chat messages as ``((role, content), ...)`` with roles ``system`` and
``user``, ready for any chat backend. Dataset text (captions, object names) enters a prompt
JSON-encoded, so quotes or line breaks in a caption cannot end the instruction around it.

The wording and the few-shot examples are this project's own; only the structure follows the
paper's appendix C (a role in the system message; definitions, steps, format, examples and the
input in the user message). The answers are parsed strictly by :mod:`xmr.biaug.answers`.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Sequence

Messages = tuple[tuple[str, str], ...]
"""Chat messages in order, each ``(role, content)``; roles are ``system`` and ``user``."""

ATTRIBUTE_CATEGORIES = ("color", "shape", "material", "other")
"""The attribute categories of paper §3.2, in prompt order."""

ATTRIBUTE_COLUMNS = (
    "object",
    "category",
    "phrase",
    "caption",
    "negative_phrase",
    "negative_caption",
)
"""The header row of an attribute answer (CSV), in column order."""

_CATEGORY_MEANINGS = {
    "color": "the colour or colour pattern of the object",
    "shape": "its form, outline, size or build",
    "material": "what it is made of, or the look and feel of its surface",
    "other": "one further visible property the caption hints at (state, age, kind, condition)",
}

_OBJECT_EXAMPLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Two kids flying a kite on a windy beach.",
        ("kite", "child", "sand", "sea", "sky"),
    ),
    (
        "A stack of pancakes drizzled with syrup.",
        ("pancake", "plate", "syrup", "fork", "table"),
    ),
    (
        "A cyclist waiting at a crossing in the rain.",
        ("bicycle", "cyclist", "traffic light", "umbrella", "wet road"),
    ),
    (
        "An old lighthouse above the rocks.",
        ("lighthouse", "rock", "sea", "sky", "seagull"),
    ),
)

_ATTRIBUTE_EXAMPLES: tuple[tuple[str, tuple[str, ...], tuple[tuple[str, ...], ...]], ...] = (
    (
        "a man reading a newspaper on a bench",
        ("bench", "newspaper"),
        (
            (
                "bench",
                "color",
                "a green bench",
                "a man reading a newspaper on a green bench",
                "a white bench",
                "a man reading a newspaper on a white bench",
            ),
            (
                "bench",
                "shape",
                "a long curved bench",
                "a man reading a newspaper on a long curved bench",
                "a short straight bench",
                "a man reading a newspaper on a short straight bench",
            ),
            (
                "bench",
                "material",
                "a wooden bench",
                "a man reading a newspaper on a wooden bench",
                "a stone bench",
                "a man reading a newspaper on a stone bench",
            ),
            (
                "newspaper",
                "shape",
                "a folded newspaper",
                "a man reading a folded newspaper on a bench",
                "an open broadsheet newspaper",
                "a man reading an open broadsheet newspaper on a bench",
            ),
            (
                "newspaper",
                "other",
                "a crumpled old newspaper",
                "a man reading a crumpled old newspaper on a bench",
                "a crisp new newspaper",
                "a man reading a crisp new newspaper on a bench",
            ),
        ),
    ),
    (
        "a kettle on the stove, next to a pan",
        ("kettle",),
        (
            (
                "kettle",
                "color",
                "a red kettle",
                "a red kettle on the stove, next to a pan",
                "a silver kettle",
                "a silver kettle on the stove, next to a pan",
            ),
            (
                "kettle",
                "material",
                "an enamel kettle",
                "an enamel kettle on the stove, next to a pan",
                "a copper kettle",
                "a copper kettle on the stove, next to a pan",
            ),
            (
                "kettle",
                "other",
                "a steaming kettle",
                "a steaming kettle on the stove, next to a pan",
                "a cold kettle",
                "a cold kettle on the stove, next to a pan",
            ),
        ),
    ),
)


def _check_caption(caption: str) -> None:
    if not isinstance(caption, str) or not caption.strip():
        raise ValueError(f"caption must be a non-empty string, got {caption!r}")


def check_objects(objects: Sequence[str]) -> None:
    """Raise ``ValueError`` unless ``objects`` is a non-empty list of non-empty names, distinct
    without case and whitespace differences."""
    if isinstance(objects, str) or not objects:
        raise ValueError(f"objects must be a non-empty list of names, got {objects!r}")
    if not all(isinstance(o, str) and o.strip() for o in objects):
        raise ValueError(f"object names must be non-empty strings, got {list(objects)!r}")
    if len({" ".join(o.casefold().split()) for o in objects}) != len(objects):
        raise ValueError(f"objects has repeats: {list(objects)}")


def check_categories(categories: Sequence[str]) -> None:
    """Raise ``ValueError`` unless ``categories`` is a non-empty list of distinct names from
    :data:`ATTRIBUTE_CATEGORIES`."""
    if isinstance(categories, str) or not categories:
        raise ValueError(f"categories must be a non-empty list, got {categories!r}")
    unknown = [c for c in categories if c not in ATTRIBUTE_CATEGORIES]
    if unknown:
        raise ValueError(
            f"unknown attribute categories {unknown}; choose from {ATTRIBUTE_CATEGORIES}"
        )
    if len(set(categories)) != len(categories):
        raise ValueError(f"categories has repeats: {list(categories)}")


def _csv_lines(rows: Sequence[Sequence[str]]) -> str:
    """``rows`` as CSV text (fields with commas or quotes quoted), one line per row."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def object_proposal_messages(caption: str, max_objects: int = 5) -> Messages:
    """The prompt of BiAug step 1: objects likely visible in an image described by ``caption``.

    The model is asked for a JSON array of at most ``max_objects`` object names, most probable
    first (:func:`xmr.biaug.answers.parse_object_list` reads it). Raises ``ValueError`` for an
    empty caption or ``max_objects`` < 1.
    """
    _check_caption(caption)
    if isinstance(max_objects, bool) or not isinstance(max_objects, int) or max_objects < 1:
        raise ValueError(f"max_objects must be an integer >= 1, got {max_objects!r}")
    system = (
        "You help build a dataset of images and their descriptions. Every reply you give is a "
        "single JSON array of strings and nothing else: no explanation, no code, no comments."
    )
    examples = "\n".join(
        f"Caption: {json.dumps(text)}\nObjects: {json.dumps(list(objects[:max_objects]))}"
        for text, objects in _OBJECT_EXAMPLES
    )
    user = (
        "Read the image caption below and think about the scene it describes. Name the physical "
        f"things a viewer would most likely see in that picture: at most {max_objects}, the most "
        "probable first. Things the caption does not mention count too when the scene makes "
        "them likely. Use short common nouns, optionally with one qualifying word "
        '("traffic light"), singular, without articles and without full stops or question '
        "marks.\n\n"
        f"Answer with a JSON array of strings.\n\nExamples:\n{examples}\n\n"
        f"Caption: {json.dumps(caption)}\nObjects:"
    )
    return (("system", system), ("user", user))


def attribute_messages(
    caption: str,
    objects: Sequence[str],
    categories: Sequence[str] = ATTRIBUTE_CATEGORIES,
) -> Messages:
    """The prompt of BiAug steps 3-5: for each object and attribute category, an attributive
    phrase, the caption extended with it, and a hard negative (phrase and caption) that gives the
    same object another value of the same category.

    The model is asked for CSV: the header :data:`ATTRIBUTE_COLUMNS`, then one row per
    (object, category), skipping pairs the caption gives no sensible value for
    (:func:`xmr.biaug.answers.parse_attribute_rows` reads it). Raises ``ValueError`` for an empty
    caption, no or repeated objects, or categories outside :data:`ATTRIBUTE_CATEGORIES`.
    """
    _check_caption(caption)
    check_objects(objects)
    check_categories(categories)
    header = ",".join(ATTRIBUTE_COLUMNS)
    system = (
        "You write training text for a vision-language model that must tell apart objects that "
        "differ in one attribute. Every reply you give is CSV and nothing else: first the "
        f"header line {header}, then data rows of exactly six comma-separated fields. Put a "
        "field in double quotes when it contains a comma or a double quote, and double any "
        "double quote inside it."
    )
    meanings = "\n".join(f"- {c}: {_CATEGORY_MEANINGS[c]}" for c in categories)
    examples = []
    for text, names, rows in _ATTRIBUTE_EXAMPLES:
        shown = [row for row in rows if row[1] in categories]
        if shown:
            examples.append(
                f"Caption: {json.dumps(text)}\nObjects: {json.dumps(list(names))}\nAnswer:\n"
                + _csv_lines([ATTRIBUTE_COLUMNS, *shown])
            )
    user = (
        "You are given the caption of an image and objects that are visible in it. Attribute "
        f"categories:\n{meanings}\n\n"
        "Columns of the answer:\n"
        "- object: one of the given objects, spelled exactly as given\n"
        "- category: one of the attribute categories above\n"
        "- phrase: the object with a value of that category that fits the caption and common "
        "sense\n"
        "- caption: the given caption rewritten to contain the phrase, otherwise unchanged\n"
        "- negative_phrase: the same object with a different value of the same category, one "
        "that is clearly distinguishable in a picture\n"
        "- negative_caption: the given caption rewritten to contain the negative phrase instead\n"
        "\n"
        "Work through it in order:\n"
        "1. For every pair of an object and a category, decide on a plausible value. When the "
        "caption and common sense give no sensible value for a pair, leave that pair out.\n"
        "2. Write the phrase, then the caption containing it.\n"
        "3. Change only that value to get the negative phrase, then the negative caption.\n"
        "4. Write one CSV row per pair you kept, at most one row per pair, after the header "
        "line.\n\n"
        "Examples:\n\n" + "\n".join(examples) + "\n"
        f"Caption: {json.dumps(caption)}\n"
        f"Objects: {json.dumps(list(objects))}\n"
        "Answer:"
    )
    return (("system", system), ("user", user))


def _user_lines(messages: Sequence[Sequence[str]], kind: str) -> list[str]:
    """The lines of the user message of a two-message prompt (``kind`` names it in errors)."""
    pairs = [tuple(pair) for pair in messages]
    if len(pairs) != 2 or [pair[0] if pair else None for pair in pairs] != ["system", "user"]:
        raise ValueError(f"not {kind}: expected a system and a user message")
    user = pairs[1][1]
    if not isinstance(user, str):
        raise ValueError(f"not {kind}: the user message is not text")
    return user.split("\n")


def _json_after(line: str, label: str, kind: str) -> object:
    """The JSON value of a ``"<label> <json>"`` line. Raises ``ValueError`` naming ``kind``."""
    if not line.startswith(label):
        raise ValueError(f"not {kind}: no {label.strip()!r} line where the input goes")
    try:
        return json.loads(line[len(label) :])
    except json.JSONDecodeError:
        raise ValueError(f"not {kind}: the {label.strip()!r} line is not JSON") from None


def _same(messages: Sequence[Sequence[str]], rebuilt: Messages, kind: str) -> None:
    """Raise ``ValueError`` unless ``messages`` are exactly ``rebuilt`` (our prompt)."""
    if tuple(tuple(pair) for pair in messages) != rebuilt:
        raise ValueError(f"not {kind}: the text differs from this xmr's prompt")


def read_object_proposal_messages(messages: Sequence[Sequence[str]]) -> tuple[str, int]:
    """The ``(caption, max_objects)`` an :func:`object_proposal_messages` prompt was built from.

    The inverse of the builder, for backends that answer from ground truth instead of reading
    the prompt (the ToyWorld oracle). ``messages``: ``(role, content)`` pairs (lists from JSON
    are fine). Raises ``ValueError`` for anything but a prompt the builder makes, checked by
    building it again and comparing the text.
    """
    kind = "an object-proposal prompt"
    lines = _user_lines(messages, kind)
    if len(lines) < 2 or lines[-1] != "Objects:":
        raise ValueError(f"not {kind}: it does not end with the 'Objects:' line")
    caption = _json_after(lines[-2], "Caption: ", kind)
    found = re.search(r"at most (\d+), the most probable first", "\n".join(lines))
    if not isinstance(caption, str) or found is None:
        raise ValueError(f"not {kind}: no caption string or object count")
    max_objects = int(found.group(1))
    try:
        rebuilt = object_proposal_messages(caption, max_objects)
    except ValueError as exc:
        raise ValueError(f"not {kind}: {exc}") from None
    _same(messages, rebuilt, kind)
    return caption, max_objects


def read_attribute_messages(
    messages: Sequence[Sequence[str]],
) -> tuple[str, list[str], tuple[str, ...]]:
    """The ``(caption, objects, categories)`` an :func:`attribute_messages` prompt was built from.

    The inverse of the builder, like :func:`read_object_proposal_messages`. Raises
    ``ValueError`` for anything but a prompt the builder makes (checked by building it again).
    """
    kind = "an attribute prompt"
    lines = _user_lines(messages, kind)
    if len(lines) < 3 or lines[-1] != "Answer:":
        raise ValueError(f"not {kind}: it does not end with the 'Answer:' line")
    caption = _json_after(lines[-3], "Caption: ", kind)
    objects = _json_after(lines[-2], "Objects: ", kind)
    if (
        not isinstance(caption, str)
        or not isinstance(objects, list)
        or not all(isinstance(name, str) for name in objects)
    ):
        raise ValueError(f"not {kind}: no caption string or object list")
    categories = tuple(
        found.group(1)
        for line in lines
        if (found := re.fullmatch(r"- ([a-z]+): .*", line)) and found.group(1) in _CATEGORY_MEANINGS
    )
    try:
        rebuilt = attribute_messages(caption, objects, categories)
    except ValueError as exc:
        raise ValueError(f"not {kind}: {exc}") from None
    _same(messages, rebuilt, kind)
    return caption, objects, categories
