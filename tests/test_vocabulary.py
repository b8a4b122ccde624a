"""The token vocabulary VSE++ (words) and EI-CLIP (entities) share: ids, building, checkpoints."""

from __future__ import annotations

import pytest

from xmr.models import CheckpointError
from xmr.models.vocabulary import Vocabulary

RESERVED = ("<pad>", "<unk>")


def test_build_counts_orders_and_keeps_reserved_first() -> None:
    stream = ["b", "a", "c", "a", "b", "<unk>", "d", "a"]
    vocab = Vocabulary.build(stream, RESERVED, min_count=2)
    # reserved first (a reserved token in the stream is not counted again), then by count
    # (a: 3, b: 2), ties alphabetical; c and d occur once, below min_count
    assert vocab.tokens == ("<pad>", "<unk>", "a", "b") and len(vocab) == 4
    assert vocab.unknown == 1 and vocab.reserved == RESERVED
    assert vocab.ids(["a", "b", "c", "<pad>"]) == [2, 3, 1, 0]
    assert vocab.id("zebra") == vocab.unknown and "a" in vocab and "c" not in vocab
    assert Vocabulary.build(reversed(stream), RESERVED, min_count=2) == vocab  # order-free
    full = Vocabulary.build(stream, RESERVED)  # min_count 1: the full set
    assert full.tokens == ("<pad>", "<unk>", "a", "b", "c", "d")
    assert Vocabulary.build([], ("",)).tokens == ("",)
    assert repr(vocab) == "Vocabulary(2 tokens after ['<pad>', '<unk>'])"
    with pytest.raises(ValueError, match="min_count must be >= 1, got 0"):
        Vocabulary.build(stream, RESERVED, min_count=0)


def test_constructor_checks_its_tokens() -> None:
    with pytest.raises(ValueError, match="needs a reserved token"):
        Vocabulary(["a"], ())
    with pytest.raises(ValueError, match=r"starts with \['<pad>', '<unk>'\], got \['a', '<pad>'\]"):
        Vocabulary(["a", "<pad>", "<unk>"], RESERVED)
    with pytest.raises(ValueError, match="only strings"):
        Vocabulary([*RESERVED, 3], RESERVED)
    with pytest.raises(ValueError, match=r"repeated tokens: \['a'\]"):
        Vocabulary([*RESERVED, "a", "b", "a"], RESERVED)
    assert Vocabulary([*RESERVED, "a"], RESERVED) != Vocabulary([*RESERVED, "a"], ("<pad>",))


def test_checkpoint_form_is_the_plain_token_list() -> None:
    vocab = Vocabulary([*RESERVED, "dog", "cat"], RESERVED)
    saved = vocab.to_checkpoint()
    assert saved == ["<pad>", "<unk>", "dog", "cat"]  # the format checkpoints have always held
    assert Vocabulary.from_checkpoint(saved, RESERVED, "m.pt", "vocab") == vocab
    with pytest.raises(CheckpointError, match=r"^m\.pt: its 'vocab' is unusable: .*starts with"):
        Vocabulary.from_checkpoint(["dog"], RESERVED, "m.pt", "vocab")
    with pytest.raises(CheckpointError, match=r"^m\.pt: its 'vocab' is unusable"):
        Vocabulary.from_checkpoint(7, RESERVED, "m.pt", "vocab")
