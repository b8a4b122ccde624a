"""Strict reading of the LLM's answers to the prompts of :mod:`xmr.biaug.prompts`.

An answer is data, never code: object lists are read with :func:`json.loads`, attribute tables
with :mod:`csv`; nothing is evaluated. Whatever does not have the asked form is refused with a
reason (:class:`AnswerError` for a whole answer, :class:`RejectedRow` for one CSV row) and never
repaired or guessed. The only tidying is whitespace: surrounding whitespace, one optional
Markdown code fence around the whole answer, runs of whitespace inside names and fields.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from xmr.biaug.prompts import (
    ATTRIBUTE_CATEGORIES,
    ATTRIBUTE_COLUMNS,
    check_categories,
    check_objects,
)

MAX_NAME_CHARS = 60
"""The longest object name accepted from a proposal answer, in characters."""

MAX_FIELD_CHARS = 500
"""The longest field accepted in an attribute row, in characters (captions included)."""

MAX_RAW_CHARS = 1000
"""A refused row's raw text is kept up to this many characters (then cut, its length noted)."""

# One fence around the whole answer: ``` or ```json / ```csv on its own line, ``` at the end.
_FENCE = re.compile(r"\A```[ \t]*([A-Za-z]*)[ \t]*\r?\n(.*?)\r?\n?```\Z", re.DOTALL)
# Separators GroundingDINO reads as the end of a phrase (an object name becomes a prompt phrase).
_PHRASE_ENDS = (".", "?")


class AnswerError(ValueError):
    """A whole LLM answer does not have the asked form; the message is the short reason."""


@dataclass(frozen=True)
class AttributeRow:
    """One valid row of an attribute answer (:data:`~xmr.biaug.prompts.ATTRIBUTE_COLUMNS`).

    ``object`` and ``category`` are spelled as they were asked; the four texts are stripped,
    inner whitespace runs made single spaces.
    """

    object: str
    category: str
    phrase: str
    caption: str
    negative_phrase: str
    negative_caption: str


@dataclass(frozen=True)
class RejectedRow:
    """A row of an attribute answer that was refused: its 1-based line number in the answer as
    received (the first line of a row whose quoted field spans lines), the raw text (cut after
    :data:`MAX_RAW_CHARS` characters), and why."""

    line: int
    raw: str
    reason: str


def _squash(text: str) -> str:
    """``text`` stripped, each run of whitespace made one space."""
    return " ".join(text.split())


def _unfence(text: str, language: str) -> tuple[str, int]:
    """The answer without surrounding whitespace and one optional code fence, and the number of
    lines of ``text`` before the returned body (to report line numbers of the answer as sent).

    The fence's language tag may be empty or ``language`` (any case). Raises ``AnswerError``.
    """
    if not isinstance(text, str):
        raise AnswerError(f"the answer is not text but {type(text).__name__}")
    body = text.strip()
    skipped = text[: len(text) - len(text.lstrip())].count("\n")
    fence = _FENCE.match(body)
    if fence:
        if fence.group(1) and fence.group(1).lower() != language:
            raise AnswerError(f"the answer is fenced as {fence.group(1)!r}, not {language}")
        return fence.group(2), skipped + 1
    if body.startswith("```"):
        raise AnswerError("the answer opens a code fence it does not close as a whole")
    return body, skipped


def _name_key(name: str) -> tuple[str, ...]:
    """The lower-case words of ``name``: names with equal keys are one object to the detector."""
    return tuple(re.findall(r"[^\W_]+", name.casefold()))


def _json_kind(value: object) -> str:
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return kinds.get(type(value), "a number")


def parse_object_list(text: str, max_objects: int) -> list[str]:
    """The object names of a proposal answer (BiAug step 1), most probable first.

    The answer must be a JSON array of strings, with nothing around it but whitespace and one
    optional code fence (```` ``` ```` or ```` ```json ````). Names are stripped and their inner
    whitespace made single spaces; empty names and repeats (same words, any case or punctuation:
    ``"Traffic light"`` repeats ``"traffic-light"``) are dropped, the first spelling kept.

    More than ``max_objects`` distinct names is not an error: the list is ranked, so the first
    ``max_objects`` are kept and the rest, the least probable, are dropped without a record.
    An empty array is a valid answer (no object expected) and gives ``[]``.

    Raises:
        AnswerError: not JSON (a Python list with single quotes is not JSON), not an array, an
            item that is not a string, or a name no detector prompt can hold (longer than
            :data:`MAX_NAME_CHARS`, no letter or digit, or containing ``.`` or ``?``).
        ValueError: ``max_objects`` < 1.
    """
    if isinstance(max_objects, bool) or not isinstance(max_objects, int) or max_objects < 1:
        raise ValueError(f"max_objects must be an integer >= 1, got {max_objects!r}")
    body, _ = _unfence(text, "json")
    try:
        value = json.loads(body, parse_constant=_refuse_constant)
    except (json.JSONDecodeError, RecursionError) as exc:
        detail = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        raise AnswerError(f"not a JSON array of strings: {detail}") from None
    if not isinstance(value, list):
        raise AnswerError(f"expected a JSON array of strings, got {_json_kind(value)}")
    names: list[str] = []
    seen: set[tuple[str, ...]] = set()
    for position, item in enumerate(value, start=1):
        if not isinstance(item, str):
            raise AnswerError(f"item {position} is {_json_kind(item)}, not a string")
        name = _squash(item)
        if not name:
            continue
        if len(name) > MAX_NAME_CHARS:
            raise AnswerError(f"item {position} is longer than {MAX_NAME_CHARS} characters")
        if any(end in name for end in _PHRASE_ENDS):
            raise AnswerError(
                f"item {position} {name!r} contains '.' or '?' (the detector reads a phrase end)"
            )
        key = _name_key(name)
        if not key:
            raise AnswerError(f"item {position} {name!r} has no letter or digit")
        if key not in seen:
            seen.add(key)
            names.append(name)
    return names[:max_objects]


def _refuse_constant(name: str) -> None:
    """``json.loads`` hook: ``NaN`` and ``Infinity`` are not JSON."""
    raise AnswerError(f"not a JSON array of strings: {name} is not JSON")


def _records(body: str, first_line: int) -> Iterator[tuple[int, str, list[str] | None, str]]:
    """The CSV records of ``body``: ``(line, raw text, fields, "")``, or ``(line, raw text, None,
    reason)`` for text the csv module cannot read. ``line`` numbers start at ``first_line + 1``.
    """
    lines = [line + "\n" for line in body.split("\n")]  # csv ends rows at \n only
    consumed: list[str] = []
    read = 0

    def feed() -> Iterator[str]:
        nonlocal read
        for line in lines:
            consumed.append(line)
            read += 1
            yield line

    reader = csv.reader(feed(), strict=True, skipinitialspace=True)
    while True:
        start = first_line + read + 1
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield start, "".join(consumed).rstrip("\r\n"), None, f"not CSV: {exc}"
        else:
            yield start, "".join(consumed).rstrip("\r\n"), fields, ""
        consumed.clear()


def _cut(raw: str) -> str:
    """``raw``, or its first :data:`MAX_RAW_CHARS` characters and its length when longer."""
    if len(raw) <= MAX_RAW_CHARS:
        return raw
    return f"{raw[:MAX_RAW_CHARS]}... ({len(raw)} characters)"


def _header(fields: list[str]) -> bool:
    return [f.strip().casefold() for f in fields] == list(ATTRIBUTE_COLUMNS)


def _check_row(
    fields: list[str],
    objects: dict[str, str],
    categories: dict[str, str],
) -> AttributeRow | str:
    """The row of ``fields``, or the reason it is refused (ignoring repeats of a pair)."""
    if len(fields) != len(ATTRIBUTE_COLUMNS):
        return f"expected {len(ATTRIBUTE_COLUMNS)} fields, got {len(fields)}"
    values = [_squash(field) for field in fields]
    for column, value in zip(ATTRIBUTE_COLUMNS, values, strict=True):
        if not value:
            return f"empty {column}"
        if len(value) > MAX_FIELD_CHARS:
            return f"{column} longer than {MAX_FIELD_CHARS} characters"
    name, category, phrase, caption, negative_phrase, negative_caption = values
    if name.casefold() not in objects:
        return f"object {name!r} was not asked for (asked: {', '.join(objects.values())})"
    if category.casefold() not in categories:
        return f"category {category!r} was not asked for (asked: {', '.join(categories.values())})"
    if phrase.casefold() == negative_phrase.casefold():
        return "the negative phrase equals the phrase"
    if caption.casefold() == negative_caption.casefold():
        return "the negative caption equals the caption"
    return AttributeRow(
        object=objects[name.casefold()],
        category=categories[category.casefold()],
        phrase=phrase,
        caption=caption,
        negative_phrase=negative_phrase,
        negative_caption=negative_caption,
    )


def parse_attribute_rows(
    text: str,
    objects: Sequence[str],
    categories: Sequence[str] = ATTRIBUTE_CATEGORIES,
) -> tuple[list[AttributeRow], list[RejectedRow]]:
    """The rows of an attribute answer (BiAug steps 3-5), valid and refused, in answer order.

    The answer is CSV (one optional ```` ``` ```` / ```` ```csv ```` fence around it): blank lines
    are skipped, the first other line must be the header :data:`ATTRIBUTE_COLUMNS` (any case,
    spaces around names allowed), and every further line a row. A row is refused, with its
    line, raw text and reason, when it:

    - is not readable CSV (a stray quote) or has other than six fields;
    - has an empty field, or one longer than :data:`MAX_FIELD_CHARS`;
    - names an object not in ``objects`` or a category not in ``categories`` (both compared
      without case; the row then carries the asked spelling);
    - has a negative phrase equal to its phrase, or a negative caption equal to its caption
      (without case);
    - repeats the (object, category) of a row already accepted.

    An answer with only the header is valid: every pair was skipped.

    Raises:
        AnswerError: the answer is empty or does not start with the header line.
        ValueError: ``objects`` or ``categories`` is empty, has repeats (without case), or a
            category outside :data:`ATTRIBUTE_CATEGORIES`.
    """
    check_objects(objects)
    check_categories(categories)
    asked_objects = {_squash(name).casefold(): name for name in objects}
    asked_categories = {c.casefold(): c for c in categories}
    body, skipped = _unfence(text, "csv")
    rows: list[AttributeRow] = []
    rejected: list[RejectedRow] = []
    accepted: dict[tuple[str, str], int] = {}
    header_seen = False
    for line, raw, fields, problem in _records(body, skipped):
        if fields is not None and len(fields) <= 1 and not "".join(fields).strip():
            continue  # a blank line
        if not header_seen:
            if fields is None or not _header(fields):
                shown = raw if len(raw) <= 80 else raw[:77] + "..."
                raise AnswerError(
                    f"line {line} is not the header {','.join(ATTRIBUTE_COLUMNS)}: {shown!r}"
                )
            header_seen = True
            continue
        checked = problem if fields is None else _check_row(fields, asked_objects, asked_categories)
        if isinstance(checked, AttributeRow):
            pair = (checked.object, checked.category)
            if pair in accepted:
                checked = (
                    f"a second row for ({checked.object}, {checked.category}); "
                    f"line {accepted[pair]} has it"
                )
            else:
                accepted[pair] = line
                rows.append(checked)
                continue
        rejected.append(RejectedRow(line=line, raw=_cut(raw), reason=checked))
    if not header_seen:
        raise AnswerError("the answer is empty: no header line")
    return rows, rejected
