"""Object detection for images without box annotations (GroundingDINO, open vocabulary)."""

from xmr.detection.grounding_dino import (
    DEFAULT_DETECTOR,
    Detection,
    GroundingDinoDetector,
    chunk_classes,
    grounding_prompt,
    match_class,
)

__all__ = [
    "DEFAULT_DETECTOR",
    "Detection",
    "GroundingDinoDetector",
    "chunk_classes",
    "grounding_prompt",
    "match_class",
]
