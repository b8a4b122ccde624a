"""The one interface of every LLM backend: chat requests in, one result per request out.

A :class:`ChatRequest` is what a stage asks (messages, a token budget, sampling settings); its
canonical JSON (:meth:`ChatRequest.to_json`) is what caches hash and Ray Data columns carry. A
:class:`ChatResult` is what came back: the text when ``status == "ok"``, otherwise a status from
:data:`STATUSES` and a one-line reason that never holds the API key or the prompt. A backend
(:class:`ChatBackend`) answers a whole batch in one :meth:`~ChatBackend.complete` call, in
order, and reports per-request failures in the results instead of raising.

A request may name the ``image`` it is about (a file path), for backends that look at images;
text backends ignore it. Its JSON has the key only when it is set, so a text request's JSON,
and with it its cache key, is the same as before requests could carry one.

>>> request = ChatRequest(messages=(("user", "A dog?"),), max_tokens=8)
>>> request.to_json()
'{"max_tokens":8,"messages":[["user","A dog?"]],"seed":null,"temperature":0.0}'
>>> ChatRequest.from_json(request.to_json()) == request
True
>>> pictured = ChatRequest(messages=(("user", "A dog?"),), max_tokens=8, image="a.png")
>>> pictured.to_json()
'{"image":"a.png","max_tokens":8,"messages":[["user","A dog?"]],"seed":null,"temperature":0.0}'
>>> ChatRequest.from_json(pictured.to_json()) == pictured
True
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

ROLES = ("system", "user", "assistant")
"""The message roles a request may use."""

STATUSES = (
    "ok",  # the text is the model's answer
    "http_error",  # the server refused the request (4xx other than 408/429, 3xx): not retried
    "rate_limited",  # 429 until the retries ran out
    "server_error",  # 5xx until the retries ran out
    "timeout",  # no whole answer within the per-request timeout (or 408) until the retries ran out
    "too_large",  # the answer exceeded the size cap, or the prompt the model's context
    "connection_error",  # the connection failed until the retries ran out
    "bad_response",  # an answer that is not a chat completion (malformed JSON, an error body)
    "engine_error",  # a local model's generation failed (every request of that batch)
)
"""Every status a :class:`ChatResult` may have."""


def one_line(text: str, limit: int = 200) -> str:
    """``text`` with whitespace runs as single spaces, cut to ``limit`` characters (for reasons).

    >>> one_line("HTTP   500 Internal   Error", limit=12)
    'HTTP 500 ...'
    """
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 4] + " ..."


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion to ask for.

    Attributes:
        messages: ``(role, content)`` pairs in order, roles from :data:`ROLES`; the last is the
            message the model answers (usually ``"user"``).
        max_tokens: the most tokens the answer may have (>= 1).
        temperature: sampling temperature (>= 0; 0 is greedy).
        seed: sampling seed sent to backends that take one (None: the backend's).
        image: path of the image the question is about, read by backends that look at images
            (the ToyWorld oracle, :class:`xmr.biaug.oracle_chat.ToyWorldOracleChat`); text
            backends ignore it. None: no image.

    Lists (from JSON) are accepted and stored as tuples. Raises ``ValueError`` for an empty
    conversation, an unknown role, non-string content or image, or out-of-range numbers.
    """

    messages: tuple[tuple[str, str], ...]
    max_tokens: int
    temperature: float = 0.0
    seed: int | None = None
    image: str | None = None

    def __post_init__(self) -> None:
        messages = tuple(tuple(pair) for pair in self.messages)
        if not messages:
            raise ValueError("a chat request needs at least one message")
        for pair in messages:
            if len(pair) != 2 or pair[0] not in ROLES or not isinstance(pair[1], str):
                raise ValueError(
                    f"chat messages are (role, text) pairs with a role in {ROLES}, got a "
                    f"pair of {len(pair)} with role {str(pair[0] if pair else None)[:20]!r}"
                )
        object.__setattr__(self, "messages", messages)
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int):
            raise ValueError(f"max_tokens must be an integer, got {self.max_tokens!r}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise ValueError(f"seed must be an integer or None, got {self.seed!r}")
        if self.image is not None and (not isinstance(self.image, str) or not self.image):
            raise ValueError(f"image must be a non-empty path string or None, got {self.image!r}")

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, no spaces, UTF-8 text kept): equal requests give equal
        strings, so the string can be hashed for a cache key. ``image`` is written only when
        set."""
        fields: dict[str, object] = {
            "messages": [list(pair) for pair in self.messages],
            "max_tokens": self.max_tokens,
            "temperature": float(self.temperature),
            "seed": self.seed,
        }
        if self.image is not None:
            fields["image"] = self.image
        return json.dumps(
            fields,
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, text: str) -> ChatRequest:
        """The request :meth:`to_json` wrote. Raises ``ValueError`` for anything else."""
        try:
            fields = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"a chat request is not valid JSON: {exc}") from exc
        keys = {"messages", "max_tokens", "temperature", "seed"}
        if not isinstance(fields, dict) or set(fields) - {"image"} != keys:
            raise ValueError(
                "a chat request is an object of messages, max_tokens, temperature, seed and an "
                "optional image"
            )
        if not isinstance(fields["messages"], list) or not isinstance(
            fields["temperature"], int | float
        ):
            raise ValueError("a chat request's messages must be a list, its temperature a number")
        return cls(
            messages=tuple(tuple(pair) for pair in fields["messages"]),
            max_tokens=fields["max_tokens"],
            temperature=float(fields["temperature"]),
            seed=fields["seed"],
            image=fields.get("image"),
        )

    def message_dicts(self) -> list[dict[str, str]]:
        """The messages as OpenAI / chat-template dicts: ``[{"role": ..., "content": ...}]``."""
        return [{"role": role, "content": content} for role, content in self.messages]


@dataclass(frozen=True)
class ChatResult:
    """What one request came back as.

    Attributes:
        text: the answer; ``""`` unless ``status == "ok"``.
        status: one of :data:`STATUSES`.
        error: why it failed, one line (``""`` when ok); never the API key or the prompt.
        attempts: requests sent for it (retries included; 0 when answered from a cache).
        cached: answered from a response cache without a call.
    """

    text: str
    status: str
    error: str = ""
    attempts: int = 1
    cached: bool = False

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown chat status {self.status!r}; one of {STATUSES}")
        if self.status != "ok" and self.text:
            raise ValueError(f"a {self.status} result carries no text")

    @property
    def ok(self) -> bool:
        """True when ``text`` is the model's answer."""
        return self.status == "ok"


ResultCallback = Callable[[int, "ChatResult"], None]
"""``on_result(index, result)``: told of each request's final result as soon as it is known."""


@runtime_checkable
class ChatBackend(Protocol):
    """An LLM that answers chat requests in batches.

    Attributes:
        name: the backend's name (``"openai"``, ``"hf"``); part of cache keys.
        model: the model it runs; part of cache keys.
    """

    name: str
    model: str

    def complete(
        self, requests: Sequence[ChatRequest], on_result: ResultCallback | None = None
    ) -> list[ChatResult]:
        """One result per request, in order. A request that fails is a result with its status
        and reason; only a misconfigured backend raises. ``on_result(index, result)`` is called
        as soon as each result is final, before the whole batch is (what a cache keeps, so a
        job killed mid-batch loses no answer it had)."""
        ...

    def close(self) -> None:
        """Release connections, event loops and models; the backend is not used afterwards."""
        ...
