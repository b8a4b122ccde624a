"""Caption text: noun phrases, class mentions, caption rewrites and gender words."""

from xmr.text.class_words import (
    COCO_CLASS_WORDS,
    COCO_CLASSES,
    FLICKR30K_ENTITY_TYPES,
    FLICKR30K_ODMAP_CLASSES,
    ClassWordTable,
)
from xmr.text.gender import (
    FEMININE_WORDS,
    GENDER_NEUTRAL_WORDS,
    MASCULINE_WORDS,
    Gender,
    caption_gender,
    image_gender,
    neutralize,
)
from xmr.text.mentions import (
    caption_mentions,
    mentioned_classes,
    mentioned_classes_batch,
    phrase_classes,
)
from xmr.text.noun_phrases import (
    NP_GRAMMAR,
    noun_phrase_spans,
    noun_phrase_spans_batch,
    noun_phrases,
    require_tagger,
    tagged_tokens,
)
from xmr.text.removal import remove_noun_phrases

__all__ = [
    "COCO_CLASSES",
    "COCO_CLASS_WORDS",
    "FEMININE_WORDS",
    "FLICKR30K_ENTITY_TYPES",
    "FLICKR30K_ODMAP_CLASSES",
    "GENDER_NEUTRAL_WORDS",
    "MASCULINE_WORDS",
    "NP_GRAMMAR",
    "ClassWordTable",
    "Gender",
    "caption_gender",
    "caption_mentions",
    "image_gender",
    "mentioned_classes",
    "mentioned_classes_batch",
    "neutralize",
    "noun_phrase_spans",
    "noun_phrase_spans_batch",
    "noun_phrases",
    "phrase_classes",
    "remove_noun_phrases",
    "require_tagger",
    "tagged_tokens",
]
