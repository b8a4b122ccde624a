"""Whether a failed unit of a D′ build may succeed if asked again: transient or permanent.

Every error row of a build (``errors.parquet``) carries a ``kind``:

- ``transient``: the failure says nothing about the input. The LLM server was busy (rate
  limited, 5xx), slow (a timeout) or unreachable, a local model's generation or a GPU stage ran
  out of memory, a connection dropped, an actor or its node was lost. A rerun into the same
  ``--out`` asks again (unless ``--no-retry-errors``).
- ``permanent``: the input or the model's answer is the reason (an unreadable image, a bad box,
  an answer that is not the asked form, a :mod:`validation <xmr.biaug.validation>` refusal, a
  request the server refused as such). Asking again gives the same answer; a rerun keeps it.

The kind is read from the error's type (an exception class name, or ``llm_<status>`` for an LLM
call, :data:`xmr.llm.chat.STATUSES`) and, for a generic ``RuntimeError``, its message: CUDA
reports running out of memory as a ``RuntimeError`` whose message says so.

>>> error_kind("llm_rate_limited", "HTTP 429")
'transient'
>>> error_kind("RuntimeError", "CUDA out of memory. Tried to allocate 2.00 GiB")
'transient'
>>> error_kind("validation:phrase_form", "phrase 'a red car $(touch x)' ...")
'permanent'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

ErrorKind = Literal["transient", "permanent"]

TRANSIENT: ErrorKind = "transient"
PERMANENT: ErrorKind = "permanent"

TRANSIENT_TYPES = frozenset(
    {
        # an LLM call that ran out of retries (xmr.llm.chat.STATUSES)
        "llm_rate_limited", "llm_server_error", "llm_timeout", "llm_connection_error",
        "llm_engine_error",
        # the machine, not the input
        "OutOfMemoryError", "ConnectionError", "ConnectionResetError", "ConnectionRefusedError",
        "ConnectionAbortedError", "BrokenPipeError", "TimeoutError",
        # Ray: a lost actor, worker, node or object
        "RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError",
        "NodeDiedError", "ObjectLostError", "OwnerDiedError",
    }
)  # fmt: skip
"""Error types that are transient whatever their message."""

_TRANSIENT_MESSAGES = ("out of memory", "cuda error: an illegal memory access")
"""Fragments of a ``RuntimeError``'s message (any case) that make it transient."""


def error_kind(error_type: str, message: str = "") -> ErrorKind:
    """``"transient"`` or ``"permanent"`` for an error of ``error_type`` saying ``message``."""
    if error_type in TRANSIENT_TYPES:
        return TRANSIENT
    if error_type == "RuntimeError" and any(f in message.casefold() for f in _TRANSIENT_MESSAGES):
        return TRANSIENT
    return PERMANENT


def with_kind(error: Mapping[str, str]) -> dict[str, str]:
    """An error row (``key``, ``stage``, ``error_type``, ``message``) with its ``kind`` (kept
    when it has one)."""
    row = dict(error)
    row.setdefault("kind", error_kind(row["error_type"], row["message"]))
    return row


def transient_keys(errors: Iterable[Mapping[str, str]]) -> list[str]:
    """The keys of the transient ones among ``errors``, in order."""
    return [e["key"] for e in errors if with_kind(e)["kind"] == TRANSIENT]
