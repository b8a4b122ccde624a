"""What a training step sees: :class:`TrainBatch`, one mini-batch of image–text pairs as tensors.

A batch is built by :func:`xmr.train.data.collate` from rows of the training table, with the
family's preprocessing and tokenizer: decoded, transformed pixels, tokenised captions, and the
labels the objectives need (which rows share an image, the image's gender, whether the caption
is gender-neutral, entity ids for EI-CLIP).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

import numpy as np
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

    def to_columns(self) -> dict[str, np.ndarray]:
        """The batch as named numpy arrays, each with the batch's ``B`` rows first: ``pixels``,
        ``text`` (or ``text.<key>`` for a dict of token tensors), the three label columns and
        ``entity.<group>`` per entity group. What a Ray Data stage emits
        (:mod:`xmr.train.loader`); :meth:`from_columns` reads it back."""
        text = self.text if isinstance(self.text, dict) else {"": self.text}
        columns = {"pixels": self.pixels}
        columns.update({f"text.{key}" if key else "text": value for key, value in text.items()})
        columns.update(self.labels())
        columns.update({f"entity.{group}": ids for group, ids in self.entities.items()})
        return {name: value.numpy() for name, value in columns.items()}

    @classmethod
    def from_columns(cls, columns: Mapping[str, np.ndarray | torch.Tensor]) -> TrainBatch:
        """The batch written by :meth:`to_columns` (arrays are shared, not copied)."""
        with warnings.catch_warnings():  # Ray Data's arrays are read-only; no tensor is written
            warnings.filterwarnings("ignore", "The given NumPy array is not writable")
            tensors = {name: torch.as_tensor(value) for name, value in columns.items()}
        text_keys = {
            name[len("text.") :]: value
            for name, value in tensors.items()
            if name.startswith("text.")
        }
        return cls(
            pixels=tensors["pixels"],
            text=text_keys or tensors["text"],
            image_ids=tensors["image_ids"],
            image_gender=tensors["image_gender"],
            caption_neutral=tensors["caption_neutral"],
            entities={
                name[len("entity.") :]: value
                for name, value in tensors.items()
                if name.startswith("entity.")
            },
        )

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
