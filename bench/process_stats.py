"""This process's memory and CPU time, for the benchmark scripts (Linux ``/proc``)."""

from __future__ import annotations

import resource
from pathlib import Path


def status_kib(field: str) -> int:
    """A ``VmRSS`` / ``VmHWM`` field of /proc/self/status, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (all threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
