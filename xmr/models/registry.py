"""The model zoo as data: family name -> the module that builds it.

A family module defines ``build(spec: ModelSpec, corpus: Corpus | None = None) ->
RetrievalModel`` and ``list_archs() -> list[str]``; it is imported on first use, so listing
families or naming a spec costs no heavy import (open_clip alone takes seconds). Adding a
family is one line in :data:`MODEL_FAMILIES`.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Protocol, cast

import torch

from xmr.models.base import (
    Corpus,
    ModelSpec,
    RetrievalModel,
    check_checkpoint_file,
    read_state_dict,
)
from xmr.storage import StoragePath, as_path


class ModelFamily(Protocol):
    """What a family module provides."""

    def build(self, spec: ModelSpec, corpus: Corpus | None = None) -> RetrievalModel:
        """Construct the model of ``spec`` on CPU (random init or pretrained weights).

        ``corpus``: training texts for data-dependent parts (vocabularies); families that
        need one read it from ``spec.checkpoint`` when no corpus is given.
        """
        ...

    def list_archs(self) -> list[str]:
        """The architecture names ``build`` accepts."""
        ...


MODEL_FAMILIES: dict[str, str] = {
    "blip": "xmr.models.blip",
    "clip": "xmr.models.clip",
    "eiclip": "xmr.models.eiclip",
    "vsepp": "xmr.models.vsepp",
}


TINY_ARCHS: dict[str, str] = {
    "blip": "xmr-tiny-blip",
    "clip": "xmr-tiny",
    "eiclip": "xmr-tiny",
    "vsepp": "xmr-tiny-vgg",
}
"""Each family's small random-init architecture: what ToyWorld trains on a laptop CPU and
what ``xmr eval --model FAMILY`` builds when no architecture or checkpoint is given."""


def _family(name: str) -> ModelFamily:
    if name not in MODEL_FAMILIES:
        raise ValueError(f"unknown model family {name!r}; choose from {list_models()}")
    return cast(ModelFamily, importlib.import_module(MODEL_FAMILIES[name]))


def list_models() -> list[str]:
    """The model families, sorted."""
    return sorted(MODEL_FAMILIES)


def list_archs(family: str) -> list[str]:
    """The architectures of ``family``, sorted. Raises ValueError for an unknown family."""
    return sorted(_family(family).list_archs())


def default_rerank_k(spec: ModelSpec) -> int:
    """How deep evaluation re-ranks with the family's pair scorer (BLIP's ITM); 0: no re-ranking.

    A family that re-ranks defines ``default_rerank_k(arch) -> int`` next to ``build``.
    """
    family = _family(spec.family)
    rerank_k = getattr(family, "default_rerank_k", None)
    return int(rerank_k(spec.arch)) if rerank_k else 0


def needs_corpus(spec: ModelSpec) -> bool:
    """Whether building ``spec`` needs the training captions (``corpus``): a family with a
    vocabulary learnt from them (VSE++) defines ``needs_corpus(spec) -> bool`` next to
    ``build``; a checkpoint carries its vocabulary."""
    family = _family(spec.family)
    hook = getattr(family, "needs_corpus", None)
    return bool(hook(spec)) if hook else False


def check_spec(spec: ModelSpec) -> ModelFamily:
    """Fail fast, before any worker starts: unknown family or arch, pretrained weights that
    the family can tell are unusable without building the model (a family that can defines
    ``check_pretrained(spec)`` next to ``build``: the toy CLIP's file), or a checkpoint that
    is missing or holds no state dict (it is read here, on CPU).

    Returns the family module. Raises ValueError or FileNotFoundError naming what is wrong.
    """
    family = _checked_family(spec)
    check_pretrained = getattr(family, "check_pretrained", None)
    if spec.pretrained is not None and check_pretrained is not None:
        check_pretrained(spec)
    if spec.checkpoint is not None:
        read_state_dict(spec.checkpoint)
    return family


def _checked_family(spec: ModelSpec) -> ModelFamily:
    """The family module of ``spec``; ValueError for an unknown family or arch."""
    family = _family(spec.family)
    archs = family.list_archs()
    if spec.arch not in archs:
        close = difflib.get_close_matches(spec.arch, archs, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ValueError(
            f"unknown {spec.family} arch {spec.arch!r}{hint}; choose from {sorted(archs)}"
        )
    return family


def create_model(
    spec_or_family: ModelSpec | str,
    arch: str | None = None,
    pretrained: str | None = None,
    checkpoint: str | StoragePath | None = None,
    *,
    device: str | torch.device = "cpu",
    seed: int | None = 0,
    corpus: Corpus | None = None,
) -> RetrievalModel:
    """Build a model from a :class:`ModelSpec`, or from its fields.

    ``create_model(spec)`` or ``create_model("clip", arch="xmr-tiny", pretrained="none")``.
    Randomly initialised weights are drawn under ``torch.manual_seed(seed)`` (the caller's RNG
    state is restored afterwards), so a spec and seed always give the same model; ``seed=None``
    draws from the current RNG. ``spec.checkpoint``, if any, is loaded after construction.
    ``corpus`` builds data-dependent parts (VSE++ vocabulary) for training from scratch.

    Raises:
        ValueError: unknown family, architecture or pretrained tag, or a checkpoint that does not
            fit (:class:`~xmr.models.base.CheckpointError`).
        RuntimeError: pretrained weights could not be fetched.
    """
    if isinstance(spec_or_family, ModelSpec):
        if arch is not None or pretrained is not None or checkpoint is not None:
            raise ValueError("pass either a ModelSpec or family/arch/pretrained/checkpoint")
        spec = spec_or_family
    else:
        if arch is None:
            raise ValueError(f"arch is required; see list_archs({spec_or_family!r})")
        path = as_path(checkpoint) if checkpoint else None
        spec = ModelSpec(spec_or_family, arch, pretrained, path)
    family = _checked_family(spec)
    if spec.checkpoint is not None:
        check_checkpoint_file(spec.checkpoint)  # before a costly build; read after it
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        model = family.build(spec, corpus)
    if spec.checkpoint is not None:
        model.load_checkpoint(spec.checkpoint)
    return model.to(device)
