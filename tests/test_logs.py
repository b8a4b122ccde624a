"""Other libraries' chatter off the console, xmr's own lines and every warning on it."""

from __future__ import annotations

import io
import logging
import os

import pytest

from xmr.logs import QUIET_ENV, quiet_console, without_message


@pytest.fixture
def console() -> io.StringIO:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    yield stream
    root.removeHandler(handler)
    root.setLevel(level)


def test_quiet_console_keeps_xmr_and_warnings(console: io.StringIO, monkeypatch) -> None:
    # quiet_console sets its defaults in os.environ: a copy without them, restored after
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k not in QUIET_ENV})
    quiet_console()
    logging.getLogger("otherlib.workers").info("worker group started")
    logging.getLogger("otherlib.data").warning("a block was spilled")
    logging.getLogger("xmr.synth").info("planned 80 images")
    assert console.getvalue().splitlines() == ["a block was spilled", "planned 80 images"]
    assert QUIET_ENV.items() <= dict(os.environ).items()


def test_without_message_drops_only_that_message_and_only_inside(console: io.StringIO) -> None:
    with without_message("No pretrained weights"):
        logging.getLogger().warning("No pretrained weights loaded for xmr-tiny")
        logging.getLogger().warning("another warning")
    logging.getLogger().warning("No pretrained weights after the block")
    assert console.getvalue().splitlines() == [
        "another warning",
        "No pretrained weights after the block",
    ]
