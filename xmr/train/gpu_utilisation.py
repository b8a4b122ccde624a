"""How busy the GPU is while a loop runs: NVML's utilisation, sampled in a thread."""

from __future__ import annotations

import threading

import numpy as np
import torch


class GpuUtilisation:
    """The percentage of time the GPU ran a kernel (NVML, through
    :func:`torch.cuda.utilization`, which maps ``device`` past ``CUDA_VISIBLE_DEVICES``),
    sampled every ``interval`` seconds in a daemon thread between ``__enter__`` and
    ``__exit__``.

    Build it with :meth:`for_device`, which gives ``None`` where there is nothing to sample
    (a CPU device, or no NVML bindings: ``nvidia-ml-py`` is not installed).
    """

    def __init__(self, device: torch.device, interval: float = 0.2) -> None:
        self.device, self.interval = device, interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @classmethod
    def for_device(cls, device: torch.device, interval: float = 0.2) -> GpuUtilisation | None:
        if device.type != "cuda":
            return None
        try:
            torch.cuda.utilization(device)
        except Exception:  # no nvidia-ml-py, or NVML cannot start or read this device
            return None
        return cls(device, interval)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append(float(torch.cuda.utilization(self.device)))

    def __enter__(self) -> GpuUtilisation:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def mean(self) -> float:
        """Mean utilisation (%) over the samples; NaN before the first."""
        return float(np.mean(self.samples)) if self.samples else float("nan")

    def busiest(self, seconds: float) -> float:
        """The highest mean utilisation (%) over a window of ``seconds``."""
        util = np.array(self.samples, dtype=float)
        width = max(1, round(seconds / self.interval))
        if len(util) <= width:
            return float(util.mean()) if len(util) else float("nan")
        return float(np.convolve(util, np.ones(width) / width, mode="valid").max())
