"""Caption rewrite for removed objects: cut the noun phrases that name them (odmap paper §3.3).

"Two dogs fighting over a frisbee" without *frisbee* becomes "Two dogs fighting over". Like the
paper's, the result may be ungrammatical; only whitespace and punctuation are tidied.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

from xmr.text.class_words import ClassWordTable
from xmr.text.mentions import phrase_matcher
from xmr.text.noun_phrases import noun_phrase_spans

_SPACES = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT = re.compile(r" ([,.;:!?])")
_REPEATED_SEPARATORS = re.compile(r"([,;:])(?: ?[,;:])+")
_LEADING_SEPARATORS = re.compile(r"^[ ,;:]+")
_TRAILING_SEPARATORS = re.compile(r"[ ,;:]+(?=[.!?]*$)")
_LEADING_CONJUNCTION = re.compile(r"^(?:and|or)\b[ ,;:]*", re.IGNORECASE)
_TRAILING_CONJUNCTION = re.compile(r"[ ,;:]*\b(?:and|or)(?=[.!?]*$)", re.IGNORECASE)


def _tidy(text: str) -> str:
    """Collapse whitespace and drop the separators and the "and" / "or" a cut leaves dangling at
    either end ("a dog , ." -> "a dog."; "a table and ." -> "a table.")."""
    text = _SPACES.sub(" ", text).strip()
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    text = _REPEATED_SEPARATORS.sub(r"\1", text)
    text = _LEADING_CONJUNCTION.sub("", _LEADING_SEPARATORS.sub("", text))
    return _TRAILING_SEPARATORS.sub("", _TRAILING_CONJUNCTION.sub("", text))


def cut_spans(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """``text`` without the character ``spans`` ``(start, end)`` (sorted, non-overlapping).

    Whitespace is collapsed, separators left dangling by a cut are dropped, and an upper-case
    first letter stays upper-case. With no spans ``text`` comes back unchanged.

    >>> cut_spans("Two dogs fighting over a frisbee", [(23, 32)])
    'Two dogs fighting over'
    """
    kept, position = [], 0
    for start, end in spans:
        kept.append(text[position:start])
        position = end
    if not kept:
        return text
    kept.append(text[position:])
    result = _tidy(" ".join(kept))
    if text.lstrip()[:1].isupper():
        result = result[:1].upper() + result[1:]
    return result


def remove_noun_phrases(caption: str, classes: Collection[str], table: ClassWordTable) -> str:
    """``caption`` without the noun phrases that name any of ``classes`` (words from ``table``).

    Whitespace is collapsed, separators left dangling by a cut are dropped, and an upper-case
    first letter stays upper-case. A caption with no such phrase comes back unchanged; one made
    only of such phrases comes back as punctuation or ``""``.

    >>> from xmr.text import COCO_CLASS_WORDS
    >>> remove_noun_phrases("Two dogs fighting over a frisbee", {"frisbee"}, COCO_CLASS_WORDS)
    'Two dogs fighting over'
    """
    wanted, named = set(classes), phrase_matcher(table)
    return cut_spans(
        caption,
        [(start, end) for start, end, text in noun_phrase_spans(caption) if named(text) & wanted],
    )
