"""A family's training objective in two halves (:class:`Objective`): the features of this
worker's rows, then the loss over the global batch's.

``forward(batch)`` is ``loss_from(*gather_features(features(batch)))``: every worker's rows
(:mod:`xmr.models.gather`). The split is also what makes gradient accumulation exact for
in-batch negatives (:mod:`xmr.train.accumulate`, the GradCache scheme of Gao et al. 2021 that
open_clip's ``accum_freq`` follows): the features of k micro-batches are computed first, the
loss over all of them once, and its gradients flow back through each micro-batch in turn.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from xmr.models.batch import TrainBatch
from xmr.models.gather import gather_features
from xmr.models.losses import LossConfig


class Objective(nn.Module, ABC):
    """A training loss over the global batch. Subclasses define :meth:`features` and
    :meth:`loss_from`, reading their settings from ``loss`` at every step (the training loop
    sets each epoch's: :meth:`~xmr.models.losses.LossConfig.for_epoch`)."""

    loss: LossConfig

    @abstractmethod
    def features(self, batch: TrainBatch) -> dict[str, torch.Tensor]:
        """This worker's ``B`` rows: ``[B, ...]`` tensors (embeddings, with gradients; labels)."""

    @abstractmethod
    def loss_from(self, rows: dict[str, torch.Tensor], local: slice) -> dict[str, torch.Tensor]:
        """The loss over ``rows`` (:meth:`features` of the global batch, ``[N, ...]`` each);
        ``local``: the rows of this worker's own micro-batch, for terms computed per row.

        Returns ``{"loss": scalar, <part>: detached scalar, ...}``.
        """

    def forward(self, batch: TrainBatch) -> dict[str, torch.Tensor]:
        return self.loss_from(*gather_features(self.features(batch)))


def pair_features(model: Any, batch: TrainBatch) -> dict[str, torch.Tensor]:
    """The features of a two-tower model (``encode_image``, ``encode_text``): L2-normalised
    ``image`` and ``text`` embeddings ``[B, D]`` with the batch's labels."""
    return {
        "image": F.normalize(model.encode_image(batch.pixels), dim=-1),
        "text": F.normalize(model.encode_text(batch.text), dim=-1),
        **batch.labels(),
    }
