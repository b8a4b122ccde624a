"""A tiny random-weight chat LLM (Llama architecture), saved in transformers layout.

The tokenizer is a byte-level BPE trained in memory on a few sentences (``tokenizers``), with a
Jinja chat template; the model has 2 layers of width 32 and a context of 256 tokens. It loads
through the real ``AutoTokenizer``/``AutoModelForCausalLM.from_pretrained`` path, generates on a
CPU in milliseconds and answers garbage.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CONTEXT = 256
"""The tiny model's context (``max_position_embeddings``), in tokens."""

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}"
    "{{ raise_exception('this model takes no system message') }}"
    "{% endif %}"
    "<s>{{ message['role'] }}\n{{ message['content'] }}</s>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)
"""Turns as ``<s>role\\ncontent</s>``; refuses system messages, as some real templates do."""

CORPUS = [
    "a brown dog catches a red frisbee on the grass",
    "object,category,attribute,caption,negative_attribute,negative_caption",
    '["dog", "frisbee", "grass"]',
]


def build_tiny_chat_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (a few hundred tokens) with <pad>, <s>, </s> and the template."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(CORPUS, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def save_tiny_chat_model(folder: Path, seed: int = 0) -> Path:
    """Write the tiny model and its tokenizer to ``folder`` (``save_pretrained``); return it."""
    tokenizer = build_tiny_chat_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
