"""Training precision (``xmr train --precision``): autocast and the gradient scaler.

- ``fp32``: no autocast (the default, and what a CPU trains fastest with).
- ``bf16``: the forward passes under bfloat16 autocast (GPUs with bf16, e.g. A100/H100; CPUs
  too). bf16 has fp32's exponent range: no gradient scaling.
- ``amp``: float16 autocast with a dynamic gradient scaler (GPUs without bf16, e.g. V100/T4).

Whatever the precision, the weights, the optimiser state and the checkpoints stay float32, and
the losses are computed in float32 on the embeddings (:mod:`xmr.models.losses`).
"""

from __future__ import annotations

import contextlib

import torch

PRECISIONS = ("fp32", "bf16", "amp")
_DTYPES = {"bf16": torch.bfloat16, "amp": torch.float16}


def check_precision(precision: str, device: torch.device | None = None) -> None:
    """Refuse a precision that is unknown, or that ``device`` (when given) cannot run.

    Raises:
        ValueError: ``--precision …`` naming the choices, or a GPU without bfloat16.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"--precision must be one of {' | '.join(PRECISIONS)}, got {precision!r}")
    if precision != "bf16" or device is None or device.type != "cuda":
        return
    if not torch.cuda.is_bf16_supported():
        raise ValueError(
            f"--precision bf16: {torch.cuda.get_device_name(device)} has no bfloat16; "
            "use --precision amp (float16 with a gradient scaler)"
        )


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The context the forward pass runs in: ``torch.autocast`` for bf16 and amp."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=_DTYPES[precision])


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler:
    """A gradient scaler, active for ``amp`` only (otherwise it passes the loss and the
    optimiser step through unchanged)."""
    return torch.amp.GradScaler(device.type, enabled=precision == "amp")
