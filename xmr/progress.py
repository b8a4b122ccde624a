"""Console progress that suits where the output goes: a bar on a terminal, a few lines in a log.

A progress bar redraws itself many times a second; written to a file or a pipe (a ``ray job
submit`` log, CI, ``| tee``) every redraw stays, hundreds of partial lines per epoch. When
standard output is not a terminal, progress is one line per tenth of the work instead.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Protocol, TextIO

from tqdm import tqdm

PARTS = 10
"""Lines per task when the output is not a terminal: one each time another tenth is done."""


def stdout_is_terminal() -> bool:
    """Whether standard output is an interactive terminal (not a file, a pipe or a job log)."""
    isatty = getattr(sys.stdout, "isatty", None)
    return bool(isatty and isatty())


class Progress(Protocol):
    """What the loops use of a progress display: a tqdm bar or :class:`ProgressLines`."""

    def update(self, n: int = 1) -> object: ...

    def close(self) -> None: ...

    def __enter__(self) -> Progress: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> object: ...


class ProgressLines:
    """Progress as a few whole lines, for a log: ``desc: 30% (78/260 img, 4.1 s)``.

    One line each time another tenth of ``total`` is done (fewer when one update covers
    several tenths), so a task writes at most :data:`PARTS` lines however long it runs.
    Lines go to ``file`` (default: standard output at the time of writing), each flushed at
    once.
    """

    def __init__(
        self, total: int, desc: str, *, unit: str = "it", file: TextIO | None = None
    ) -> None:
        self.total = total
        self.desc = desc
        self.unit = unit
        self.file = file
        self.done = 0
        self.reported_parts = 0
        self.start = time.perf_counter()

    def update(self, n: int = 1) -> None:
        """Count ``n`` more units done; write a line if another tenth is complete."""
        self.done += n
        parts = min(PARTS, self.done * PARTS // self.total) if self.total > 0 else 0
        if parts > self.reported_parts:
            self.reported_parts = parts
            seconds = time.perf_counter() - self.start
            file = self.file or sys.stdout
            file.write(
                f"{self.desc}: {100 * parts // PARTS}% "
                f"({self.done}/{self.total} {self.unit}, {seconds:.1f} s)\n"
            )
            file.flush()

    def close(self) -> None:
        """Nothing to clean up (the interface of a tqdm bar)."""

    def __enter__(self) -> ProgressLines:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def console_progress(total: int, desc: str, *, unit: str = "it", enabled: bool = True) -> Progress:
    """A tqdm bar when standard output is a terminal, :class:`ProgressLines` otherwise.

    ``enabled=False`` gives a display that shows nothing. Use as a context manager or call
    ``close()``.
    """
    if enabled and not stdout_is_terminal():
        return ProgressLines(total, desc, unit=unit)
    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled)
