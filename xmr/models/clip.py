"""The ``clip`` family: any open_clip architecture, plus xmr's own configs (``xmr-tiny``).

open_clip is imported when a model is first built (:func:`registered_open_clip`: its import,
with torchvision's and transformers', takes seconds), not to check an arch name: a command
checks its flags, and a Ray driver does its own work, without it. Once imported it knows
``xmr/models/configs/*.json`` too: ``open_clip.create_model("xmr-tiny")`` and
``open_clip.get_tokenizer("xmr-tiny")`` work after :func:`registered_open_clip`.
Pretrained tags (``openai``, ``laion2b_s34b_b79k``, ...) are downloaded by open_clip and need a
network; offline, use ``pretrained=None`` (random init) and a local ``checkpoint``. xmr's own
tag ``toy`` (``xmr-tiny`` only) is the toy CLIP shipped in the package
(:mod:`xmr.models.toy_clip`): no network.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from types import ModuleType

import torch
from PIL import Image
from torch import nn

from xmr.logs import without_message
from xmr.models.base import Corpus, ModelSpec, RetrievalModel
from xmr.models.batch import TrainBatch
from xmr.models.losses import LossConfig, contrastive_losses, fair_contrastive_t2i, mix_fair
from xmr.models.objective import Objective, pair_features
from xmr.models.toy_clip import (
    TOY_ARCH,
    TOY_TAG,
    check_toy_weights,
    load_toy_weights,
    toy_tags,
)

CONFIGS = Path(__file__).parent / "configs"

CONFIG_KEYS = ("embed_dim", "vision_cfg", "text_cfg")
"""What makes a JSON file an open_clip model config (the keys open_clip's registry asks for)."""


@cache
def registered_open_clip() -> ModuleType:
    """The ``open_clip`` module, imported on first call, with xmr's configs registered."""
    import open_clip

    open_clip.add_model_config(CONFIGS)
    return open_clip


def list_archs() -> list[str]:
    """open_clip's built-in architectures and xmr's configs, sorted: the names of their config
    files, read as open_clip's registry reads them, without importing open_clip."""
    return list(_config_names())


@cache
def _config_names() -> tuple[str, ...]:
    """The config files' names, read once per process (``clip`` and ``eiclip`` both ask)."""
    spec = importlib.util.find_spec("open_clip")
    if spec is None or spec.origin is None:
        raise ImportError("the clip family needs open_clip: pip install open_clip_torch")
    folders = (Path(spec.origin).parent / "model_configs", CONFIGS)
    return tuple(
        sorted(
            {
                path.stem
                for folder in folders
                for path in folder.glob("*.json")
                if all(key in json.loads(path.read_text()) for key in CONFIG_KEYS)
            }
        )
    )


class ClipModel(RetrievalModel):
    """An open_clip ``CLIP`` / ``CustomTextCLIP`` with its eval transform and tokenizer."""

    def __init__(
        self,
        spec: ModelSpec,
        model: torch.nn.Module,
        transform: Callable[[Image.Image], torch.Tensor],
        tokenizer: Callable[[list[str]], torch.Tensor],
    ):
        config = registered_open_clip().get_model_config(spec.arch)
        super().__init__(spec, model, config["embed_dim"], config["vision_cfg"]["image_size"])
        self._transform = transform
        self._tokenizer = tokenizer

    def preprocess(self, image: Image.Image) -> torch.Tensor:
        """Resize (shortest side), centre-crop, RGB, normalise: ``[3, S, S]`` float32."""
        return self._transform(image)

    def tokenize(self, texts: Sequence[str]) -> torch.Tensor:
        """``B`` strings -> ``[B, context_length]`` int64 BPE ids (longer texts truncated)."""
        return self._tokenizer(list(texts))

    def image_features(self, pixels: torch.Tensor) -> torch.Tensor:
        """``[B, 3, S, S]`` -> ``[B, D]``."""
        return self.module.encode_image(pixels)

    def text_features(self, texts: Sequence[str]) -> torch.Tensor:
        """``B`` strings -> ``[B, D]``; texts longer than the context length are truncated."""
        return self.module.encode_text(self.tokenize(texts).to(self.device))

    def objective(self, loss: LossConfig, *, seed: int = 0) -> ClipObjective:
        """Symmetric InfoNCE (deterministic: ``seed`` is unused)."""
        return ClipObjective(self.module, loss)


class ClipObjective(Objective):
    """Symmetric InfoNCE with CLIP's learnable temperature; FairSample on text->image.

    Over the global batch (:class:`~xmr.models.objective.Objective`): every data-parallel
    worker's pairs are candidates. ``forward(batch)`` -> ``{"loss", "loss_i2t", "loss_t2i"}``:
    the loss is the mean of the two directions (each averaged over the batch), the parts are
    detached.
    """

    def __init__(self, model: nn.Module, loss: LossConfig) -> None:
        super().__init__()
        self.model = model
        self.loss = loss

    def features(self, batch: TrainBatch) -> dict[str, torch.Tensor]:
        return pair_features(self.model, batch)

    def loss_from(self, rows: dict[str, torch.Tensor], local: slice) -> dict[str, torch.Tensor]:
        image, text, image_ids = rows["image"], rows["text"], rows["image_ids"]
        scale = self.model.logit_scale.exp().clamp(max=100.0)
        i2t, t2i = contrastive_losses(image, text, scale, image_ids)
        fair = None
        if self.loss.fair_alpha > 0:
            gender = rows["image_gender"]
            fair_rows = self.loss.fair_applies(rows["caption_neutral"], gender)
            fair = fair_contrastive_t2i(image, text, scale, image_ids, gender, fair_rows)
        t2i = mix_fair(t2i, fair, self.loss.fair_alpha)
        loss = (i2t.mean() + t2i.mean()) / 2
        return {"loss": loss, "loss_i2t": i2t.mean().detach(), "loss_t2i": t2i.mean().detach()}


def _fetch(arch: str, pretrained: str) -> None:
    """Download (or find in the cache) the weights of ``pretrained``, with actionable errors."""
    open_clip = registered_open_clip()
    tags = open_clip.list_pretrained_tags_by_model(arch)
    if pretrained not in tags:
        tags = [*toy_tags(arch), *tags]
        choices = f"its tags are {tags}" if tags else "it has no pretrained weights"
        raise ValueError(
            f"unknown pretrained tag {pretrained!r} for clip arch {arch!r}: {choices}; "
            "use --pretrained none for random init or --checkpoint PATH for local weights"
        )
    try:
        open_clip.download_pretrained(open_clip.get_pretrained_cfg(arch, pretrained))
    except Exception as exc:  # hub, HTTP and file errors vary by source: all mean "not fetched"
        raise RuntimeError(
            f"the pretrained weights {pretrained!r} of clip {arch!r} could not be fetched "
            f"(no network or hub unreachable?): {exc}. Use --pretrained none for random init, "
            "or --checkpoint PATH to load local weights."
        ) from exc


def check_pretrained(spec: ModelSpec) -> None:
    """Fail fast, before any worker starts, on xmr's own tags: the toy CLIP's weights are
    there and match their record (:func:`~xmr.models.toy_clip.check_toy_weights`). open_clip's
    tags are checked where the model is built (they may need a download).

    Raises:
        FileNotFoundError / ValueError: naming the file or the tag.
    """
    if spec.pretrained == TOY_TAG:
        if spec.arch != TOY_ARCH:
            raise ValueError(
                f"--pretrained {TOY_TAG} is the toy CLIP, an {TOY_ARCH} model; got --arch "
                f"{spec.arch}"
            )
        check_toy_weights()


def create_open_clip(
    arch: str, pretrained: str | None
) -> tuple[nn.Module, Callable[[Image.Image], torch.Tensor]]:
    """An open_clip model of ``arch`` and its eval transform: random init (``None``), the toy
    CLIP (``"toy"``, :mod:`~xmr.models.toy_clip`) or open_clip's weights of ``pretrained``.

    Raises:
        ValueError: an unknown tag. RuntimeError: open_clip's weights could not be fetched.
    """
    open_clip = registered_open_clip()
    toy = pretrained is not None and pretrained in toy_tags(arch)
    if pretrained is not None and not toy:
        _fetch(arch, pretrained)
    with without_message("No pretrained weights loaded"):  # random init is what was asked
        model, _, transform = open_clip.create_model_and_transforms(
            arch, pretrained=None if toy else pretrained
        )
    if toy:
        load_toy_weights(model)
    return model, transform


def build(spec: ModelSpec, corpus: Corpus | None = None) -> ClipModel:
    """Build ``spec.arch`` on CPU: random init, or the weights of ``spec.pretrained``.

    CLIP's BPE vocabulary is fixed: ``corpus`` is not needed.
    """
    model, transform = create_open_clip(spec.arch, spec.pretrained)
    return ClipModel(spec, model, transform, registered_open_clip().get_tokenizer(spec.arch))
