"""Tiny random-weight image-captioning models, saved in transformers layout.

Tests load them through the real ``from_pretrained`` path
(``xmr.synth.removal.captions.ImageCaptioner``, ``AutoProcessor``,
``AutoModelForImageTextToText``). The tokenizer is a real ``BertTokenizer`` over a 30-token
vocabulary of caption words; the models are a few hundred kilobytes of random weights that read
32 x 32 px images and write a caption of random words in well under a second.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    BertConfig,
    BertTokenizer,
    BlipConfig,
    BlipForConditionalGeneration,
    BlipImageProcessor,
    BlipProcessor,
    GenerationConfig,
    VisionEncoderDecoderConfig,
    VisionEncoderDecoderModel,
    ViTConfig,
    ViTImageProcessor,
)

SEED = 0
IMAGE_SIZE = 32  # px, both sides; the image processors resize every input to it
WIDTH = 32  # hidden size of every tiny transformer
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # BERT's ids 0-4
WORDS = (
    "a", "an", "the", "two", "of", "on", "in", "with", "and", "near", "is", "are", "dog", "dogs",
    "cat", "person", "man", "woman", "people", "frisbee", "ball", "table", "street", "grass",
    "photo", "sitting", "standing", "playing", "holding",
)  # fmt: skip
BLIP_BOS = "[DEC]"  # BLIP's decoder start token, as in Salesforce/blip-image-captioning-base


def _tokenizer(extra: tuple[str, ...] = (), **kwargs: str) -> BertTokenizer:
    """A lower-casing ``BertTokenizer`` over :data:`SPECIAL_TOKENS`, ``extra`` and :data:`WORDS`."""
    vocab = {token: i for i, token in enumerate((*SPECIAL_TOKENS, *extra, *WORDS))}
    return BertTokenizer(vocab=vocab, model_max_length=40, **kwargs)


def _tiny_layers() -> dict[str, int]:
    return {
        "hidden_size": WIDTH,
        "intermediate_size": 2 * WIDTH,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
    }


def build_tiny_captioner(out_dir: Path) -> Path:
    """Build a tiny random ``BlipForConditionalGeneration`` with its processor and save both.

    Vision: 2-layer ViT, width 32, 32 px images in 8 px patches. Text decoder: 2-layer BERT,
    width 32, over the tiny vocabulary; like BLIP's real config, ``bos_token_id`` is the
    ``[DEC]`` token (the tokenizer's ``bos_token``, so decoding drops it), ``sep_token_id``
    ends a caption and ``pad_token_id`` is ``[PAD]`` (0). Processor: ``BlipImageProcessor`` at
    32 x 32 px + the ``BertTokenizer``. Weights come from a fixed seed, so two builds are
    identical; the global torch RNG is left untouched.

    Args:
        out_dir: folder to write into (``config.json``, ``model.safetensors``,
            ``processor_config.json``, ``tokenizer.json``, ...); created if missing.

    Returns:
        ``out_dir``, loadable with ``BlipForConditionalGeneration``/``AutoProcessor``/
        ``AutoImageProcessor``/``AutoTokenizer.from_pretrained(out_dir)``.
    """
    tokenizer = _tokenizer((BLIP_BOS,), bos_token=BLIP_BOS)
    config = BlipConfig(
        text_config={
            **_tiny_layers(),
            "vocab_size": len(tokenizer),
            "encoder_hidden_size": WIDTH,
            "max_position_embeddings": 64,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.sep_token_id,
            "sep_token_id": tokenizer.sep_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            **_tiny_layers(),
            "image_size": IMAGE_SIZE,
            "patch_size": 8,
            "initializer_range": 0.02,
        },
        projection_dim=WIDTH,
        image_text_hidden_size=WIDTH,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = BlipForConditionalGeneration(config)
    processor = BlipProcessor(
        image_processor=BlipImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}),
        tokenizer=tokenizer,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return out_dir


def build_tiny_vision_encoder_decoder(out_dir: Path) -> Path:
    """Build a tiny random ``VisionEncoderDecoderModel`` captioner (ViT -> BERT) and save it.

    The layout of ``nlpconnect/vit-gpt2-image-captioning``: model, ``preprocessor_config.json``
    (``ViTImageProcessor`` at 32 x 32 px) and tokenizer files, no processor config. The decoder
    starts from ``[CLS]`` and stops at ``[SEP]``. Fixed seed; the global torch RNG is untouched.

    Args:
        out_dir: folder to write into; created if missing.

    Returns:
        ``out_dir``, loadable with ``VisionEncoderDecoderModel.from_pretrained(out_dir)``.
    """
    tokenizer = _tokenizer()
    config = VisionEncoderDecoderConfig.from_encoder_decoder_configs(
        ViTConfig(**_tiny_layers(), image_size=IMAGE_SIZE, patch_size=8),
        BertConfig(
            **_tiny_layers(),
            vocab_size=len(tokenizer),
            max_position_embeddings=64,
            is_decoder=True,
            add_cross_attention=True,
        ),
    )
    config.decoder_start_token_id = tokenizer.cls_token_id
    config.pad_token_id = tokenizer.pad_token_id
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = VisionEncoderDecoderModel(config)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=tokenizer.cls_token_id,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    ViTImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}).save_pretrained(out_dir)
    return out_dir
