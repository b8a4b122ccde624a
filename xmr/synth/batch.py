"""What every D′ stage does with a batch, whatever the method: the error columns a failed row
carries on, each row's share of the stage's seconds, PNG bytes, and each row's seed.

A failed row keeps flowing with its reason in the error columns (``error_stage``,
``error_type``, ``error``) and later stages pass it through untouched, so every planned row
reaches the writer. ``seconds_<stage>`` columns carry each row's share of its batch's processing
time (the profile in the manifest, ``busy_s``).
"""

from __future__ import annotations

import time
import zlib

import cv2
import numpy as np

from xmr.pipeline.stage import Batch

ERROR_COLUMNS = ("error_stage", "error_type", "error")
PNG_COMPRESSION = 3  # zlib level: 2x faster than level 6 on COCO photos, files 2 % larger


def row_seed(seed: int, key: str) -> int:
    """A 32-bit seed for the random choices of one row (caption draw, prompt, diffusion noise)."""
    return zlib.crc32(f"{seed}/{key}".encode())


def failed_rows(batch: Batch) -> np.ndarray:
    """``[B]`` bool: rows that an earlier stage already failed."""
    return np.array([bool(e) for e in batch["error"]], dtype=bool)


def seconds_per_row(start: float, n: int) -> np.ndarray:
    """``[n]`` float: each row's share of the time since ``start`` (``time.perf_counter``)."""
    return np.full(n, (time.perf_counter() - start) / max(n, 1))


def fail_row(batch: Batch, i: int, stage: str, error_type: str, message: str) -> None:
    """Mark row ``i`` of ``batch`` (whose error columns are writable) failed by ``stage``."""
    batch["error_stage"][i], batch["error_type"][i], batch["error"][i] = stage, error_type, message


def with_error_columns(batch: Batch) -> Batch:
    """The batch's columns, with copies of its error columns for a stage to write to."""
    out = dict(batch)
    for name in ERROR_COLUMNS:
        out[name] = np.array(batch[name], dtype=object).copy()
    return out


def encode_png(image: np.ndarray) -> bytes:
    """``[H, W, 3]`` uint8 RGB -> PNG bytes (deterministic)."""
    ok, data = cv2.imencode(
        ".png",
        np.ascontiguousarray(image[..., ::-1]),
        [cv2.IMWRITE_PNG_COMPRESSION, PNG_COMPRESSION],
    )
    if not ok:
        raise ValueError("PNG encoding failed")
    return data.tobytes()
