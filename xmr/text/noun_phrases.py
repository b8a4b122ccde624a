"""Noun phrase chunks of a caption (odmap paper §3.2 / §3.3).

Captions are split with NLTK's Treebank tokenizer (no ``punkt`` needed: a caption is one
sentence), tagged with NLTK's averaged-perceptron tagger and chunked with a regular-expression
grammar over the part-of-speech tags (:data:`NP_GRAMMAR`). Phrases come back with character
offsets into the caption so that callers can cut them out (:mod:`xmr.text.removal`).

The tagger model is found on ``NLTK_DATA`` and downloaded once on first use when missing.
NLTK itself is imported on first use too: importing it takes seconds, and this package is
imported by every pipeline worker, most of which never tag a caption.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from functools import cache, lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import nltk
    from nltk.tag import PerceptronTagger
    from nltk.tokenize import TreebankWordTokenizer

TAGGER_RESOURCE = "averaged_perceptron_tagger_eng"

NP_GRAMMAR = r"""
NP: {<DT|PDT|CD|PRP\$>*(<JJ.*|VBN>+(<CC><JJ.*|VBN>+)*)?<NN.*>+<POS><JJ.*|VBN>*<NN.*>+}
    {<DT|PDT|CD|PRP\$>*(<JJ.*|VBN>+(<CC><JJ.*|VBN>+)*)?<NN.*>+}
"""
"""The chunk grammar over Penn Treebank tags; the rules are tried in order, each
matching leftmost and greedily:

1. a possessive phrase: an owner phrase, ``'s`` (POS) and the owned noun(s): "a man's hat",
   "the dog's red collar";
2. a plain phrase: determiners (DT "a", "the", "some"; PDT "all"), numbers (CD "two") or
   possessive pronouns (PRP$ "her"); then adjectives (JJ* "red", "bigger"; VBN "a stuffed
   bear"), possibly coordinated by a conjunction (CC, "a green and white bus"); then one or more
   nouns (NN*): "Two dogs", "a red frisbee", "the tennis racket", "her motorcycle".
"""

Span = tuple[int, int, str]
"""``(start, end, text)``: a phrase as character offsets into its caption, ``text`` being
``caption[start:end]``."""


@cache
def _tokenizer() -> TreebankWordTokenizer:
    from nltk.tokenize import TreebankWordTokenizer

    return TreebankWordTokenizer()


@cache
def _parser() -> nltk.RegexpParser:
    import nltk

    return nltk.RegexpParser(NP_GRAMMAR)


@cache
def _tagger() -> PerceptronTagger:
    """The English POS tagger, downloaded into the default NLTK data folder when missing."""
    import nltk
    from nltk.tag import PerceptronTagger

    resource = f"taggers/{TAGGER_RESOURCE}/"
    try:
        nltk.data.find(resource)
    except LookupError:
        if not nltk.download(TAGGER_RESOURCE, quiet=True, print_error_to=io.StringIO()):
            raise LookupError(
                f"the NLTK tagger '{TAGGER_RESOURCE}' is not installed and could not be "
                f"downloaded; download it elsewhere (nltk.download('{TAGGER_RESOURCE}')) and "
                "point the NLTK_DATA environment variable at the folder that holds 'taggers/'"
            ) from None
    return PerceptronTagger()


def require_tagger() -> None:
    """Load the POS tagger now, downloading it when missing: a job whose workers will tag
    captions (ODmAP after training) fails here, on the driver, before any work starts.

    Raises:
        LookupError: the tagger is not installed and cannot be downloaded (says what to do).
    """
    _tagger()


def _token_spans(caption: str) -> list[tuple[int, int]]:
    return list(_tokenizer().span_tokenize(caption))


def _chunk(caption: str, spans: list[tuple[int, int]], tags: Iterable[str]) -> list[Span]:
    """Chunk one tagged caption and map every phrase back to its character offsets."""
    if not spans:
        return []
    tree = _parser().parse([(caption[s:e], tag) for (s, e), tag in zip(spans, tags, strict=True)])
    phrases: list[Span] = []
    position = 0  # index of the next token in the caption
    for node in tree:
        if isinstance(node, tuple):  # a (token, tag) leaf outside any phrase
            position += 1
            continue
        start, end = spans[position][0], spans[position + len(node) - 1][1]  # an NP subtree
        phrases.append((start, end, caption[start:end]))
        position += len(node)
    return phrases


def _tag_input(caption: str, spans: list[tuple[int, int]]) -> list[str]:
    """The tokens given to the tagger; an all-capitals caption is lower-cased first, since the
    tagger reads capitalised words as proper nouns and would chunk the whole caption."""
    text = caption.lower() if caption.isupper() else caption
    return [text[s:e] for s, e in spans]


@lru_cache(maxsize=1 << 16)
def _cached_spans(caption: str) -> tuple[Span, ...]:
    """Tagging is the slow part of text processing: the same caption is tagged once per process
    (finding its mentions, then rewriting it for each removal plan)."""
    spans = _token_spans(caption)
    tags = [tag for _, tag in _tagger().tag(_tag_input(caption, spans))]
    return tuple(_chunk(caption, spans, tags))


def tagged_tokens(caption: str) -> list[tuple[str, str]]:
    """The tokens of ``caption`` (its own substrings, in order) with their Penn Treebank
    part-of-speech tags, from the tokenizer and tagger the noun phrases use.

    >>> tagged_tokens("Two red dogs.")
    [('Two', 'CD'), ('red', 'JJ'), ('dogs', 'NNS'), ('.', '.')]
    """
    spans = _token_spans(caption)
    tags = [tag for _, tag in _tagger().tag(_tag_input(caption, spans))]
    return [(caption[s:e], tag) for (s, e), tag in zip(spans, tags, strict=True)]


def noun_phrase_spans_batch(captions: Iterable[str]) -> list[list[Span]]:
    """:func:`noun_phrase_spans` of many captions (the tagger is loaded once)."""
    return [list(_cached_spans(caption)) for caption in captions]


def noun_phrase_spans(caption: str) -> list[Span]:
    """The noun phrases of ``caption`` as ``(start, end, text)`` character spans, in order.

    >>> noun_phrase_spans("Two dogs fighting over a frisbee")
    [(0, 8, 'Two dogs'), (23, 32, 'a frisbee')]
    """
    return noun_phrase_spans_batch([caption])[0]


def noun_phrases(caption: str) -> list[str]:
    """The noun phrases of ``caption``, in order; ``[]`` when it has none (e.g. empty text).

    >>> noun_phrases("Two dogs fighting over a frisbee")
    ['Two dogs', 'a frisbee']
    """
    return [text for _, _, text in noun_phrase_spans(caption)]
