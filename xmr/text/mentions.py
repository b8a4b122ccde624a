"""Which object classes a caption mentions (odmap paper §3.2, §4.1, appendix A).

A class is mentioned when one of the caption's noun phrases contains one of the class's words
(:data:`xmr.text.class_words.COCO_CLASS_WORDS`) as a whole word, case-insensitively.

Words are the maximal runs of letters and digits of the lower-cased text, so "dog" is not found
in "hotdog" nor "man" in "woman", while "dog's" and "hot-dog" do split into words. A multi-word
entry ("hot dog", "teddy bear") matches as a sequence of consecutive words and takes precedence
over the shorter entries inside it: "a hot dog" mentions *hot dog*, not *dog*, and "a wine glass"
mentions *wine glass*, not *cup* (whose words include "glass").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache

from xmr.data.records import ImageRecord
from xmr.text.class_words import COCO_CLASS_WORDS, FLICKR30K_ODMAP_CLASSES, ClassWordTable
from xmr.text.noun_phrases import noun_phrase_spans_batch

_WORD = re.compile(r"[^\W_]+")

_Entry = tuple[tuple[str, ...], frozenset[str]]
_WordIndex = dict[str, list[_Entry]]
"""First word -> ``(entry words, classes named by that entry)``, longest entries first."""


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _index(table: ClassWordTable) -> _WordIndex:
    """The word index of ``table``, cached on the table's contents."""
    return _build_index(frozenset((name, frozenset(words)) for name, words in table.items()))


@lru_cache(maxsize=8)
def _build_index(table: frozenset[tuple[str, frozenset[str]]]) -> _WordIndex:
    classes_of: dict[tuple[str, ...], set[str]] = {}
    for name, entries in table:
        for entry in entries:
            words = tuple(_words(entry))
            if words:
                classes_of.setdefault(words, set()).add(name)
    index: _WordIndex = {}
    for words, classes in classes_of.items():
        index.setdefault(words[0], []).append((words, frozenset(classes)))
    for entries in index.values():
        entries.sort(key=lambda entry: len(entry[0]), reverse=True)
    return index


def _match(words: list[str], index: _WordIndex) -> set[str]:
    """Classes named in ``words``, scanning left to right with the longest entry at each word."""
    found: set[str] = set()
    i = 0
    while i < len(words):
        step = 1
        for entry, classes in index.get(words[i], ()):
            if tuple(words[i : i + len(entry)]) == entry:
                found |= classes
                step = len(entry)
                break
        i += step
    return found


def phrase_matcher(table: ClassWordTable) -> Callable[[str], set[str]]:
    """:func:`phrase_classes` with ``table`` bound: looking the table up costs more than
    matching a phrase, so callers that match many phrases do it once."""
    index = _index(table)
    return lambda phrase: _match(_words(phrase), index)


def phrase_classes(phrase: str, table: ClassWordTable) -> set[str]:
    """The classes of ``table`` that ``phrase`` names.

    >>> sorted(phrase_classes("a muddy skateboard", COCO_CLASS_WORDS))
    ['skateboard']
    """
    return phrase_matcher(table)(phrase)


def mentioned_classes_batch(captions: Iterable[str], table: ClassWordTable) -> list[set[str]]:
    """:func:`mentioned_classes` of many captions, in order.

    Each distinct caption is tagged once, and captions with no class word anywhere skip the
    tagger (the slow step): they cannot have a matching noun phrase.
    """
    named = phrase_matcher(table)
    captions = list(captions)
    unique = list(dict.fromkeys(captions))
    found: dict[str, set[str]] = {caption: set() for caption in unique}
    candidates = [caption for caption in unique if named(caption)]
    for caption, spans in zip(candidates, noun_phrase_spans_batch(candidates), strict=True):
        for _, _, text in spans:
            found[caption] |= named(text)
    return [set(found[caption]) for caption in captions]


def mentioned_classes(caption: str, table: ClassWordTable) -> set[str]:
    """The classes of ``table`` named by a noun phrase of ``caption``.

    >>> sorted(mentioned_classes("Two puppies fighting over a frisby", COCO_CLASS_WORDS))
    ['dog', 'frisbee']
    """
    return mentioned_classes_batch([caption], table)[0]


def caption_mentions(dataset: str, records: Sequence[ImageRecord]) -> list[set[str]]:
    """Class mentions of every caption of ``records``, in record then caption order.

    COCO and ToyWorld: noun phrases matched against the COCO class-word table (odmap appendix A).
    Flickr30k: the annotated entity types of the caption's phrases (odmap §4.1).
    """
    if dataset == "flickr30k":
        wanted = set(FLICKR30K_ODMAP_CLASSES)
        return [
            {t for phrase in caption.phrases for t in phrase.types if t in wanted}
            for record in records
            for caption in record.captions
        ]
    texts = [text for record in records for text in record.caption_texts]
    return mentioned_classes_batch(texts, COCO_CLASS_WORDS)
