"""Filling removed regions of an image.

OpenCV's Telea inpainting needs no weights, so it is the embedded default everywhere (eval builds
ODmAP queries with it on datasets without exact counterfactuals).
"""

from __future__ import annotations

import cv2
import numpy as np


def fill_telea(image: np.ndarray, mask: np.ndarray, radius: int = 5) -> np.ndarray:
    """Inpaint ``mask`` in ``image`` with Telea's fast marching method.

    Args:
        image: ``[H, W, 3]`` uint8 RGB.
        mask: ``[H, W]`` bool, True where pixels are removed.
        radius: neighbourhood radius in pixels.

    Returns:
        ``[H, W, 3]`` uint8 RGB, equal to ``image`` outside ``mask``.
    """
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"expected an [H, W, 3] uint8 image, got {image.shape} {image.dtype}")
    if mask.shape != image.shape[:2]:
        raise ValueError(f"mask shape {mask.shape} does not match image {image.shape[:2]}")
    return cv2.inpaint(image, mask.astype(np.uint8) * 255, radius, cv2.INPAINT_TELEA)
