"""What every retrieval model offers, how a model is named (:class:`ModelSpec`), and checkpoints.

A family (``clip``, ``vsepp``, ``blip``, ``eiclip``) subclasses :class:`RetrievalModel` and
implements ``preprocess`` (PIL image to pixels), ``tokenize`` (texts to token tensors),
``image_features`` and ``text_features`` (raw embeddings) and, to be trainable, ``objective``
(its training loss as an ``nn.Module``, see :mod:`xmr.train`). Normalisation, inference mode,
devices and checkpoints are shared here.

A family whose architecture depends on the training data (VSE++'s word vocabulary, EI-CLIP's
entity tables) builds it from a :class:`Corpus` and returns it from ``checkpoint_extra``; it is
saved in the checkpoint and read back by the family's ``build`` (:func:`read_checkpoint`).

Checkpoints are read with ``torch.load(..., weights_only=True)`` only: a file that needs
arbitrary unpickling is refused, never executed. A checkpoint is a local file or an object in
an object store (``s3://bucket/runs/clip/last.pt``, :class:`~xmr.storage.ObjectPath`), read
whole into memory.
"""

from __future__ import annotations

import io
import os
import pickle
import tempfile
import zipfile
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from xmr.storage import ObjectPath, StoragePath, as_path, storage_path

if TYPE_CHECKING:
    from xmr.models.batch import TextInputs
    from xmr.models.losses import LossConfig


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read safely or does not fit the model."""


@dataclass(frozen=True)
class ModelSpec:
    """Names a model: family, architecture, pretrained tag, checkpoint.

    ``pretrained`` ``None`` (or ``"none"``, normalised to ``None``) means random init;
    ``checkpoint`` is a state dict loaded after construction (see
    :meth:`RetrievalModel.load_checkpoint`): a local path, made absolute (Ray workers run in
    other folders), or an object store's URI (a string becomes an
    :class:`~xmr.storage.ObjectPath`).
    """

    family: str
    arch: str
    pretrained: str | None = None
    checkpoint: StoragePath | None = None

    def __post_init__(self) -> None:
        if self.pretrained in ("", "none"):
            object.__setattr__(self, "pretrained", None)
        if self.checkpoint is not None:
            object.__setattr__(self, "checkpoint", storage_path(self.checkpoint))

    def params(self) -> dict[str, str]:
        """Namespaced MLflow params (``model.family``, ``model.arch``, ...), ``"none"`` if unset."""
        return {
            "model.family": self.family,
            "model.arch": self.arch,
            "model.pretrained": self.pretrained or "none",
            "model.checkpoint": str(self.checkpoint) if self.checkpoint else "none",
        }

    @classmethod
    def from_checkpoint(cls, path: str | StoragePath) -> ModelSpec:
        """The spec a checkpoint written by :func:`save_checkpoint` was saved with, pointing at it.

        Raises:
            CheckpointError: the file has no ``spec`` (a bare state dict).
        """
        saved = read_checkpoint(path)
        spec = saved.get("spec") if isinstance(saved, Mapping) else None
        if not isinstance(spec, Mapping):
            raise CheckpointError(
                f"{path} does not say which model it holds (no 'spec'): pass --model and --arch"
            )
        return cls(spec["family"], spec["arch"], spec.get("pretrained"), as_path(path))

    def to_dict(self) -> dict[str, str | None]:
        """Plain fields (the checkpoint path or URI as a str), loadable with
        ``weights_only=True``."""
        return {
            "family": self.family,
            "arch": self.arch,
            "pretrained": self.pretrained,
            "checkpoint": str(self.checkpoint) if self.checkpoint else None,
        }


@dataclass(frozen=True)
class Corpus:
    """Training texts a family may build vocabularies from.

    Attributes:
        captions: every training caption.
        entities: EI-CLIP: entity group -> the entity value of each training row ("" = none).
    """

    captions: Sequence[str]
    entities: Mapping[str, Sequence[str]] = field(default_factory=dict)


class RetrievalModel(ABC):
    """An image encoder and a text encoder into one ``embed_dim``-dimensional space.

    Attributes:
        spec: what was built.
        module: the underlying ``nn.Module`` (put in eval mode at construction; training code may
            train it directly, ``encode_*`` always run it in eval mode).
        embed_dim: ``D``, the size of the joint embedding.
        image_size: side of the square input, in pixels.
    """

    def __init__(self, spec: ModelSpec, module: nn.Module, embed_dim: int, image_size: int):
        self.spec = spec
        self.module = module.eval()
        self.embed_dim = embed_dim
        self.image_size = image_size

    @property
    def name(self) -> str:
        """``family/arch``, e.g. ``clip/xmr-tiny``."""
        return f"{self.spec.family}/{self.spec.arch}"

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device

    @abstractmethod
    def preprocess(self, image: Image.Image) -> torch.Tensor:
        """The eval transform: a PIL image (any mode) to a ``[3, H, W]`` float32 CPU tensor."""

    def train_transform(self, image: Image.Image) -> torch.Tensor:
        """The training transform (default: :meth:`preprocess`): ``[3, H, W]`` float32."""
        return self.preprocess(image)

    @abstractmethod
    def tokenize(self, texts: Sequence[str]) -> TextInputs:
        """``B`` strings to the family's token tensors on CPU (``[B, L]`` ids or a dict of them)."""

    def objective(self, loss: LossConfig, *, seed: int = 0) -> nn.Module:
        """The training objective over :attr:`module`.

        An ``nn.Module`` that holds :attr:`module` (so DDP wraps both) and whose
        ``forward(batch: TrainBatch)`` returns ``{"loss": scalar, **detached parts}``.
        ``seed`` seeds any sampling inside the loss (BLIP's hard negatives); the trainer
        passes a different one per data-parallel rank.
        """
        raise NotImplementedError(f"the {self.spec.family} family has no training objective")

    def entity_ids(self, entities: Mapping[str, Sequence[str]]) -> dict[str, torch.Tensor]:
        """EI-CLIP: entity group -> ``B`` entity strings to ``[B]`` int64 ids; others: ``{}``."""
        return {}

    def checkpoint_extra(self) -> dict[str, Any]:
        """Data-dependent parts to save beside the weights (vocabularies); plain types only."""
        return {}

    @abstractmethod
    def image_features(self, pixels: torch.Tensor) -> torch.Tensor:
        """Raw image embeddings: ``[B, 3, H, W]`` on :attr:`device` to ``[B, D]``."""

    @abstractmethod
    def text_features(self, texts: Sequence[str]) -> torch.Tensor:
        """Raw text embeddings: ``B`` strings to ``[B, D]`` on :attr:`device`."""

    @contextmanager
    def _inference(self) -> Iterator[None]:
        """Eval mode and ``torch.inference_mode`` for the block; the training flag is restored."""
        training = self.module.training
        self.module.eval()
        try:
            with torch.inference_mode():
                yield
        finally:
            self.module.train(training)

    def encode_images(self, pixels: torch.Tensor) -> torch.Tensor:
        """``[B, 3, H, W]`` (any device) to L2-normalised ``[B, D]`` float32 on :attr:`device`."""
        with self._inference():
            return F.normalize(self.image_features(pixels.to(self.device)).float(), dim=-1)

    def encode_texts(self, texts: Sequence[str]) -> torch.Tensor:
        """``B`` strings to L2-normalised ``[B, D]`` float32 on :attr:`device`."""
        with self._inference():
            return F.normalize(self.text_features(texts).float(), dim=-1)

    def to(self, device: str | torch.device) -> Self:
        """Move the model to ``device`` (in place); returns ``self``."""
        self.module.to(device)
        return self

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.module.state_dict()

    def load_checkpoint(self, path: str | StoragePath) -> None:
        """Load weights from ``path``: a state dict, or a dict whose ``"model"`` is one.

        Raises:
            FileNotFoundError: no such file.
            CheckpointError: the file is not a plain tensor checkpoint (refused by
                ``weights_only=True``), or its keys or shapes do not match this model.
        """
        path = as_path(path)
        state = read_state_dict(path)
        expected = self.module.state_dict()
        missing = [k for k in expected if k not in state]
        unexpected = [k for k in state if k not in expected]
        if missing or unexpected:
            raise CheckpointError(
                f"{path} does not fit {self.name}: {len(missing)} missing keys {missing[:5]}, "
                f"{len(unexpected)} unexpected keys {unexpected[:5]}"
            )
        wrong = [
            f"{k}: {tuple(state[k].shape)} vs {tuple(v.shape)}"
            for k, v in expected.items()
            if state[k].shape != v.shape
        ]
        if wrong:
            raise CheckpointError(
                f"{path} does not fit {self.name}: {len(wrong)} shape mismatches "
                f"(checkpoint vs model), e.g. {wrong[:3]}"
            )
        self.module.load_state_dict(state)


def check_checkpoint_file(path: str | StoragePath) -> StoragePath:
    """``path`` (:func:`~xmr.storage.as_path`) when it is a file (its content is not read).

    Raises:
        FileNotFoundError: nothing at ``path``.
        CheckpointError: ``path`` is a directory.
    """
    path = as_path(path)
    if path.is_dir():
        raise CheckpointError(f"checkpoint {path} is a directory, not a checkpoint file")
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    return path


def _load_error(exc: BaseException) -> str:
    """Why ``torch.load`` failed, in one line: the type, and for a ``weights_only`` refusal
    what it refused (``Unsupported global: GLOBAL argparse.Namespace ...``)."""
    text = str(exc)
    _, marker, refused = text.partition("WeightsUnpickler error:")
    lines = [line.strip() for line in (refused if marker else text).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def read_checkpoint(path: str | StoragePath) -> Any:
    """Everything in the checkpoint file ``path``, read on CPU with ``weights_only=True`` (an
    object store's file is read whole into memory first).

    Raises:
        FileNotFoundError: no such file.
        CheckpointError: ``path`` is a directory, is not a checkpoint at all (a text file, a
            truncated one), or needs arbitrary unpickling (refused); the message names it.
    """
    path = check_checkpoint_file(path)
    source: Path | io.BytesIO = (
        io.BytesIO(path.read_bytes()) if isinstance(path, ObjectPath) else path
    )
    try:
        return torch.load(source, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch.load raises anything from IndexError to RuntimeError
        if isinstance(exc, pickle.UnpicklingError) and zipfile.is_zipfile(source):
            raise CheckpointError(
                f"{path} holds more than tensors and plain containers, so it does not load with "
                f"torch.load(weights_only=True) (refused, never executed): {_load_error(exc)}"
            ) from exc
        raise CheckpointError(
            f"{path} is not a checkpoint: torch.load cannot read it ({_load_error(exc)})"
        ) from exc


def read_state_dict(path: str | StoragePath) -> dict[str, torch.Tensor]:
    """The state dict in ``path`` (raw, or under key ``"model"``), read on CPU, weights only."""
    obj = read_checkpoint(path)
    state = obj["model"] if isinstance(obj, Mapping) and "model" in obj else obj
    if not (
        isinstance(state, Mapping)
        and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items())
    ):
        raise CheckpointError(
            f"{path} holds no state dict: expected {{name: tensor}} or {{'model': {{...}}, ...}}, "
            f"got {type(obj).__name__}"
        )
    return dict(state)


def save_checkpoint(
    path: str | Path, model: RetrievalModel, extra: Mapping[str, Any] | None = None
) -> Path:
    """Write ``{"model": state_dict, "spec": spec dict, **model extra, **extra}`` atomically.

    The model's :meth:`~RetrievalModel.checkpoint_extra` (vocabularies) is always included.
    ``extra`` (e.g. ``{"epoch": 3, "metrics": {...}}``) must hold only what
    ``torch.load(weights_only=True)`` accepts: tensors, numbers, strings, lists, dicts.

    Returns:
        ``path``.
    """
    path = Path(path)
    extra = {**model.checkpoint_extra(), **(extra or {})}
    clash = {"model", "spec"} & extra.keys()
    if clash:
        raise ValueError(f"extra must not override the checkpoint keys {sorted(clash)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        torch.save({"model": model.state_dict(), "spec": model.spec.to_dict(), **extra}, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
