"""Stopping a command: SIGINT (Ctrl-C) and SIGTERM (``kill``, ``ray job stop``, a scheduler's
preemption) are one stop, and a stop says so.

Within :func:`handling_stops` (what every command runs in), the first signal first runs the
callbacks registered with :func:`on_stop` (newest first; each MLflow run in progress marks
itself KILLED there, :meth:`xmr.tracking.TrackedRun.ending`), then stops the work as Ctrl-C
does: a library that handles SIGINT itself while it runs (Ray Tune saves its state and stops
its trials, Ray Train aborts its workers) gets the signal as SIGINT; elsewhere :class:`Stopped`
is raised in the main thread. The bookkeeping comes first because ``ray job stop`` sends
SIGTERM to the job's processes and SIGKILL ``RAY_JOB_STOP_WAIT_TIME_S`` (default 3) seconds
later. A stopped command exits with :func:`exit_code`: 128 + the signal (130 for SIGINT, 143
for SIGTERM).

Signals are handled in the main thread only: elsewhere (a Tune trial, a Train worker) nothing
here changes what a signal does.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_received: list[int] = []  # the stop signals received within handling_stops, in order
_callbacks: list[Callable[[], None]] = []  # what a stop runs first (on_stop), oldest first
_handling: list[bool] = []  # non-empty within handling_stops


class Stopped(KeyboardInterrupt):
    """The process was asked to stop (SIGINT or SIGTERM; raised where Ctrl-C raises
    KeyboardInterrupt). ``str()`` says what stopped and how to go on."""

    def __init__(self, message: str = "", signum: int | None = None) -> None:
        super().__init__(message)
        self.signum = int(signum if signum is not None else last_signal())


def last_signal() -> int:
    """The last stop signal received (SIGINT when none was seen here: a KeyboardInterrupt
    that a library raised for Ctrl-C)."""
    return _received[-1] if _received else int(signal.SIGINT)


def stop_requested() -> bool:
    """Whether a stop signal arrived (a library that handles SIGINT itself may return
    normally after one: its result is then not a finished run)."""
    return bool(_received)


def stop_signal(exc: BaseException) -> int | None:
    """The stop signal that ``exc`` stands for, None when it is no stop: :class:`Stopped`, a
    KeyboardInterrupt (Ctrl-C, raised by Python or a library), or the ``SystemExit`` of the
    SIGTERM handler that ``ray.init`` installs in a driver (``sys.exit(signum)``), before
    :func:`on_stop` takes SIGTERM back.

    >>> stop_signal(Stopped("", signal.SIGTERM)), stop_signal(SystemExit(15))
    (15, 15)
    >>> stop_signal(ValueError("bad")), stop_signal(SystemExit(0))
    (None, None)
    """
    if isinstance(exc, Stopped):
        return exc.signum
    if isinstance(exc, KeyboardInterrupt):
        return last_signal()
    if isinstance(exc, SystemExit) and exc.code == signal.SIGTERM:
        return int(signal.SIGTERM)
    return None


def exit_code(signum: int | None = None) -> int:
    """The exit status of a process stopped by ``signum`` (default :func:`last_signal`), as a
    shell reports a process killed by it.

    >>> exit_code(signal.SIGINT), exit_code(signal.SIGTERM)
    (130, 143)
    """
    return 128 + int(signum if signum is not None else last_signal())


@contextmanager
def on_stop(callback: Callable[[], None]) -> Iterator[None]:
    """Within the block, a stop signal runs ``callback`` before anything else (it must be
    quick and must not raise; a failure is printed and the stop goes on).

    Within :func:`handling_stops`, entering the block also takes SIGTERM back from a handler
    installed since (``ray.init`` installs one in every driver that exits at once)."""
    take_back_sigterm()
    _callbacks.append(callback)
    try:
        yield
    finally:
        _callbacks.remove(callback)


def take_back_sigterm() -> None:
    """Within :func:`handling_stops`, handle SIGTERM as this module does again after a library
    replaced the handler (``ray.init`` installs one in every driver that exits at once)."""
    if _handling and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _handle)


def _run_callbacks() -> None:
    for callback in reversed(list(_callbacks)):
        try:
            callback()
        except Exception as exc:  # the stop must go on
            print(f"while stopping: {type(exc).__name__}: {exc}", file=sys.stderr)


def _handle(signum: int, frame: Any) -> None:
    first = not _received
    _received.append(signum)
    if first:
        _run_callbacks()
    delegate = signal.getsignal(signal.SIGINT)
    if signum == signal.SIGTERM and callable(delegate) and delegate is not _handle:
        delegate(signal.SIGINT, frame)  # Tune's or Train's Ctrl-C, while they run
        return
    raise Stopped(f"stopped by {signal.Signals(signum).name}", signum)


@contextmanager
def handling_stops() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM stop the process as the module says (main thread
    only; a signal the process ignores, as a shell's background job ignores Ctrl-C, stays
    ignored; the previous handlers come back after it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {
        signum: signal.signal(signum, _handle)
        for signum in STOP_SIGNALS
        if signal.getsignal(signum) is not signal.SIG_IGN  # a background job's Ctrl-C
    }
    _received.clear()
    _handling.append(True)
    try:
        yield
    finally:
        _handling.pop()
        _received.clear()
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
