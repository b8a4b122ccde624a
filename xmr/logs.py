"""Where log records go: xmr's own lines on the console, other libraries' chatter in their files.

An operator reads a job's log (``ray job logs``, a pipe, CI) for xmr's progress and summaries.
Ray Train, Ray Tune, Ray Data, MLflow and open_clip log INFO records of their own workings
(worker groups starting, datasets planned, database tables created, model configs parsed):
hundreds of lines a sweep. :func:`quiet_console` keeps those off the console handlers of the
process it runs in; Ray's libraries still write them to their log files in Ray's session folder
(``ray-data.log``, ``logs/train/``). Warnings and errors still reach the console, and so does
everything xmr logs itself.

:data:`QUIET_ENV` are the environment settings that do the same for what no handler governs
(MLflow's "View run" links, which xmr prints once per run itself).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from xmr.progress import size_for_logs

QUIET_ENV = {
    # MLflow prints "View run <name> at: <url>" when a run ends on a server; xmr names each
    # run once, in the line that closes its step.
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
    # MLflow's INFO (a new sqlite store's table migrations) goes to a handler of its own,
    # made when mlflow is first imported, after xmr set up its console.
    "MLFLOW_LOGGING_LEVEL": "WARNING",
    # Ray Tune's default console output prints an experiment header and a TensorBoard hint
    # whatever its verbosity; its former output is silent at verbosity 0 (xmr's sweeps print
    # a line per trial themselves).
    "RAY_AIR_NEW_OUTPUT": "0",
}
"""Environment defaults every xmr process and its Ray workers run with (a value the user set
is kept)."""


class ConsoleFilter(logging.Filter):
    """Pass a record to a console handler when it is a warning or worse, or xmr's own."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name.split(".")[0] == "xmr"


def _console_handlers() -> Iterator[logging.StreamHandler]:
    """Every handler of this process's loggers that writes to a stream and not a file."""
    loggers = [logging.getLogger()] + [
        logger
        for logger in list(logging.Logger.manager.loggerDict.values())
        if isinstance(logger, logging.Logger)
    ]
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, logging.StreamHandler) and not isinstance(
                handler, logging.FileHandler
            ):
                yield handler


def quiet_console() -> None:
    """Keep other libraries' records below WARNING off this process's console handlers (a
    :class:`ConsoleFilter` on each, once), and set :data:`QUIET_ENV`'s defaults.

    Call it again after a library configures its logging (Ray Train does so in each worker when
    the training function starts): handlers made later are not covered.
    """
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    for handler in _console_handlers():
        if not any(isinstance(f, ConsoleFilter) for f in handler.filters):
            handler.addFilter(ConsoleFilter())


class MessageFilter(logging.Filter):
    """Drop the records whose message starts with ``prefix`` (a logger-level filter: it sees
    the records logged on its own logger)."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


@contextmanager
def without_message(prefix: str, logger: str = "") -> Iterator[None]:
    """Within the block, drop the records of ``logger`` (default: the root logger, where
    open_clip logs) whose message starts with ``prefix``: a warning about what the caller
    asked for on purpose (random weights for a model built from scratch)."""
    target = logging.getLogger(logger)
    dropped = MessageFilter(prefix)
    target.addFilter(dropped)
    try:
        yield
    finally:
        target.removeFilter(dropped)


def prepare_console() -> None:
    """What a command line sets up first, before any library logs or prints: the layout for
    a log (:func:`~xmr.progress.size_for_logs`) and :func:`quiet_console`."""
    size_for_logs()
    quiet_console()
