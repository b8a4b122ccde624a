"""The token vocabulary of the families that learn an embedding per token from their training
data: VSE++'s words (:mod:`xmr.models.vsepp`) and EI-CLIP's entities (:mod:`xmr.models.eiclip`).

A :class:`Vocabulary` holds its tokens in id order: the family's reserved tokens first, the last
of which stands for every token the vocabulary does not hold, then the corpus tokens. The family
turns its texts into tokens (VSE++ splits captions into words, EI-CLIP normalises each entity
string into one token); the vocabulary counts and numbers them. A checkpoint saves it as the
plain list of its tokens (:meth:`Vocabulary.to_checkpoint`), read back by
:meth:`Vocabulary.from_checkpoint`.

>>> vocab = Vocabulary.build(["dog", "a", "dog", "cat"], reserved=("<unk>",))
>>> vocab.tokens, vocab.ids(["dog", "zebra"])
(('<unk>', 'dog', 'a', 'cat'), [1, 0])
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from xmr.models.base import CheckpointError


class Vocabulary:
    """Tokens in id order: ``reserved`` first, then the corpus tokens.

    Attributes:
        tokens: the tokens, ``tokens[i]`` has id ``i``.
        reserved: the leading tokens every vocabulary of its family has (VSE++: ``<pad>``,
            ``<start>``, ``<end>``, ``<unk>``; EI-CLIP: ``""``).
        unknown: the id of the last reserved token, which every token not in the vocabulary
            gets.

    Raises:
        ValueError: no reserved token, tokens that do not start with ``reserved``, a token that
            is not a string, or a repeated token.
    """

    def __init__(self, tokens: Iterable[str], reserved: Sequence[str]) -> None:
        tokens, reserved = tuple(tokens), tuple(reserved)
        if not reserved:
            raise ValueError("a vocabulary needs a reserved token for unknown tokens")
        if tokens[: len(reserved)] != reserved:
            raise ValueError(
                f"the vocabulary starts with {list(reserved)}, got {list(tokens[: len(reserved)])}"
            )
        if not all(isinstance(token, str) for token in tokens):
            raise ValueError("a vocabulary holds only strings")
        if len(set(tokens)) != len(tokens):
            repeated = sorted(token for token, n in Counter(tokens).items() if n > 1)
            raise ValueError(f"the vocabulary has repeated tokens: {repeated[:5]}")
        self.tokens = tokens
        self.reserved = reserved
        self.unknown = len(reserved) - 1
        self._ids = {token: i for i, token in enumerate(tokens)}

    @classmethod
    def build(
        cls, tokens: Iterable[str], reserved: Sequence[str], min_count: int = 1
    ) -> Vocabulary:
        """``reserved``, then every other token of the stream ``tokens`` (a corpus's tokens, each
        occurrence once) seen at least ``min_count`` times, most frequent first, ties in
        alphabetical order. ``min_count=1`` keeps the full set.

        Raises:
            ValueError: ``min_count < 1``.
        """
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        counts = Counter(tokens)
        kept = [token for token, n in counts.items() if n >= min_count and token not in reserved]
        kept.sort(key=lambda token: (-counts[token], token))
        return cls((*reserved, *kept), reserved)

    @classmethod
    def from_checkpoint(
        cls, saved: object, reserved: Sequence[str], path: str | Path, key: str
    ) -> Vocabulary:
        """The vocabulary a checkpoint saved (:meth:`to_checkpoint`) under ``key``.

        Raises:
            CheckpointError: ``saved`` is not a list of tokens starting with ``reserved``; the
                message names ``path`` and ``key``.
        """
        try:
            return cls(saved, reserved)  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"{path}: its {key!r} is unusable: {exc}") from exc

    def to_checkpoint(self) -> list[str]:
        """The tokens in id order, as a checkpoint stores them (plain types only)."""
        return list(self.tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: object) -> bool:
        return token in self._ids

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Vocabulary)
            and self.tokens == other.tokens
            and self.reserved == other.reserved
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Vocabulary({len(self) - len(self.reserved)} tokens after {list(self.reserved)})"

    def id(self, token: str) -> int:
        """The id of ``token``; :attr:`unknown` when it is not in the vocabulary."""
        return self._ids.get(token, self.unknown)

    def ids(self, tokens: Iterable[str]) -> list[int]:
        """The id of each token (:attr:`unknown` for those not in the vocabulary)."""
        return [self._ids.get(token, self.unknown) for token in tokens]
