"""Object detection for images without box annotations (GroundingDINO, open vocabulary).

Two implementations behind one interface (:func:`create_detector`): ``hf`` (transformers) and
``groundingdino-py`` (the original IDEA code, an optional extra; imported on use).
"""

from xmr.detection.backends import (
    DETECTOR_BACKENDS,
    check_detector,
    create_detector,
    groundingdino_py_files,
)
from xmr.detection.grounding_dino import (
    DEFAULT_DETECTOR,
    Detection,
    GroundingDinoDetector,
    box_detection,
    chunk_classes,
    grounding_prompt,
    match_class,
)
from xmr.detection.groundingdino_install import GROUNDINGDINO_PY_INSTALL, require_groundingdino_py

__all__ = [
    "DEFAULT_DETECTOR",
    "DETECTOR_BACKENDS",
    "GROUNDINGDINO_PY_INSTALL",
    "Detection",
    "GroundingDinoDetector",
    "box_detection",
    "check_detector",
    "chunk_classes",
    "create_detector",
    "grounding_prompt",
    "groundingdino_py_files",
    "match_class",
    "require_groundingdino_py",
]
