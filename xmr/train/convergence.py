"""Training to convergence (``xmr train --epochs auto``): when to stop, and why it stopped.

A run trained with :class:`Convergence` evaluates the validation split every ``eval_every``
epochs (every epoch unless set) and stops once its selection score, the summed recall RSUM in
percentage points (:func:`~xmr.train.evaluation.selection_score`), has not beaten the best so far by
more than ``min_delta`` for ``patience`` evaluations in a row, or at ``max_epochs``. It then
takes back the weights of its best evaluation, so the test split is scored on those, and its
``last.pt`` is the best checkpoint (early stopping with the best weights restored).

:class:`Plateau` is the count kept along the way; it travels in every checkpoint, so a
resumed run stops where an uninterrupted one would.

>>> plateau = Plateau()
>>> [plateau.observe(score, epoch, min_delta=0.5) for epoch, score in enumerate([10, 12, 12.3, 11, 12.4], 1)]
[True, True, True, False, True]
>>> plateau.best_epoch, plateau.stale
(5, 3)
>>> plateau.plateaued(patience=3)
True
"""  # noqa: E501

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

AUTO = "auto"
"""The value of ``--epochs`` that trains to convergence."""

BEST_EPOCH = "train/best_epoch"
STOPPED_EPOCH = "train/stopped_epoch"
PLATEAUED = "train/plateaued"
"""The metrics a converged run reports with its final evaluation: the epoch of the weights
scored on the test split, the last epoch trained, and 1 when the score had levelled off (0:
``max_epochs`` stopped it)."""


@dataclass(frozen=True)
class Convergence:
    """When ``--epochs auto`` stops (logged as ``train.patience``, ``train.min_delta``,
    ``train.max_epochs``).

    Attributes:
        patience: evaluations in a row without a gain before training stops.
        min_delta: the gain that counts, in RSUM percentage points (RSUM sums six recalls,
            each 0-100).
        max_epochs: the cap: training stops there even while the score still rises.
    """

    patience: int = 3
    min_delta: float = 0.5
    max_epochs: int = 30

    def __post_init__(self) -> None:
        if self.patience < 1:
            raise ValueError(f"--patience must be >= 1, got {self.patience}")
        if not self.min_delta >= 0:
            raise ValueError(f"--min-delta must be >= 0, got {self.min_delta}")
        if self.max_epochs < 1:
            raise ValueError(f"--max-epochs must be >= 1, got {self.max_epochs}")

    def params(self) -> dict[str, str]:
        return {f"train.{key}": str(value) for key, value in asdict(self).items()}


@dataclass
class Plateau:
    """The selection score's best so far and the evaluations since it last rose enough.

    Attributes:
        best: the best score seen (``-inf`` before the first evaluation).
        best_epoch: the epoch (1-based) of that score; 0 before the first evaluation.
        stale: evaluations in a row whose score did not beat the best by more than
            ``min_delta``.
    """

    best: float = -math.inf
    best_epoch: int = 0
    stale: int = 0

    def observe(self, score: float, epoch: int, *, min_delta: float) -> bool:
        """Count the evaluation of ``epoch`` scoring ``score``; True when it is the best so
        far (its weights are the ones to keep), which resets the count only when it beats
        the previous best by more than ``min_delta``."""
        self.stale = 0 if score > self.best + min_delta else self.stale + 1
        if score <= self.best:
            return False
        self.best, self.best_epoch = score, epoch
        return True

    def plateaued(self, patience: int) -> bool:
        return self.stale >= patience

    def to_state(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Plateau:
        """The plateau a checkpoint's state holds (one written before the plateau was kept
        holds only its best score)."""
        if "plateau" in state:
            return cls(**state["plateau"])
        return cls(best=float(state["best"]))


def stop_reason(
    convergence: Convergence, *, split: str, best_epoch: int, stopped_epoch: int, plateaued: bool
) -> str:
    """Why a converged run stopped where it did, in one line for the log and the MLflow tag
    ``xmr.stop_reason``; ``plateaued``: the score had levelled off (else the cap stopped it).

    >>> stop_reason(Convergence(patience=2), split="val", best_epoch=4, stopped_epoch=6,
    ...             plateaued=True)
    "val RSUM gained no more than 0.5 in 2 evaluations: stopped at epoch 6, tested with the best epoch's weights (epoch 4)"
    >>> stop_reason(Convergence(max_epochs=6), split="val", best_epoch=6, stopped_epoch=6,
    ...             plateaued=False)
    "reached --max-epochs 6 with val RSUM still rising: tested with the best epoch's weights (epoch 6)"
    """  # noqa: E501
    tested = f"tested with the best epoch's weights (epoch {best_epoch})"
    if not plateaued:
        cap = convergence.max_epochs
        return f"reached --max-epochs {cap} with {split} RSUM still rising: {tested}"
    return (
        f"{split} RSUM gained no more than {convergence.min_delta:g} in {convergence.patience} "
        f"evaluations: stopped at epoch {stopped_epoch}, {tested}"
    )
