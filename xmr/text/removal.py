"""Caption rewrite for removed objects: cut the noun phrases that name them (odmap paper §3.3).

"Two dogs fighting over a frisbee" without *frisbee* becomes "Two dogs fighting over". Like the
paper's, the result may be ungrammatical; only whitespace and punctuation are tidied.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from xmr.text.class_words import ClassWordTable
from xmr.text.mentions import phrase_classes
from xmr.text.noun_phrases import noun_phrase_spans

_SPACES = re.compile(r"\s+")
_SPACE_BEFORE_PUNCT = re.compile(r" ([,.;:!?])")
_REPEATED_SEPARATORS = re.compile(r"([,;:])(?: ?[,;:])+")
_LEADING_SEPARATORS = re.compile(r"^[ ,;:]+")
_TRAILING_SEPARATORS = re.compile(r"[ ,;:]+(?=[.!?]*$)")


def _tidy(text: str) -> str:
    """Collapse whitespace and drop the separators a cut leaves behind ("a dog , ." -> "a dog.")."""
    text = _SPACES.sub(" ", text).strip()
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    text = _REPEATED_SEPARATORS.sub(r"\1", text)
    text = _LEADING_SEPARATORS.sub("", text)
    return _TRAILING_SEPARATORS.sub("", text)


def remove_noun_phrases(caption: str, classes: Collection[str], table: ClassWordTable) -> str:
    """``caption`` without the noun phrases that name any of ``classes`` (words from ``table``).

    Whitespace is collapsed, separators left dangling by a cut are dropped, and an upper-case
    first letter stays upper-case. A caption with no such phrase comes back unchanged; one made
    only of such phrases comes back as punctuation or ``""``.

    >>> remove_noun_phrases("Two dogs fighting over a frisbee", {"frisbee"}, COCO_CLASS_WORDS)
    'Two dogs fighting over'
    """
    wanted = set(classes)
    cuts = [
        (start, end)
        for start, end, text in noun_phrase_spans(caption)
        if phrase_classes(text, table) & wanted
    ]
    if not cuts:
        return caption
    kept, position = [], 0
    for start, end in cuts:
        kept.append(caption[position:start])
        position = end
    kept.append(caption[position:])
    text = _tidy(" ".join(kept))
    if caption.lstrip()[:1].isupper():
        text = text[:1].upper() + text[1:]
    return text
