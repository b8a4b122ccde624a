"""Filling removed regions of an image: the CPU fill backends.

Every backend takes an ``[H, W, 3]`` uint8 RGB image and an ``[H, W]`` bool mask (True where
pixels are removed) and returns a new ``[H, W, 3]`` uint8 RGB image that equals the input exactly
outside the mask; an all-False mask returns a copy. The backends:

- ``telea``, ``ns``: OpenCV inpainting (Telea's fast marching method; Navier-Stokes). They need no
  weights, so Telea is the embedded default everywhere (eval builds ODmAP queries with it on
  datasets without exact counterfactuals).
- ``zero``, ``mean``, ``blur``: the "zero padding", "mean padding" and "blur padding" baselines of
  the ODmAP paper (§4.4, table 3): the removed region ``B^r`` filled with zeros, with its own
  average pixel value, or with its Gaussian blur.

``sd`` (Stable Diffusion inpainting) lives in :mod:`xmr.removal.sd_inpaint`; this module needs only
OpenCV and numpy.
"""

from __future__ import annotations

from collections.abc import Callable

import cv2
import numpy as np

BLUR_SIGMA_FRACTION = 0.1
"""Gaussian sigma of :func:`fill_blur` as a fraction of ``max(H, W)`` (12.8 px at 128 px)."""


def check_fill_inputs(image: np.ndarray, mask: np.ndarray) -> None:
    """Check the inputs every fill backend takes.

    Raises:
        ValueError: ``image`` is not ``[H, W, 3]`` uint8, or ``mask`` is not ``[H, W]`` bool.
    """
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"expected an [H, W, 3] uint8 image, got {image.shape} {image.dtype}")
    if mask.shape != image.shape[:2]:
        raise ValueError(f"mask shape {mask.shape} does not match image {image.shape[:2]}")
    if mask.dtype != np.bool_:
        raise ValueError(f"expected a bool mask, got {mask.dtype}")


def _checked_copy(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """:func:`check_fill_inputs`, then a copy of ``image`` to write the fill into."""
    check_fill_inputs(image, mask)
    return image.copy()


def _opencv_inpaint(image: np.ndarray, mask: np.ndarray, radius: int, method: int) -> np.ndarray:
    """``cv2.inpaint`` with ``method``, pasted under ``mask`` only (shapes as in the fills)."""
    out = _checked_copy(image, mask)
    if mask.any():
        mask_u8 = mask.astype(np.uint8) * 255
        filled = cv2.inpaint(np.ascontiguousarray(image), mask_u8, radius, method)
        out[mask] = filled[mask]
    return out


def fill_telea(image: np.ndarray, mask: np.ndarray, radius: int = 5) -> np.ndarray:
    """Inpaint ``mask`` in ``image`` with Telea's fast marching method (``cv2.INPAINT_TELEA``).

    Args:
        image: ``[H, W, 3]`` uint8 RGB.
        mask: ``[H, W]`` bool, True where pixels are removed.
        radius: neighbourhood radius in pixels.

    Returns:
        ``[H, W, 3]`` uint8 RGB, equal to ``image`` outside ``mask``.
    """
    return _opencv_inpaint(image, mask, radius, cv2.INPAINT_TELEA)


def fill_ns(image: np.ndarray, mask: np.ndarray, radius: int = 5) -> np.ndarray:
    """:func:`fill_telea` with OpenCV's Navier-Stokes method (``cv2.INPAINT_NS``) instead."""
    return _opencv_inpaint(image, mask, radius, cv2.INPAINT_NS)


def fill_zero(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Zero padding: set the removed pixels to black (0, 0, 0).

    Args:
        image: ``[H, W, 3]`` uint8 RGB.
        mask: ``[H, W]`` bool, True where pixels are removed.

    Returns:
        ``[H, W, 3]`` uint8 RGB, 0 under ``mask``, equal to ``image`` outside it.
    """
    out = _checked_copy(image, mask)
    out[mask] = 0
    return out


def fill_mean(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean padding: set the removed pixels to the per-channel mean of the removed region.

    The mean is taken over the pixels under ``mask`` (the region ``B^r`` itself, not its
    surroundings) and rounded to the nearest grey level.

    Args:
        image: ``[H, W, 3]`` uint8 RGB.
        mask: ``[H, W]`` bool, True where pixels are removed.

    Returns:
        ``[H, W, 3]`` uint8 RGB, one colour under ``mask``, equal to ``image`` outside it.
    """
    out = _checked_copy(image, mask)
    if mask.any():
        out[mask] = np.rint(image[mask].mean(axis=0)).astype(np.uint8)
    return out


def fill_blur(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Blur padding: replace the removed pixels with a Gaussian blur of the image.

    The whole image is blurred with a separable Gaussian of
    ``sigma = BLUR_SIGMA_FRACTION * max(H, W)`` pixels (12.8 px at 128 px, 64 px at 640 px; kernel
    ``8 * sigma + 1`` wide, borders reflected, computed in float32 and rounded) and the blurred
    pixels are pasted under ``mask``. A sigma that grows with the image smears a typical object
    into its surroundings at any resolution, where a fixed one would leave large objects
    recognisable.

    Args:
        image: ``[H, W, 3]`` uint8 RGB.
        mask: ``[H, W]`` bool, True where pixels are removed.

    Returns:
        ``[H, W, 3]`` uint8 RGB, blurred under ``mask``, equal to ``image`` outside it.
    """
    out = _checked_copy(image, mask)
    if mask.any():
        sigma = BLUR_SIGMA_FRACTION * max(image.shape[:2])
        # float32: OpenCV's fixed-point 8-bit path is ~5x slower for kernels this wide.
        blurred = cv2.GaussianBlur(image.astype(np.float32), (0, 0), sigmaX=sigma, sigmaY=sigma)
        out[mask] = np.clip(np.rint(blurred[mask]), 0, 255).astype(np.uint8)
    return out


Fill = Callable[[np.ndarray, np.ndarray], np.ndarray]

CPU_FILLS: dict[str, Fill] = {
    "telea": fill_telea,
    "ns": fill_ns,
    "zero": fill_zero,
    "mean": fill_mean,
    "blur": fill_blur,
}
"""The fill backends that need no weights, by their ``--fill`` name."""

FILL_METHODS: tuple[str, ...] = (*CPU_FILLS, "sd")
"""Every ``--fill`` name; ``sd`` is :class:`xmr.removal.sd_inpaint.StableDiffusionInpainter`."""
