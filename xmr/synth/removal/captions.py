"""The caption y' of a synthetic image x' (odmap paper §3.3, §4.1, appendix A).

x' is an image whose objects of the classes C^r were removed and whose classes C^\\r were kept.
Its caption is written in one of three ways (:data:`CAPTION_METHODS`):

- ``np-removal``: the source caption without the noun phrases that name a removed class
  (:func:`rewrite_caption`). COCO and ToyWorld chunk the caption and match the phrases with the
  class-word table (:func:`xmr.text.remove_noun_phrases`); Flickr30k cuts its annotated entity
  phrases whose types are removed (:func:`remove_entity_phrases`). "Two dogs fighting over a
  frisbee" without *frisbee* becomes "Two dogs fighting over".
- ``prompt``: one of CLIP's 80 ImageNet prompt templates, picked at random and filled with the
  kept classes: "a drawing of the dog and person." (:func:`prompt_caption`).
- ``captioner``: a pre-trained image-captioning model (:class:`ImageCaptioner`; the paper uses
  ClipCap trained on COCO, the default here is BLIP base fine-tuned for COCO captioning).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import numpy as np

from xmr.data.records import Caption
from xmr.pretrained import resolve_device
from xmr.text.class_words import COCO_CLASS_WORDS
from xmr.text.removal import cut_spans, remove_noun_phrases

if TYPE_CHECKING:
    from collections.abc import Callable

    from PIL import Image
    from transformers import PreTrainedModel, PreTrainedTokenizerBase
    from transformers.image_processing_utils import BaseImageProcessor

CAPTION_METHODS: tuple[str, ...] = ("np-removal", "prompt", "captioner")
"""How y' is written: noun-phrase removal (the paper's default), a prompt, a captioning model."""

DEFAULT_CAPTIONER = "Salesforce/blip-image-captioning-base"
"""BLIP base fine-tuned for captioning on COCO (the paper's ClipCap is also trained on COCO)."""

CAPTIONER_MODEL_TYPES: tuple[str, ...] = ("blip", "vision-encoder-decoder")
"""The model types :class:`ImageCaptioner` loads: BLIP captioning
(``BlipForConditionalGeneration``) and vision encoder-decoder captioners such as
``nlpconnect/vit-gpt2-image-captioning`` (``VisionEncoderDecoderModel``)."""

_WORD = re.compile(r"[^\W_]")

_Parts = tuple["PreTrainedModel", "BaseImageProcessor", "PreTrainedTokenizerBase"]
"""A loaded captioner: model (eval mode, on its device), image processor, tokenizer."""


# --------------------------------------------------------------------------- noun-phrase removal


def _locate(text: str, phrase: str, start: int) -> tuple[int, int] | None:
    """The first ``(start, end)`` of ``phrase`` in ``text`` at or after ``start``, or None.

    Case-insensitive; any run of whitespace matches any other, and a phrase that begins or ends
    with a letter or digit only matches whole words ("a man" is not found in "a mannequin").
    """
    tokens = phrase.split()
    if not tokens:
        return None
    pattern = r"\s+".join(map(re.escape, tokens))
    if _WORD.match(tokens[0][0]):
        pattern = r"(?<![^\W_])" + pattern
    if _WORD.match(tokens[-1][-1]):
        pattern += r"(?![^\W_])"
    found = re.compile(pattern, re.IGNORECASE).search(text, start)
    return found.span() if found else None


def remove_entity_phrases(caption: Caption, classes: Collection[str]) -> str:
    """``caption`` without its annotated phrases whose entity types intersect ``classes``.

    The Flickr30k version of noun-phrase removal: the (type, phrase) pairs are annotated
    (Flickr30k Entities), so no chunking or word table is involved. Each phrase is located in
    the caption text case-insensitively, left to right from the end of the previous phrase, so
    repeated phrases map to successive occurrences. The text is tidied as by
    :func:`xmr.text.remove_noun_phrases`; a caption with no such phrase comes back unchanged.

    >>> from xmr.data.records import EntityPhrase
    >>> caption = Caption(7, "A man walks a dog .", (
    ...     EntityPhrase("A man", ("people",)), EntityPhrase("a dog", ("animals",))))
    >>> remove_entity_phrases(caption, {"animals"})
    'A man walks.'

    Raises:
        ValueError: a phrase could not be located in the caption text (names caption and phrase).
    """
    wanted = set(classes)
    if not any(wanted.intersection(phrase.types) for phrase in caption.phrases):
        return caption.text
    cuts, position = [], 0
    for phrase in caption.phrases:
        span = _locate(caption.text, phrase.text, position)
        if span is None:
            raise ValueError(
                f"caption {caption.id}: phrase {phrase.text!r} not found in "
                f"{caption.text!r} after character {position}"
            )
        position = span[1]
        if wanted.intersection(phrase.types):
            cuts.append(span)
    return cut_spans(caption.text, cuts)


def rewrite_caption(caption: Caption, removed: Collection[str], dataset: str) -> str:
    """y' by noun-phrase removal: ``caption`` without the phrases that name a ``removed`` class.

    ``dataset`` picks the matching (paper §4.1): ``flickr30k`` cuts annotated entity phrases by
    type (:func:`remove_entity_phrases`, ``removed`` are entity types such as ``"people"``);
    ``coco`` and ``toyworld`` chunk the caption and match the COCO class-word table
    (:func:`xmr.text.remove_noun_phrases`, ``removed`` are COCO class names). The result may be
    ungrammatical, as in the paper.

    Raises:
        ValueError: unknown ``dataset``; a Flickr30k phrase not found in its caption; or the
            caption becomes empty (no word is left).
    """
    if dataset == "flickr30k":
        text = remove_entity_phrases(caption, removed)
    elif dataset in ("coco", "toyworld"):
        text = remove_noun_phrases(caption.text, removed, COCO_CLASS_WORDS)
    else:
        raise ValueError(
            f"no noun-phrase removal for dataset {dataset!r}: expected coco, toyworld or flickr30k"
        )
    if not _WORD.search(text):
        raise ValueError(
            f"caption {caption.id} becomes empty after removing {sorted(removed)}: "
            f"{caption.text!r} -> {text!r}"
        )
    return text


# --------------------------------------------------------------------------- prompts


def _join_names(names: Sequence[str]) -> str:
    """``["dog"]`` -> "dog"; ``["dog", "person"]`` -> "dog and person"; three or more ->
    "dog, frisbee and person"."""
    if len(names) == 1:
        return names[0]
    return f"{', '.join(names[:-1])} and {names[-1]}"


def prompt_templates() -> tuple[Callable[[str], str], ...]:
    """CLIP's 80 ImageNet prompt templates (``open_clip.zero_shot_metadata``), class -> text.

    Imported on first use: importing open_clip takes seconds.
    """
    from open_clip.zero_shot_metadata import OPENAI_IMAGENET_TEMPLATES

    return tuple(OPENAI_IMAGENET_TEMPLATES)


def prompt_caption(kept: Sequence[str], seed: int) -> str:
    """y' from a prompt: one of CLIP's 80 ImageNet templates filled with the ``kept`` classes.

    The template is drawn uniformly with ``numpy.random.default_rng(seed)``; the class names are
    de-duplicated, sorted and joined naturally, so the result depends only on ``seed`` and the
    set of kept classes.

    >>> prompt_caption(["person", "dog"], seed=0)
    'a drawing of the dog and person.'

    Raises:
        ValueError: ``kept`` is empty (nothing left to describe).
    """
    names = sorted(set(kept))
    if not names:
        raise ValueError("a prompt caption needs at least one kept class")
    templates = prompt_templates()
    template = templates[int(np.random.default_rng(seed).integers(len(templates)))]
    return template(_join_names(names))


# --------------------------------------------------------------------------- captioning model


class ImageCaptioner:
    """A pre-trained transformers image-captioning model (BLIP or a vision encoder-decoder).

    Construction only stores the settings; :meth:`load` reads the model (a Hugging Face hub id
    or a local ``save_pretrained`` directory), and :meth:`caption` loads on first use.
    Captions are decoded with beam search and no sampling, so they are deterministic for a
    given model, device and batch.

    Args:
        model: hub id or local directory of the model, its image processor and tokenizer.
        device: torch device; ``"auto"`` is ``"cuda"`` when available, else ``"cpu"``.
        max_new_tokens: the most tokens generated per caption (its end token included).
        num_beams: beam width (1 = greedy).
    """

    def __init__(
        self,
        model: str = DEFAULT_CAPTIONER,
        *,
        device: str = "auto",
        max_new_tokens: int = 30,
        num_beams: int = 3,
    ) -> None:
        self.model_name = str(model)
        self.device = device
        self.max_new_tokens = max_new_tokens
        self.num_beams = num_beams
        self._loaded: _Parts | None = None

    def load(self) -> ImageCaptioner:
        """Load the model, its image processor and tokenizer (once); returns ``self``.

        Raises:
            OSError: the model is neither a local directory nor loadable from the hub or the
                local Hugging Face cache (the message names it).
            ValueError: the model is not of a supported type (:data:`CAPTIONER_MODEL_TYPES`).
        """
        self._parts()
        return self

    def _parts(self) -> _Parts:
        """The loaded model, image processor and tokenizer, loading them on first call."""
        if self._loaded is not None:
            return self._loaded
        from transformers import (
            AutoConfig,
            AutoImageProcessor,
            AutoModelForImageTextToText,
            AutoTokenizer,
        )

        try:
            config = AutoConfig.from_pretrained(self.model_name)
        except OSError as exc:
            raise OSError(
                f"captioning model {self.model_name!r} not found: it is not a local model "
                f"directory and could not be loaded from the Hugging Face hub or cache ({exc})"
            ) from exc
        if config.model_type not in CAPTIONER_MODEL_TYPES:
            raise ValueError(
                f"captioning model {self.model_name!r} is a {config.model_type!r} model; "
                f"supported: {', '.join(CAPTIONER_MODEL_TYPES)}"
            )
        # Not AutoProcessor: for vision encoder-decoder checkpoints it returns only the
        # tokenizer. The image processor and the tokenizer load on their own for both types.
        image_processor = AutoImageProcessor.from_pretrained(self.model_name)
        tokenizer = AutoTokenizer.from_pretrained(self.model_name)
        model = AutoModelForImageTextToText.from_pretrained(self.model_name, config=config)
        self._loaded = (model.to(resolve_device(self.device)).eval(), image_processor, tokenizer)
        return self._loaded

    def caption(self, images: list[Image.Image]) -> list[str]:
        """One caption per image, in order (loads the model on first use).

        Args:
            images: PIL images of any sizes and modes (converted to RGB and resized by the
                model's image processor); captioned as one batch.

        Returns:
            The decoded captions, special tokens dropped and whitespace stripped; ``[]`` for
            no images.
        """
        if not images:
            return []
        import torch

        model, image_processor, tokenizer = self._parts()
        pixels = image_processor(
            images=[image.convert("RGB") for image in images], return_tensors="pt"
        )["pixel_values"]
        with torch.inference_mode():
            tokens = model.generate(
                pixel_values=pixels.to(model.device, model.dtype),
                max_new_tokens=self.max_new_tokens,
                num_beams=self.num_beams,
                do_sample=False,
            )
        return [text.strip() for text in tokenizer.batch_decode(tokens, skip_special_tokens=True)]
