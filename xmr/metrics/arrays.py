"""Numeric inputs as numpy: the one conversion every metric, estimator and re-ranker uses."""

from __future__ import annotations

import numpy as np
import torch


def as_numpy(x: object) -> np.ndarray:
    """A numpy view or copy of a numpy array, torch tensor (detached, moved to the CPU) or
    sequence; the shape is kept.

    16-bit floats (torch float16 / bfloat16, numpy float16) widen exactly to float32, so equal
    values stay equal (ties are preserved); float32 and float64 are kept, other dtypes as numpy
    reads them.
    """
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.is_floating_point() and x.dtype != torch.float64:
            x = x.float()
        return x.numpy()
    x = np.asarray(x)
    if x.dtype == np.float16:
        x = x.astype(np.float32)
    return x
