"""A tiny random-weight GroundingDINO checkpoint for tests (builds in about a second, offline).

The model hard-codes the BERT ids of [CLS] 101, [SEP] 102, "." 1012 and "?" 1029, so the tiny
vocabulary keeps them there (the other ids are the class words and ``[unusedN]`` fillers). Its
text length is 64 tokens: the 12 ToyWorld classes fit one prompt, COCO's 80 take several.
With random weights the scores are arbitrary but mostly near 1: the default thresholds already
give detections (use ``box_threshold=0.01`` to keep nearly all of the 20 queries' boxes).
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    BertConfig,
    BertTokenizer,
    GroundingDinoConfig,
    GroundingDinoForObjectDetection,
    GroundingDinoImageProcessor,
    GroundingDinoProcessor,
    SwinConfig,
)

from xmr.text.class_words import COCO_CLASSES
from xmr.toyworld.scene.classes import CLASSES

TEXT_LENGTH = 64
IMAGE_SIDE = 128

# Ids GroundingDINO's code relies on, at their bert-base-uncased positions.
_FIXED_IDS = {0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"}
_PUNCTUATION = {1012: ".", 1029: "?", 1010: ",", 1011: "-", 1005: "'"}
_FIRST_WORD_ID = 104
_VOCAB_SIZE = 1030
_EXTRA_WORDS = ("a", "an", "the", "of", "on", "with", "and", "in", "man", "woman", "red", "blue")


def _vocab() -> dict[str, int]:
    """Token -> id: specials and punctuation at BERT's ids, class words from 104, fillers."""
    words = sorted(
        {word for name in (*CLASSES, *COCO_CLASSES) for word in name.split()} | set(_EXTRA_WORDS)
    )
    tokens = {**_FIXED_IDS, **_PUNCTUATION}
    free = (i for i in range(_FIRST_WORD_ID, _VOCAB_SIZE) if i not in tokens)
    tokens.update(zip(free, words, strict=False))
    return {tokens.get(i, f"[unused{i}]"): i for i in range(_VOCAB_SIZE)}


def bert_tokenizer(max_length: int = TEXT_LENGTH) -> BertTokenizer:
    """A BERT WordPiece tokenizer over the small vocabulary above (ids < 1030, BERT's specials
    and punctuation at bert-base-uncased's ids), truncating at ``max_length`` tokens."""
    return BertTokenizer(vocab=_vocab(), model_max_length=max_length)


def build_tiny_grounding_dino(out_dir: Path) -> Path:
    """Save a tiny GroundingDINO (fixed seed) and its processor to ``out_dir``; return it.

    Swin backbone (embed 8, one block per stage) + 1-layer BERT (hidden 32), d_model 32, 1 encoder
    and 2 decoder layers, 20 queries; images resized to a shortest side of 128 px (longest at
    most 192). Loads back with ``AutoProcessor`` / ``GroundingDinoForObjectDetection``
    ``.from_pretrained(out_dir)``.
    """
    out_dir = Path(out_dir)
    tokenizer = bert_tokenizer()
    config = GroundingDinoConfig(
        backbone_config=SwinConfig(
            image_size=IMAGE_SIDE,
            embed_dim=8,
            depths=[1, 1, 1, 1],
            num_heads=[1, 1, 1, 1],
            window_size=4,
            out_indices=[2, 3, 4],
        ),
        text_config=BertConfig(
            vocab_size=_VOCAB_SIZE,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=TEXT_LENGTH,
        ),
        d_model=32,
        encoder_layers=1,
        decoder_layers=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_n_points=2,
        decoder_n_points=2,
        num_queries=20,
        max_text_len=TEXT_LENGTH,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GroundingDinoForObjectDetection(config).eval()
    image_processor = GroundingDinoImageProcessor(
        size={"shortest_edge": IMAGE_SIDE, "longest_edge": IMAGE_SIDE * 3 // 2}
    )
    model.save_pretrained(out_dir)
    GroundingDinoProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(
        out_dir
    )
    return out_dir
