"""ARO's COCO-Order and Flickr-Order: captions shuffled four ways (Yuksekgonul et al. 2022).

Every Karpathy-split test caption becomes one item: its image, the caption and four shuffles of
it, which the authors define (``dataset_zoo/perturbations.py``, ``TextShuffler``) as

1. :func:`shuffle_nouns_and_adjectives`: the nouns (NN, NNS, NNP, NNPS) change places among
   themselves, and so do the adjectives (JJ, JJR, JJS); every other word stays;
2. :func:`shuffle_all_but_nouns_and_adjectives`: the words that are neither change places among
   themselves; nouns and adjectives stay;
3. :func:`shuffle_within_trigrams`: the words are cut into consecutive trigrams (the last may be
   shorter) and each trigram's words are shuffled in place;
4. :func:`shuffle_trigrams`: the trigrams change order, each keeping its words in order.

As the authors do, every caption of an image is an item (COCO has 5 per image), and the texts
are normalised like BLIP's ``pre_caption``: lower case, the characters ``.!"()*#:;~`` removed,
words joined by single spaces, at most 30 words. Words and tags come from xmr's tokenizer and
tagger (:func:`xmr.text.noun_phrases.tagged_tokens`: NLTK's Treebank tokenizer and averaged
perceptron tagger, Penn Treebank tags as spaCy's ``tag_`` that the authors read).

Where this departs from the authors' code, on purpose:

- the true caption is the same normalised words as its shuffles, before shuffling (the authors
  keep the original spacing, "man's", while their shuffles read "man 's"), and the caption is
  cut to 30 words before shuffling, not after: all five texts are one multiset of words, so
  only their order tells them apart;
- a shuffle never returns its input: the permutation is drawn again until the words change
  (uniform over the changing ones). The authors' shuffles can return the caption unchanged
  (half the time for a caption with two different nouns and no adjective), and their scoring
  (``argmax``, true caption first) then counts that tie as right; here a tie is wrong, so an
  unchanged "negative" would count against the model instead;
- a shuffle that cannot change the caption (fewer than two different words where it moves
  words: "a black dog" has one noun and one adjective, one other word and one trigram, so only
  the shuffle within trigrams applies) is left out, so an item has 2 to 5 captions; a caption
  that none of the four can change (one word, "Surfing.") is skipped, with that reason.

Randomness: each item draws from ``numpy.random.default_rng(crc32(f"{seed}/{item_id}"))``, the
four shuffles in the order above: the same seed gives the same items, whatever else is read.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from xmr.benchmarks.items import (
    EMPTY_CAPTION,
    NO_SHUFFLE,
    BenchmarkData,
    ContrastItem,
    Skips,
    image_problem,
)
from xmr.data.coco import load_json
from xmr.data.errors import DataError
from xmr.text.noun_phrases import tagged_tokens

NOUN_TAGS = frozenset({"NN", "NNS", "NNP", "NNPS"})
ADJECTIVE_TAGS = frozenset({"JJ", "JJR", "JJS"})

MAX_WORDS = 30
"""Captions are cut to this many words (the authors' ``max_words``)."""

_REMOVED = re.compile(r'[.!"()*#:;~]')  # the characters BLIP's pre_caption removes

Perturbation = Callable[[Sequence[str], Sequence[str], np.random.Generator], list[str] | None]
"""``(words, tags, rng) -> shuffled words``, or None when the shuffle cannot change them."""


def item_seed(seed: int, item_id: str) -> int:
    """The 32-bit seed of one item's shuffles (like ``xmr.synth.batch.row_seed``)."""
    return zlib.crc32(f"{seed}/{item_id}".encode())


def caption_words(caption: str, max_words: int = MAX_WORDS) -> tuple[list[str], list[str]]:
    """The normalised words of ``caption`` and their part-of-speech tags.

    Tokens are tagged in the caption's own case, then lower-cased with ``.!"()*#:;~`` removed;
    tokens left empty (a full stop) are dropped and the rest cut to ``max_words``.

    >>> caption_words("Two red dogs.")
    (['two', 'red', 'dogs'], ['CD', 'JJ', 'NNS'])
    """
    words, tags = [], []
    for token, tag in tagged_tokens(caption):
        word = _REMOVED.sub("", token.lower())
        if word:
            words.append(word)
            tags.append(tag)
    return words[:max_words], tags[:max_words]


def _shuffle_within(
    words: Sequence[str], groups: Sequence[Sequence[int]], rng: np.random.Generator
) -> list[str] | None:
    """Shuffle the words at each group of positions among themselves, independently, drawing
    again until the words change; None when no group holds two different words."""
    movable = [group for group in groups if len({words[i] for i in group}) > 1]
    if not movable:
        return None
    while True:
        shuffled = list(words)
        for group in movable:
            for position, source in zip(group, rng.permutation(len(group)), strict=True):
                shuffled[position] = words[group[source]]
        if shuffled != list(words):
            return shuffled


def _trigram_positions(count: int) -> list[list[int]]:
    """Positions ``0 .. count-1`` cut into consecutive trigrams, the last possibly shorter."""
    return [list(range(start, min(start + 3, count))) for start in range(0, count, 3)]


def shuffle_nouns_and_adjectives(
    words: Sequence[str], tags: Sequence[str], rng: np.random.Generator
) -> list[str] | None:
    """Nouns change places among nouns and adjectives among adjectives; None when that cannot
    change ``words`` (fewer than two different nouns and fewer than two different adjectives).

    >>> rng = np.random.default_rng(0)
    >>> shuffle_nouns_and_adjectives(["a", "red", "dog"], ["DT", "JJ", "NN"], rng) is None
    True
    >>> words, tags = "a cat on a mat".split(), ["DT", "NN", "IN", "DT", "NN"]
    >>> shuffle_nouns_and_adjectives(words, tags, rng)
    ['a', 'mat', 'on', 'a', 'cat']
    """
    nouns = [i for i, tag in enumerate(tags) if tag in NOUN_TAGS]
    adjectives = [i for i, tag in enumerate(tags) if tag in ADJECTIVE_TAGS]
    return _shuffle_within(words, [nouns, adjectives], rng)


def shuffle_all_but_nouns_and_adjectives(
    words: Sequence[str], tags: Sequence[str], rng: np.random.Generator
) -> list[str] | None:
    """The words that are neither nouns nor adjectives change places among themselves; None
    when fewer than two of them differ."""
    kept = NOUN_TAGS | ADJECTIVE_TAGS
    others = [i for i, tag in enumerate(tags) if tag not in kept]
    return _shuffle_within(words, [others], rng)


def shuffle_within_trigrams(
    words: Sequence[str], tags: Sequence[str], rng: np.random.Generator
) -> list[str] | None:
    """Each trigram's words are shuffled in place (``tags`` unused); None when no trigram holds
    two different words (e.g. a one-word caption)."""
    return _shuffle_within(words, _trigram_positions(len(words)), rng)


def shuffle_trigrams(
    words: Sequence[str], tags: Sequence[str], rng: np.random.Generator
) -> list[str] | None:
    """The trigrams change order, each keeping its own word order (``tags`` unused); None when
    there are fewer than two different trigrams (a caption of three words or fewer)."""
    trigrams = [[words[i] for i in group] for group in _trigram_positions(len(words))]
    if len({tuple(trigram) for trigram in trigrams}) < 2:
        return None
    while True:
        shuffled = [word for k in rng.permutation(len(trigrams)) for word in trigrams[k]]
        if shuffled != list(words):
            return shuffled


PERTURBATIONS: tuple[Perturbation, ...] = (
    shuffle_nouns_and_adjectives,
    shuffle_all_but_nouns_and_adjectives,
    shuffle_within_trigrams,
    shuffle_trigrams,
)
"""The four shuffles, in the authors' order (each item's draws follow it)."""


def order_captions(
    caption: str, rng: np.random.Generator, max_words: int = MAX_WORDS
) -> tuple[str, ...]:
    """The normalised caption followed by its shuffles, those that can change it.

    Returns:
        ``(true, *negatives)`` with 0 to 4 negatives, in :data:`PERTURBATIONS` order; only the
        true caption when no shuffle can change it (``("",)`` for a caption with no words).
    """
    words, tags = caption_words(caption, max_words)
    negatives = [shuffle(words, tags, rng) for shuffle in PERTURBATIONS] if words else []
    return (" ".join(words), *(" ".join(n) for n in negatives if n is not None))


def read_order(
    annotations: Path,
    images: Path,
    group: str,
    *,
    seed: int,
    max_words: int = MAX_WORDS,
    strict: bool = True,
) -> BenchmarkData:
    """The Order items of a Karpathy-split test file in BLIP's layout.

    Args:
        annotations: ``coco_karpathy_test.json`` or ``flickr30k_test.json``: a list of
            ``{"image": "<path under images>", "caption": ["...", ...]}`` (other keys ignored).
        images: the folder the ``image`` paths are relative to.
        group: the items' group, the subset name (``coco-order``, ``flickr-order``).
        seed: the shuffles' seed.
        max_words: captions are cut to this many words.
        strict: raise at the first bad row (a missing image, an image name outside ``images``,
            an empty caption); False: skip each, with its reason, in ``skipped``.

    Returns:
        one item per caption, ``item_id`` = ``<image>#<caption index>``, in file order;
        captions that no shuffle can change are in ``skipped`` (strict or not), and so are the
        bad rows (not strict): every caption of an entry whose image is missing or refused.

    Raises:
        DataError: a malformed file or entry (names the file and the entry); strict: a bad row
            (names the file, the entry and the image or the caption).
    """
    images = Path(images).resolve()
    entries = load_json(annotations)
    if not isinstance(entries, list):
        raise DataError(f"{annotations}: expected a list of images, got {type(entries).__name__}")
    if not entries:
        raise DataError(f"{annotations}: no images")
    items = []
    skips = Skips(strict)
    for index, entry in enumerate(entries):
        where = f"{annotations}: entry {index}"
        if not isinstance(entry, dict):
            raise DataError(f"{where}: expected an object")
        image, captions = entry.get("image"), entry.get("caption")
        if not isinstance(image, str) or not image:
            raise DataError(f"{where}: 'image' must be a non-empty string")
        if not isinstance(captions, list) or not all(isinstance(c, str) for c in captions):
            raise DataError(
                f"{where}: 'caption' must be a list of strings (the Karpathy test layout)"
            )
        problem = image_problem(images, image, where)
        for number, caption in enumerate(captions):
            item_id = f"{image}#{number}"
            if problem is not None:
                skips.bad(item_id, *problem)
                continue
            if not caption.strip():
                skips.bad(item_id, EMPTY_CAPTION, f"{where}: caption {number} is empty")
                continue
            rng = np.random.default_rng(item_seed(seed, item_id))
            texts = order_captions(caption, rng, max_words)
            if len(texts) < 2:
                detail = f"{where}: caption {caption!r}: no shuffle can change its word order"
                skips.rule(item_id, NO_SHUFFLE, detail)
                continue
            items.append(ContrastItem(item_id, images / image, None, texts, group))
    return BenchmarkData(items=tuple(items), skipped=tuple(skips.items))
