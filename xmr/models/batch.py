"""What a training step sees: :class:`TrainBatch`, one mini-batch of image–text pairs as tensors.

A batch is built by the family's collate (:meth:`xmr.models.RetrievalModel.collate`) from rows of
the training table (:mod:`xmr.train.data`): decoded, transformed pixels, tokenised captions, and
the labels the objectives need (which rows share an image, the image's gender, whether the
caption is gender-neutral, entity ids for EI-CLIP).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import torch

TextInputs = torch.Tensor | dict[str, torch.Tensor]
"""A family's tokenised text: ``[B, L]`` token ids, or a dict of ``[B, L]`` tensors (BERT)."""


@dataclass
class TrainBatch:
    """``B`` image–text pairs.

    Attributes:
        pixels: ``[B, 3, H, W]`` float32, the family's train transform applied.
        text: the captions tokenised by the family (:data:`TextInputs`).
        image_ids: ``[B]`` int64; rows with equal ids show the same image (never each other's
            negatives).
        image_gender: ``[B]`` int64, the gender code of each row's image
            (:data:`xmr.metrics.gender_bias.GENDER_CODES`: +1 male, -1 female, 0 neutral).
        caption_neutral: ``[B]`` bool, the caption names nobody's gender (FairSample applies).
        entities: EI-CLIP only: entity group -> ``[B]`` int64 entity ids (0 = unknown).
    """

    pixels: torch.Tensor
    text: TextInputs
    image_ids: torch.Tensor
    image_gender: torch.Tensor
    caption_neutral: torch.Tensor
    entities: dict[str, torch.Tensor] = field(default_factory=dict)

    def labels(self) -> dict[str, torch.Tensor]:
        """The rows' labels the losses read: ``image_ids``, ``image_gender``,
        ``caption_neutral`` (each ``[B]``)."""
        return {
            "image_ids": self.image_ids,
            "image_gender": self.image_gender,
            "caption_neutral": self.caption_neutral,
        }

    def __len__(self) -> int:
        return int(self.image_ids.shape[0])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> TrainBatch:
        """A copy with every tensor on ``device``."""

        def move(value: object) -> object:
            if isinstance(value, torch.Tensor):
                return value.to(device, non_blocking=non_blocking)
            if isinstance(value, dict):
                return {k: move(v) for k, v in value.items()}
            return value

        return replace(self, **{f.name: move(getattr(self, f.name)) for f in fields(self)})
