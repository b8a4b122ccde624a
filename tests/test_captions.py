"""xmr.synth.removal.captions: the caption y' of a synthetic image (noun-phrase removal, prompts, a
captioning model), on hand-made captions, the real coco-mini captions, the Flickr30k fixture and
tiny random captioning models loaded through ``from_pretrained``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from open_clip.zero_shot_metadata import OPENAI_IMAGENET_TEMPLATES
from PIL import Image
from tiny_captioner import build_tiny_captioner, build_tiny_vision_encoder_decoder
from transformers import AutoProcessor, BertConfig

from xmr.data import Caption, EntityPhrase, ImageRecord, read_coco, read_flickr30k
from xmr.synth.removal.captions import (
    CAPTION_METHODS,
    ImageCaptioner,
    prompt_caption,
    prompt_templates,
    remove_entity_phrases,
    rewrite_caption,
)
from xmr.text import COCO_CLASS_WORDS, mentioned_classes_batch

FLICKR = Path(__file__).parent / "fixtures" / "flickr30k"
PAPER_EXAMPLE = "Two dogs fighting over a frisbee"


def test_caption_methods() -> None:
    assert CAPTION_METHODS == ("np-removal", "prompt", "captioner")


# --------------------------------------------------------------------------- COCO / ToyWorld


@pytest.mark.parametrize("dataset", ["coco", "toyworld"])
def test_rewrite_the_papers_example(nltk_tagger: None, dataset: str) -> None:
    caption = Caption(1, PAPER_EXAMPLE)
    assert rewrite_caption(caption, {"frisbee"}, dataset) == "Two dogs fighting over"
    assert rewrite_caption(caption, {"dog", "frisbee"}, dataset) == "Fighting over"
    assert rewrite_caption(caption, {"cat"}, dataset) == PAPER_EXAMPLE


@pytest.mark.parametrize(
    ("text", "removed", "expected"),
    [
        (
            "A man throws a frisbee to his dog in the park.",
            ["person", "frisbee"],
            "Throws to his dog in the park.",
        ),
        ("A woman riding a horse next to a dog.", ("horse", "person"), "Riding next to a dog."),
        ("A man and his dog on a bench.", {"person", "dog"}, "On a bench."),
    ],
)
def test_rewrite_removes_several_classes(
    nltk_tagger: None, text: str, removed: list[str], expected: str
) -> None:
    assert rewrite_caption(Caption(2, text), removed, "coco") == expected


def test_rewrite_that_leaves_no_word_is_an_error(nltk_tagger: None) -> None:
    with pytest.raises(ValueError, match=r"caption 57 becomes empty"):
        rewrite_caption(Caption(57, "Two dogs."), {"dog"}, "coco")
    with pytest.raises(ValueError, match=r"caption 58 becomes empty"):
        rewrite_caption(Caption(58, "A man, a dog."), {"dog", "person"}, "toyworld")


def test_rewrite_unknown_dataset() -> None:
    with pytest.raises(ValueError, match=r"'imagenet'"):
        rewrite_caption(Caption(1, PAPER_EXAMPLE), {"dog"}, "imagenet")


def _words(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", text.lower())


def _is_subsequence(short: list[str], long: list[str]) -> bool:
    remaining = iter(long)
    return all(word in remaining for word in short)


def test_rewrite_on_real_coco_captions(nltk_tagger: None, coco_mini: Path) -> None:
    """Every image's captions, each class of the image that a caption mentions removed: the
    rewrite no longer mentions it and keeps the other words in order (or is empty -> error)."""
    records: list[ImageRecord] = read_coco(coco_mini, "train")
    captions = [(record, caption) for record in records for caption in record.captions]
    mentions = mentioned_classes_batch([c.text for _, c in captions], COCO_CLASS_WORDS)
    jobs, empty = [], 0
    for (record, caption), mentioned in zip(captions, mentions, strict=True):
        for removed in sorted(mentioned & record.categories):
            try:
                jobs.append((caption, removed, rewrite_caption(caption, {removed}, "coco")))
            except ValueError as exc:
                assert f"caption {caption.id} becomes empty" in str(exc)
                empty += 1
    assert len(jobs) > 300  # coco-mini: 80 images, 400 captions
    assert empty < len(jobs) / 20
    after = mentioned_classes_batch([text for _, _, text in jobs], COCO_CLASS_WORDS)
    for (caption, removed, text), still in zip(jobs, after, strict=True):
        assert removed not in still, (caption.text, removed, text)
        assert text != caption.text
        assert _is_subsequence(_words(text), _words(caption.text)), (caption.text, text)


# --------------------------------------------------------------------------- Flickr30k


@pytest.fixture(scope="module")
def flickr_captions() -> dict[int, Caption]:
    """The Flickr30k fixture's annotated captions by id (train and test splits)."""
    records = read_flickr30k(FLICKR, "train") + read_flickr30k(FLICKR, "test")
    return {caption.id: caption for record in records for caption in record.captions}


def test_flickr30k_fixture_captions(flickr_captions: dict[int, Caption]) -> None:
    assert flickr_captions[0].text == "A man in a red hat holds a dog 's leash ."
    assert flickr_captions[1].phrases[0] == EntityPhrase("The person", ("people", "other"), "11")


@pytest.mark.parametrize(
    ("caption_id", "removed", "expected"),
    [
        (0, {"people"}, "In a red hat holds a dog 's leash."),
        (0, {"bodyparts"}, "A man in a red hat holds."),
        (0, {"people", "clothing", "bodyparts"}, "In holds."),
        (1, {"animals"}, "The person walks in the park."),
        (1, {"other"}, "Walks a dog in the park."),  # a phrase of two types
        (2, {"animals"}, "Someone enjoys."),
        (3, {"people"}, "Throws a ball to."),
        (3, {"vehicles", "instruments"}, "A girl throws a ball to her friend ."),  # unchanged
    ],
)
def test_remove_entity_phrases(
    flickr_captions: dict[int, Caption], caption_id: int, removed: set[str], expected: str
) -> None:
    caption = flickr_captions[caption_id]
    assert remove_entity_phrases(caption, removed) == expected
    assert rewrite_caption(caption, removed, "flickr30k") == expected


def test_flickr30k_rewrite_that_leaves_no_word(flickr_captions: dict[int, Caption]) -> None:
    [caption] = [c for c in flickr_captions.values() if c.text == "A round blue shape ."]
    assert remove_entity_phrases(caption, {"other"}) == "."
    with pytest.raises(ValueError, match=rf"caption {caption.id} becomes empty"):
        rewrite_caption(caption, {"other"}, "flickr30k")


def test_repeated_phrases_map_to_successive_occurrences() -> None:
    caption = Caption(
        9,
        "A dog chases a dog past a dog .",
        (
            EntityPhrase("A dog", ("animals",)),
            EntityPhrase("a dog", ("other",)),
            EntityPhrase("a dog", ("people",)),
        ),
    )
    assert remove_entity_phrases(caption, {"animals"}) == "Chases a dog past a dog."
    assert remove_entity_phrases(caption, {"other"}) == "A dog chases past a dog."
    assert remove_entity_phrases(caption, {"people"}) == "A dog chases a dog past."


def test_phrases_match_whole_words_and_any_spacing() -> None:
    caption = Caption(10, "Near a mannequin stands a  man .", (EntityPhrase("a man", ("people",)),))
    assert remove_entity_phrases(caption, {"people"}) == "Near a mannequin stands."


def test_phrase_not_in_the_caption_is_an_error() -> None:
    caption = Caption(
        11,
        "A dog runs .",
        (EntityPhrase("a cat", ("animals",)), EntityPhrase("A dog", ("animals",))),
    )
    with pytest.raises(ValueError, match=r"caption 11: phrase 'a cat' not found"):
        remove_entity_phrases(caption, {"animals"})
    # Phrases are located left to right: one that only occurs before its predecessor is lost.
    swapped = Caption(12, "A dog chases a cat .", caption.phrases)
    with pytest.raises(ValueError, match=r"caption 12: phrase 'A dog' not found"):
        remove_entity_phrases(swapped, {"animals"})


# --------------------------------------------------------------------------- prompts


def test_prompt_templates_are_open_clips() -> None:
    assert prompt_templates() == tuple(OPENAI_IMAGENET_TEMPLATES)
    assert len(prompt_templates()) == 80


def test_prompt_caption_joins_sorted_names() -> None:
    fills = {
        ("person",): "person",
        ("person", "dog"): "dog and person",
        ("person", "frisbee", "dog", "dog"): "dog, frisbee and person",
    }
    for kept, joined in fills.items():
        texts = {template(joined) for template in OPENAI_IMAGENET_TEMPLATES}
        for seed in range(20):
            assert prompt_caption(kept, seed) in texts
    assert prompt_caption(["person", "dog"], 3) == prompt_caption(("dog", "person", "dog"), 3)


def test_prompt_caption_is_deterministic_per_seed() -> None:
    assert prompt_caption(["dog"], seed=7) == prompt_caption(["dog"], seed=7)
    assert len({prompt_caption(["dog"], seed) for seed in range(10)}) > 1


def test_prompt_caption_reaches_every_template() -> None:
    by_text = {template("dog"): i for i, template in enumerate(OPENAI_IMAGENET_TEMPLATES)}
    assert len(by_text) == 80
    assert {by_text[prompt_caption(["dog"], seed)] for seed in range(2000)} == set(range(80))


def test_prompt_caption_needs_a_kept_class() -> None:
    with pytest.raises(ValueError, match="at least one kept class"):
        prompt_caption([], seed=0)


# --------------------------------------------------------------------------- captioning model


@pytest.fixture(scope="module")
def tiny_blip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_captioner(tmp_path_factory.mktemp("tiny_blip"))


def _images() -> list[Image.Image]:
    """Images of different sizes and modes (RGB, grey, RGBA)."""
    return [
        Image.new("RGB", (64, 64), (200, 30, 30)),
        Image.new("L", (50, 80), 120),
        Image.new("RGBA", (300, 20), (0, 0, 255, 128)),
    ]


def test_tiny_captioner_builds_identically_and_loads_with_auto_processor(
    tiny_blip: Path, tmp_path: Path
) -> None:
    again = build_tiny_captioner(tmp_path / "again")
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (again / name).read_bytes() == (tiny_blip / name).read_bytes()
    processor = AutoProcessor.from_pretrained(tiny_blip)
    assert type(processor).__name__ == "BlipProcessor"
    tokenizer = processor.tokenizer
    assert tokenizer.bos_token == "[DEC]"
    assert tokenizer.decode(tokenizer("two dogs").input_ids, skip_special_tokens=True) == "two dogs"
    pixels = processor(images=_images(), return_tensors="pt")["pixel_values"]
    assert tuple(pixels.shape) == (3, 3, 32, 32)


def test_captioner_is_cheap_to_construct_and_loads_once(tiny_blip: Path) -> None:
    captioner = ImageCaptioner(str(tiny_blip), device="cpu", max_new_tokens=8)
    assert captioner.model_name == str(tiny_blip)
    assert captioner.load() is captioner
    assert captioner.load() is captioner


def test_captioner_captions_a_batch_deterministically(tiny_blip: Path) -> None:
    captioner = ImageCaptioner(str(tiny_blip), device="cpu", max_new_tokens=8).load()
    captions = captioner.caption(_images())
    assert len(captions) == 3
    for text in captions:
        assert text == text.strip() and text
        assert "[" not in text  # special tokens are dropped
    assert captioner.caption(_images()) == captions
    assert ImageCaptioner(str(tiny_blip), max_new_tokens=8).caption(_images()) == captions
    assert captioner.caption([]) == []


def test_vision_encoder_decoder_captioner(tmp_path: Path) -> None:
    model_dir = build_tiny_vision_encoder_decoder(tmp_path / "ved")
    captioner = ImageCaptioner(str(model_dir), device="cpu", max_new_tokens=6, num_beams=2)
    captions = captioner.caption(_images())
    assert len(captions) == 3 and all(text == text.strip() and text for text in captions)
    assert captioner.caption(_images()) == captions


def test_missing_captioner_names_the_model(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(OSError, match=re.escape(f"captioning model '{missing}' not found")):
        ImageCaptioner(str(missing)).load()


def test_unsupported_model_type_is_refused(tmp_path: Path) -> None:
    BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"is a 'bert' model; supported: blip"):
        ImageCaptioner(str(tmp_path)).load()
