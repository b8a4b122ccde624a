"""Pick a GroundingDINO implementation by name: ``hf`` (transformers) or ``groundingdino-py``.

Both return the same :class:`~xmr.detection.grounding_dino.Detection` records from the same
prompts, chunking, thresholds and phrase -> class mapping; they differ in the checkpoints they
read:

- ``hf``: transformers' ``GroundingDinoForObjectDetection``; ``model`` is a Hub repo id or a
  folder written by ``save_pretrained``.
- ``groundingdino-py``: the original IDEA code (the ``groundingdino-py`` package, an optional
  extra); ``model`` is a folder holding the IDEA config file (``GroundingDINO_SwinT_OGC.py``)
  and its checkpoint (``groundingdino_swint_ogc.pth``), one of each.

Everything here is cheap (no torch, no model, no ``groundingdino`` import): a job can check its
detector settings with :func:`check_detector` before it starts Ray.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from xmr.detection.grounding_dino import DEFAULT_DETECTOR, GroundingDinoDetector
from xmr.detection.groundingdino_install import require_groundingdino_py
from xmr.pretrained import local_model_dir

DETECTOR_BACKENDS = ("hf", "groundingdino-py")


def groundingdino_py_files(folder: str | Path) -> tuple[Path, Path]:
    """``(config_file, checkpoint)``: the one ``*.py`` and the one ``*.pth`` in ``folder``.

    Raises ``FileNotFoundError`` when ``folder`` is not a directory or lacks either file,
    ``ValueError`` when it holds several of a kind; the message names the folder.
    """
    path = Path(folder).expanduser()
    if not path.is_dir():
        problem = "is not a directory" if path.exists() else "does not exist"
        raise FileNotFoundError(
            f"groundingdino-py model folder {str(folder)!r} {problem}: it must hold the IDEA "
            "config .py and its checkpoint .pth"
        )
    found = []
    for suffix, what in ((".py", "config file"), (".pth", "checkpoint")):
        files = sorted(p for p in path.iterdir() if p.suffix == suffix and p.is_file())
        if not files:
            raise FileNotFoundError(
                f"groundingdino-py model folder {str(folder)!r} has no {what} (*{suffix})"
            )
        if len(files) > 1:
            names = ", ".join(p.name for p in files)
            raise ValueError(
                f"groundingdino-py model folder {str(folder)!r} holds several {what}s "
                f"({names}): keep one"
            )
        found.append(files[0])
    return found[0], found[1]


def check_detector(backend: str, model: str) -> None:
    """Raise before any work starts when ``backend`` with ``model`` cannot be loaded.

    Checks the backend name (``ValueError``), for ``hf`` that a local ``model`` path is a
    folder, for ``groundingdino-py`` that the package is installed (``ModuleNotFoundError``) and
    that ``model`` is a folder with one config and one checkpoint (:func:`groundingdino_py_files`).
    Reads no weights.
    """
    if backend not in DETECTOR_BACKENDS:
        raise ValueError(f"--detector {backend!r} is not one of {', '.join(DETECTOR_BACKENDS)}")
    if backend == "hf":
        local_model_dir(model)
        return
    require_groundingdino_py()
    if model == DEFAULT_DETECTOR:
        raise ValueError(
            f"--detector groundingdino-py reads the original IDEA files, not {model!r}: pass "
            "--detector-model FOLDER holding the config .py and the checkpoint .pth"
        )
    groundingdino_py_files(model)


def create_detector(
    backend: str,
    classes: Sequence[str],
    model: str = DEFAULT_DETECTOR,
    *,
    device: str = "auto",
    box_threshold: float = 0.35,
    text_threshold: float = 0.25,
) -> GroundingDinoDetector:
    """A detector of ``classes`` from the ``backend`` implementation (see the module docstring).

    Construction reads no weights (``load()`` or the first ``detect()`` does); it raises what
    :func:`check_detector` raises, and ``ValueError`` for bad classes or thresholds.
    """
    check_detector(backend, model)
    if backend == "hf":
        return GroundingDinoDetector(
            classes,
            model,
            device=device,
            box_threshold=box_threshold,
            text_threshold=text_threshold,
        )
    from xmr.detection.groundingdino_py import GroundingDinoPyDetector

    config_file, checkpoint = groundingdino_py_files(model)
    return GroundingDinoPyDetector(
        classes,
        config_file,
        checkpoint,
        device=device,
        box_threshold=box_threshold,
        text_threshold=text_threshold,
    )
