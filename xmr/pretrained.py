"""Where pretrained models come from and where they run: shared by every model-backed stage.

A model argument is either a Hugging Face Hub repo id (``Salesforce/blip-image-captioning-base``)
or a local folder written by ``save_pretrained``; ``device="auto"`` means the GPU when one is
visible. torch is imported only when a device is resolved.
"""

from __future__ import annotations

from pathlib import Path


def local_model_dir(model: str) -> Path | None:
    """The folder ``model`` names, or None when it is a Hub repo id.

    ``model`` names a folder when it exists, is absolute, or starts with ``.`` or ``~``.

    Raises:
        FileNotFoundError: ``model`` looks like a path but is not a folder (the message names it).
    """
    path = Path(model).expanduser()
    if not (path.exists() or path.is_absolute() or model.startswith((".", "~"))):
        return None
    if not path.is_dir():
        problem = "is not a directory" if path.exists() else "does not exist"
        raise FileNotFoundError(f"model folder {model!r} {problem}")
    return path


def resolve_device(device: str) -> str:
    """``"auto"`` -> ``"cuda"`` when torch sees a GPU, else ``"cpu"``; other names unchanged."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
