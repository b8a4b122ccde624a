"""Retrieval models behind one interface, built by name from a registry.

>>> model = create_model("clip", arch="xmr-tiny", pretrained="none", seed=0)
>>> model.encode_texts(["a dog with a frisbee"]).shape
torch.Size([1, 128])

Families are imported on first use (see :mod:`xmr.models.registry`).
"""

from xmr.models.base import (
    CheckpointError,
    Corpus,
    ModelSpec,
    RetrievalModel,
    read_checkpoint,
    save_checkpoint,
)
from xmr.models.registry import (
    TINY_ARCHS,
    check_spec,
    create_model,
    list_archs,
    list_models,
    needs_corpus,
)
from xmr.models.toy_clip import TOY_ARCH, TOY_TAG

__all__ = [
    "TINY_ARCHS",
    "TOY_ARCH",
    "TOY_TAG",
    "CheckpointError",
    "Corpus",
    "ModelSpec",
    "RetrievalModel",
    "check_spec",
    "create_model",
    "list_archs",
    "list_models",
    "needs_corpus",
    "read_checkpoint",
    "save_checkpoint",
]
