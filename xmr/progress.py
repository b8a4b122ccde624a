"""Console output that suits where it goes: a terminal, or a log (a ``ray job submit`` log,
CI, ``| tee``).

- Progress: a progress bar redraws itself many times a second; in a log every redraw stays,
  hundreds of partial lines per epoch. When standard output is not a terminal, progress is one
  line per tenth of the work instead (:func:`console_progress`).
- Width: rich lays text out for 80 columns when it cannot ask a terminal, folding paths and
  commands mid-word. In a log, :func:`size_for_logs` gives every console :data:`LOG_COLUMNS`,
  so tables print at their full width, and :func:`print_heading` writes a plain line where a
  terminal gets a rule.
- Summaries: every long step ends with one line (:func:`summary_line`) saying what finished,
  how long it took, its headline numbers and where its output is.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Protocol, TextIO

from rich.console import Console
from tqdm import tqdm

PARTS = 10
"""Lines per task when the output is not a terminal: one each time another tenth is done."""
LINE_INTERVAL_S = 5.0
"""Seconds at least between two progress lines of a task (its last line excepted): a task done
in seconds writes one line, not ten."""

LOG_COLUMNS = 200
"""The width rich lays out for when standard output is not a terminal (unless ``COLUMNS``
says otherwise)."""


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
    several tenths, or when the last line is less than ``interval`` seconds old; the 100 %
    line always comes), so a task writes at most :data:`PARTS` lines however long it runs.
    Lines go to ``file`` (default: standard output at the time of writing), each flushed at
    once.
    """

    def __init__(
        self,
        total: int,
        desc: str,
        *,
        unit: str = "it",
        file: TextIO | None = None,
        interval: float = LINE_INTERVAL_S,
    ) -> None:
        self.total = total
        self.desc = desc
        self.unit = unit
        self.file = file
        self.interval = interval
        self.done = 0
        self.reported_parts = 0
        self.start = self.last_line = time.perf_counter()

    def update(self, n: int = 1) -> None:
        """Count ``n`` more units done; write a line if another tenth is complete."""
        self.done += n
        parts = min(PARTS, self.done * PARTS // self.total) if self.total > 0 else 0
        now = time.perf_counter()
        due = parts == PARTS or now - self.last_line >= self.interval
        if parts > self.reported_parts and due:
            self.reported_parts, self.last_line = parts, now
            seconds = now - self.start
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


def size_for_logs() -> None:
    """When standard output is not a terminal, lay out every rich console (``--help`` too) for
    :data:`LOG_COLUMNS` columns (``COLUMNS``, which rich reads; one the user set is kept).
    Call it before any console is made: the command-line entry points do."""
    if not stdout_is_terminal():
        os.environ.setdefault("COLUMNS", str(LOG_COLUMNS))


def print_heading(console: Console, text: str) -> None:
    """A section heading: a rule across a terminal, a plain ``== text`` line in a log (a rule
    there is as wide as the layout, and a long title is cut)."""
    if console.is_terminal:
        console.rule(text)
    else:
        console.print(f"== {text}", soft_wrap=True, markup=False, highlight=False)


def format_seconds(seconds: float) -> str:
    """``8.4 s``, ``3 min 12 s``, ``1 h 05 min``.

    >>> [format_seconds(s) for s in (8.44, 192, 3930)]
    ['8.4 s', '3 min 12 s', '1 h 05 min']
    """
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def summary_line(
    name: str,
    seconds: float,
    numbers: Mapping[str, float] | None = None,
    where: str | None = None,
    *,
    verb: str = "done",
) -> str:
    """One line that closes a step: ``done <name> in <time> | <numbers> | -> <where>``.

    ``numbers`` are the headline figures (a few, by name; whole numbers print as integers);
    ``where`` the output's place (a folder, a run).

    >>> summary_line("synth", 8.44, {"written": 65.0, "errors": 0.0}, "/jobs/x/dprime")
    'done synth in 8.4 s | written 65, errors 0 | -> /jobs/x/dprime'
    """
    parts = [f"{verb} {name} in {format_seconds(seconds)}"]
    if numbers:
        parts.append(", ".join(f"{key} {_number(value)}" for key, value in numbers.items()))
    if where:
        parts.append(f"-> {where}")
    return " | ".join(parts)


def _number(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e9:
        return str(int(value))
    return f"{value:.3f}"
