"""Captions: five per image from varied templates, with synonyms, counts and reporting bias.

Words come from the class-word table of the odmap paper (appendix A) and the gender word lists
of the gender paper (appendix A). Class words are always nouns inside noun phrases ("a dog
catching a red frisbee", "two cups on a wooden table"), never verbs, so a POS-tag noun-phrase
chunker finds them. Persons are named by the drawn gender ("a man", "two women", "a man and a
woman") unless the caption is gender-neutral ("a person", "two people", "a rider").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xmr.toyworld.scene.sample import Scene

Weighted = tuple[tuple[str, float], ...]

# class -> (singular words, plural words), weighted. Every word is in the odmap class-word table
# (or is the class name or its plural) so that the table's whole-word matching finds it: no
# "mugs", "bikes" or "balls", which the table lacks; no "truck", a COCO class itself. Words the
# NLTK perceptron tagger often tags as adjectives in these templates are left out ("a puppy",
# "a kitten", "a kitty", "a lady", "a dining table", bare "umbrellas").
WORDS: dict[str, tuple[Weighted, Weighted]] = {
    "dog": ((("dog", 1),), (("dogs", 3), ("puppies", 1))),
    "frisbee": ((("frisbee", 3), ("disc", 1), ("disk", 0.5)), (("frisbees", 1),)),
    "horse": ((("horse", 4), ("pony", 1), ("foal", 0.5)), (("horses", 1),)),
    "car": ((("car", 4), ("van", 1)), (("cars", 1),)),
    "bicycle": ((("bicycle", 2), ("bike", 2)), (("bicycles", 1),)),
    "cup": ((("cup", 2), ("mug", 2)), (("cups", 1),)),
    "cat": ((("cat", 1),), (("cats", 1),)),
    "sports ball": ((("ball", 3),), (("sports balls", 1),)),
    "dining table": ((("table", 1),), (("tables", 3), ("dining tables", 1))),
    "umbrella": ((("umbrella", 1),), (("open umbrellas", 1),)),
    "bench": ((("bench", 1),), (("benches", 1),)),
}
EXTRA_WORDS = {  # (class, colour of every instance) -> an extra singular word
    ("car", "yellow"): ("taxi", 3),
    ("sports ball", "white"): ("soccer ball", 1),
}

PERSON_WORDS: dict[str, tuple[Weighted, Weighted]] = {
    "male": ((("man", 4), ("boy", 1)), (("men", 4), ("boys", 1))),
    "female": ((("woman", 4), ("girl", 1)), (("women", 1),)),
    "neutral": ((("person", 3), ("child", 0.4), ("kid", 0.4)), (("people", 3), ("kids", 0.5))),
}
ROLE_WORDS = {
    "horse": ("rider", "jockey"),
    "bicycle": ("rider", "biker"),
    "frisbee": ("player",),
    "sports ball": ("player",),
}

NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
AGENTS = ("person", "dog", "cat", "horse")
CONNECTORS = ("and", "with", "near", "beside")
PLACES = {
    "grass": ("on the grass", "in a field", "in a park", "on a lawn"),
    "beach": ("on the beach", "on the sand", "by the sea", "at the beach"),
    "indoor": ("in a room", "indoors", "in a kitchen", "in a living room"),
    "road": ("on the road", "on a street", "by the road", "in the street"),
}
PREFIXES = ("a photo of", "a picture of", "an image of", "there is")

# (relation, subject class) -> verbs; the subject is the holder / rider / the thing on a table.
VERBS = {
    ("hold", "person", "cup"): ("holding", "with", "carrying"),
    ("hold", "person", "frisbee"): ("holding", "throwing", "with"),
    ("hold", "person", "sports ball"): ("holding", "playing with", "with"),
    ("hold", "dog", "frisbee"): ("catching", "chasing", "with", "carrying"),
    ("hold", "dog", "sports ball"): ("chasing", "with", "playing with"),
    ("ride", "person", "horse"): ("riding", "on", "sitting on"),
    ("ride", "person", "bicycle"): ("riding", "on"),
    ("on", "cup", "dining table"): ("on", "standing on"),
    ("under", "cat", "dining table"): ("under", "sitting under", "beneath"),
}


@dataclass(frozen=True)
class Fact:
    """A class-level interaction: ``subject`` (relation) ``object``, e.g. person ride horse."""

    subject: str
    relation: str
    object: str


def class_words(category: str) -> frozenset[str]:
    """Every word (singular and plural) captions may use for ``category``."""
    if category == "person":
        groups = PERSON_WORDS.values()
        words = {w for one, many in groups for w, _ in one + many}
        return frozenset(words | {w for roles in ROLE_WORDS.values() for w in roles})
    one, many = WORDS[category]
    extra = [word for (c, _), (word, _) in EXTRA_WORDS.items() if c == category]
    return frozenset([w for w, _ in one + many] + extra)


def _choice(rng: np.random.Generator, options: Sequence[Any]) -> Any:
    """One of ``options``: plain values, or ``(value..., weight)`` tuples weighted by the last."""
    if isinstance(options[0], tuple):
        weights = np.array([o[-1] for o in options], float)
        return options[int(rng.choice(len(options), p=weights / weights.sum()))]
    return options[int(rng.integers(len(options)))]


def article(word: str) -> str:
    """``"an"`` before a vowel, else ``"a"``."""
    return "an" if word[:1].casefold() in tuple("aeiou") else "a"


def class_noun(category: str, plural: bool = False) -> str:
    """The plain caption word for ``category``: its first singular (or plural) word, "ball" for
    sports ball, "tables" for dining tables."""
    one, many = WORDS[category]
    return (many if plural else one)[0][0]


def _counted(count: int, singular: str, plural: str) -> str:
    if count == 1:
        return f"{article(singular)} {singular}"
    return f"{NUMBERS.get(count, 'several')} {plural}"


class _Captioner:
    """Caption sampler for one scene."""

    def __init__(
        self,
        scene: Scene,
        rng: np.random.Generator,
        *,
        neutral: bool,
        gendered_word_prob: float,
        colour_prob: float,
    ) -> None:
        self.scene, self.rng = scene, rng
        self.neutral, self.gendered_word_prob = neutral, gendered_word_prob
        self.colour_prob = colour_prob
        self.counts = Counter(o.category for o in scene.objects)
        self.classes = list(self.counts)
        self.colours = {
            c: {o.colour for o in scene.objects if o.category == c} for c in self.classes
        }
        self.facts = self._facts()

    def _facts(self) -> list[Fact]:
        """Interactions true of every instance of their subject class (so plurals stay true).

        The object must be a single instance ("a man riding a horse", not "... two horses").
        """
        per_object = []
        for obj in self.scene.objects:
            if obj.parent is None:
                continue
            parent = self.scene.objects[obj.parent]
            if obj.relation == "hold":
                per_object.append(Fact(parent.category, "hold", obj.category))
            else:
                per_object.append(Fact(obj.category, obj.relation, parent.category))
        facts = []
        for fact in dict.fromkeys(per_object):
            n = sum(f == fact for f in per_object)
            if self.counts[fact.object] == 1 and (
                self.counts[fact.subject] == 1
                or (fact.relation in ("on", "under") and n == self.counts[fact.subject])
            ):
                facts.append(fact)
        return facts

    def person_phrase(self, role_of: str | None) -> str:
        """All persons: "a man", "two women", "a man and a woman", "a rider", "two people"."""
        rng = self.rng
        genders = [o.gender for o in self.scene.objects if o.category == "person"]
        k = len(genders)
        mixed = len(set(genders)) > 1
        neutral = self.neutral or rng.random() >= self.gendered_word_prob
        if mixed and rng.random() < 0.3:
            neutral = True
        if neutral:
            if k == 1 and role_of in ROLE_WORDS and rng.random() < 0.5:
                role = _choice(rng, ROLE_WORDS[role_of])
                return f"{article(role)} {role}"
            if k >= 3 and rng.random() < 0.3:
                return "a group of people"
            one, many = PERSON_WORDS["neutral"]
            return _counted(k, _choice(rng, one)[0], _choice(rng, many)[0])
        parts = []
        for gender in ("male", "female"):
            n = genders.count(gender)
            if n:
                one, many = PERSON_WORDS[gender]
                parts.append(_counted(n, _choice(rng, one)[0], _choice(rng, many)[0]))
        if len(parts) == 2 and rng.random() < 0.5:
            parts.reverse()
        return " and ".join(parts)

    def phrase(self, category: str, role_of: str | None = None) -> str:
        """A noun phrase for all instances of ``category``: count, maybe colour, synonym."""
        if category == "person":
            return self.person_phrase(role_of)
        rng = self.rng
        one, many = WORDS[category]
        colours = self.colours[category]
        if len(colours) == 1 and (category, *colours) in EXTRA_WORDS:
            one = (*one, EXTRA_WORDS[(category, *colours)])
        singular, plural = _choice(rng, one)[0], _choice(rng, many)[0]
        if len(colours) == 1 and rng.random() < self.colour_prob:
            colour = next(iter(colours))
            singular, plural = f"{colour} {singular}", f"{colour} {plural}"
        return _counted(self.counts[category], singular, plural)

    def caption(self, omit_prob: float) -> str:
        """One caption: noun phrases (with interaction verbs) joined, maybe a place and prefix."""
        rng = self.rng
        mentioned = [c for c in self.classes if rng.random() >= omit_prob]
        if not mentioned:
            mentioned = [self.classes[int(rng.integers(len(self.classes)))]]
        keys = {c: (c not in AGENTS or rng.random() < 0.25, rng.random()) for c in mentioned}
        order = sorted(mentioned, key=keys.__getitem__)
        used: set[str] = set()
        chunks = []
        for category in order:
            if category in used:
                continue
            used.add(category)
            forward = [f for f in self.facts if f.subject == category and f.object in mentioned]
            forward = [f for f in forward if f.object not in used]
            backward = [
                f
                for f in self.facts
                if f.object == category and f.subject in mentioned and f.subject not in used
            ]
            if forward:
                fact = forward[int(rng.integers(len(forward)))]
                verb = _choice(rng, VERBS[(fact.relation, fact.subject, fact.object)])
                subject = self.phrase(category, role_of=fact.object)
                chunks.append(f"{subject} {verb} {self.phrase(fact.object)}")
                used.add(fact.object)
            elif backward and rng.random() < 0.5:
                fact = backward[int(rng.integers(len(backward)))]
                chunks.append(f"{self.phrase(category)} with {self.phrase(fact.subject)}")
                used.add(fact.subject)
            else:
                chunks.append(self.phrase(category))
        if len(chunks) == 1:
            text = chunks[0]
        elif len(chunks) == 2:
            text = f"{chunks[0]} {_choice(rng, CONNECTORS)} {chunks[1]}"
        elif rng.random() < 0.5:
            text = ", ".join(chunks[:-1]) + " and " + chunks[-1]
        else:
            text = f"{chunks[0]} {_choice(rng, ('with', 'near'))} " + (
                ", ".join(chunks[1:-1]) + " and " + chunks[-1]
            )
        if rng.random() < 0.55:
            text = f"{text} {_choice(rng, PLACES[self.scene.background])}"
        if rng.random() < 0.25:
            prefix = _choice(rng, PREFIXES)
            if prefix == "there is" and not text.startswith(("a ", "an ")):
                prefix = "there are"
            text = f"{prefix} {text}"
        return text[0].upper() + text[1:] + "."


def make_captions(
    scene: Scene,
    rng: np.random.Generator,
    *,
    n: int = 5,
    omit_prob: float = 0.2,
    colour_prob: float = 0.4,
    gendered_word_prob: float = 0.85,
    neutral: bool = False,
) -> list[str]:
    """``n`` captions, distinct where possible, for a scene with at least one object.

    ``omit_prob``: each caption leaves out each class with this probability (reporting bias),
    keeping at least one. ``colour_prob``: a class whose instances share one colour is named with
    it with this probability (the colour's reporting bias). ``neutral``: only gender-neutral
    person words.
    """
    captioner = _Captioner(
        scene,
        rng,
        neutral=neutral,
        gendered_word_prob=gendered_word_prob,
        colour_prob=colour_prob,
    )
    captions: list[str] = []
    for _ in range(n):
        text = captioner.caption(omit_prob)
        for _ in range(10):
            if text not in captions:
                break
            text = captioner.caption(omit_prob)
        captions.append(text)
    return captions
