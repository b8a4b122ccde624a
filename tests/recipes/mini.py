"""The ``mini`` family: open_clip's ``xmr-tiny`` trained at a fixed temperature (0.05)."""

from __future__ import annotations

import torch

from xmr.logs import without_message
from xmr.models.base import Corpus, ModelSpec
from xmr.models.clip import ClipModel, ClipObjective, registered_open_clip
from xmr.models.losses import LossConfig, contrastive_losses

SCALE = 20.0
"""The logits' scale: cosine × 20 (CLIP learns its own)."""


def list_archs() -> list[str]:
    return ["xmr-tiny"]


class MiniModel(ClipModel):
    def objective(self, loss: LossConfig, *, seed: int = 0) -> MiniObjective:
        return MiniObjective(self.module, loss)


class MiniObjective(ClipObjective):
    """Symmetric InfoNCE at a fixed scale (no FairSample)."""

    def loss_from(self, rows: dict[str, torch.Tensor], local: slice) -> dict[str, torch.Tensor]:
        i2t, t2i = contrastive_losses(rows["image"], rows["text"], SCALE, rows["image_ids"])
        loss = (i2t.mean() + t2i.mean()) / 2
        return {"loss": loss, "loss_i2t": i2t.mean().detach(), "loss_t2i": t2i.mean().detach()}


def build(spec: ModelSpec, corpus: Corpus | None = None) -> MiniModel:
    """``spec.arch`` with random weights, on CPU."""
    open_clip = registered_open_clip()  # imported here, not to check a name; knows xmr-tiny
    with without_message("No pretrained weights loaded"):
        model, _, transform = open_clip.create_model_and_transforms(spec.arch, pretrained=None)
    return MiniModel(spec, model, transform, open_clip.get_tokenizer(spec.arch))
