"""Gender of captions and images, and gender-neutral captions (gender paper §4.1, appendix A).

The word lists are the paper's table 3 with the plural forms its words imply. A word counts as
a whole word, case-insensitively; a possessive counts ("woman's"), a hyphenated compound does not
("man-made"). The lists hold no pronouns ("she", "his"), like the paper's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Literal

Gender = Literal["male", "female", "neutral"]

FEMININE_WORDS: frozenset[str] = frozenset(
    {
        "woman", "women", "female", "females", "girl", "girls", "lady", "ladies", "mother",
        "mothers", "mom", "moms", "sister", "sisters", "daughter", "daughters", "wife", "wives",
        "girlfriend", "girlfriends",
    }
)  # fmt: skip
MASCULINE_WORDS: frozenset[str] = frozenset(
    {
        "man", "men", "male", "males", "boy", "boys", "gentleman", "gentlemen", "father",
        "fathers", "brother", "brothers", "son", "sons", "husband", "husbands", "boyfriend",
        "boyfriends",
    }
)  # fmt: skip
GENDER_NEUTRAL_WORDS: frozenset[str] = frozenset(
    {
        "person", "people", "human", "humans", "adult", "adults", "baby", "babies", "child",
        "children", "kid", "kids", "guy", "guys", "teenage", "crowd", "crowds",
    }
)  # fmt: skip
"""The paper's gender-neutral words ("guy" included, as the paper has it)."""

# The neutral word for every gendered noun; the adjectives "female" / "male" are handled apart.
_NEUTRAL_FORM: dict[str, str] = {
    "man": "person", "woman": "person", "men": "people", "women": "people",
    "gentleman": "person", "lady": "person", "gentlemen": "people", "ladies": "people",
    "males": "people", "females": "people",
    "boy": "child", "girl": "child", "boys": "children", "girls": "children",
    "son": "child", "daughter": "child", "sons": "children", "daughters": "children",
    "father": "parent", "mother": "parent", "mom": "parent",
    "fathers": "parents", "mothers": "parents", "moms": "parents",
    "brother": "sibling", "sister": "sibling", "brothers": "siblings", "sisters": "siblings",
    "husband": "spouse", "wife": "spouse", "husbands": "spouses", "wives": "spouses",
    "boyfriend": "partner", "girlfriend": "partner",
    "boyfriends": "partners", "girlfriends": "partners",
}  # fmt: skip

# The plural neutral nouns: a pair like "men and women" merges into one of these.
_GROUPS = frozenset({"people", "children", "parents", "siblings", "spouses", "partners"})

# Words after which "female" / "male" is a noun ("a female in black"), not an adjective.
_NOUN_CONTEXT = frozenset(
    {
        "and", "or", "but", "is", "are", "was", "were", "has", "have", "had", "with", "without",
        "in", "on", "at", "of", "by", "for", "from", "to", "into", "onto", "near", "next",
        "behind", "under", "over", "beside", "while", "who", "that", "which", "as", "looks",
        "sits", "stands", "holds", "rides", "wears", "walks", "plays",
    }
)  # fmt: skip


def _word_pattern(words: Iterable[str]) -> str:
    """A whole-word alternation: not inside a longer word or a hyphenated compound."""
    alternation = "|".join(sorted(words, key=len, reverse=True))
    return rf"(?<![\w-])(?:{alternation})(?![\w-])"


_FEMININE = re.compile(_word_pattern(FEMININE_WORDS), re.IGNORECASE)
_MASCULINE = re.compile(_word_pattern(MASCULINE_WORDS), re.IGNORECASE)
_PAIRED = [*_NEUTRAL_FORM, "female", "male"]
_PAIR = re.compile(
    rf"(?P<first>{_word_pattern(_PAIRED)})\s+(?:and|&|or)\s+(?P<second>{_word_pattern(_PAIRED)})",
    re.IGNORECASE,
)
_SEX_WORD = re.compile(
    r"(?:(?<![\w-])(?P<article>an?)\s+)?(?P<word>(?<![\w-])(?:female|male)(?![\w-]))"
    r"(?:\s+(?P<next>[^\W\d_][\w'-]*))?",
    re.IGNORECASE,
)
_GENDERED_NOUN = re.compile(_word_pattern(_NEUTRAL_FORM), re.IGNORECASE)


def _gendered(text: str) -> tuple[bool, bool]:
    """``(has a masculine word, has a feminine word)``."""
    return _MASCULINE.search(text) is not None, _FEMININE.search(text) is not None


def _label(masculine: bool, feminine: bool) -> Gender:
    if masculine and not feminine:
        return "male"
    if feminine and not masculine:
        return "female"
    return "neutral"


def caption_gender(caption: str) -> Gender:
    """``male`` when ``caption`` has a masculine word and no feminine word, ``female`` the other
    way round, else ``neutral`` (none, or both)."""
    return _label(*_gendered(caption))


def image_gender(captions: Sequence[str]) -> Gender:
    """An image's gender from its captions (gender paper §4.1).

    ``male`` when some caption has a masculine word and no caption a feminine word, ``female``
    the other way round, else ``neutral``.
    """
    flags = [_gendered(caption) for caption in captions]
    return _label(any(m for m, _ in flags), any(f for _, f in flags))


def _same_case(source: str, word: str) -> str:
    """``word`` cased like ``source``: all capitals, a capital first letter, or as is."""
    if len(source) > 1 and source.isupper():
        return word.upper()
    if source[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


def _merge_pair(match: re.Match[str]) -> str:
    """Merge a pair of opposite genders: "men and women" -> "people", "boys and girls" ->
    "children", "brothers and sisters" -> "siblings" (plurals only: "a man and woman" stays two
    persons); "male and female" -> "female", the adjective dropped next."""
    first, second = match["first"], match["second"]
    a, b = first.lower(), second.lower()
    if (a in MASCULINE_WORDS) == (b in MASCULINE_WORDS):
        return match[0]
    neutral = _NEUTRAL_FORM.get(a)
    if neutral in _GROUPS and neutral == _NEUTRAL_FORM.get(b):
        return _same_case(first, neutral)
    if {a, b} == {"female", "male"}:
        return _same_case(first, b)
    return match[0]


def _replace_sex_word(match: re.Match[str]) -> str:
    """Drop the adjective "female" / "male" (fixing a / an), or make the noun "person"."""
    article, word, following = match["article"], match["word"], match["next"]
    lowered = (following or "").lower()
    is_adjective = bool(following) and lowered not in _NOUN_CONTEXT
    if is_adjective and not lowered.endswith(("ing", "ed")):
        if article is None:
            return _same_case(word, following) if word[:1].isupper() else following
        fitting = "an" if lowered[0] in "aeiou" else "a"
        return f"{_same_case(article, fitting)} {following}"
    return match[0].replace(word, _same_case(word, "person"), 1)


def _replace_noun(match: re.Match[str]) -> str:
    return _same_case(match[0], _NEUTRAL_FORM[match[0].lower()])


def neutralize(caption: str) -> str:
    """``caption`` with its gendered words made gender-neutral (gender paper table 1).

    Nouns become neutral nouns ("man" -> "person", "girls" -> "children", "wife" -> "spouse",
    "woman's" -> "person's"); "men and women" and the like become "people"; the adjectives
    "female" / "male" are dropped ("a female surfer" -> "a surfer", "a male athlete" ->
    "an athlete") and the nouns become "person" ("a female in black" -> "a person in black").
    Capitalisation of each replaced word is kept.

    >>> neutralize("A group of young men and women sitting at a table.")
    'A group of young people sitting at a table.'
    """
    text = _PAIR.sub(_merge_pair, caption)
    text = _SEX_WORD.sub(_replace_sex_word, text)
    return _GENDERED_NOUN.sub(_replace_noun, text)
