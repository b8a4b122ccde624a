"""A batch client for any OpenAI-compatible ``/v1/chat/completions`` endpoint (aiohttp).

:meth:`OpenAIChat.complete` runs one asyncio event loop over a batch: at most ``max_in_flight``
requests at once, each with a timeout covering the whole exchange, retried with jittered
exponential backoff on 408, 429, 5xx, timeouts and failed connections (a ``Retry-After`` header,
in seconds or as a date, replaces the backoff, capped at ``max_backoff_s``), never on other 4xx.
The answer is read chunk by chunk and abandoned as soon as it passes ``max_response_bytes``; it
must be a chat completion whose ``choices[0].message.content`` is a string, anything else (not
JSON, a 200 with an error body) is ``bad_response``. Nothing returned is ever evaluated.

The API key is read from the environment variable ``key_env`` at each call (inside the worker
that makes it) and sent as ``Authorization: Bearer``; it is not stored on the object, and repr,
results and errors never contain it. Errors never contain the prompt: a server's error body
contributes only its short ``code``/``type`` identifiers. This module logs nothing.

Not thread-safe: one ``complete`` at a time per object, from a thread with no running event
loop (a Ray Data actor's ``process``).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import os
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

import aiohttp

from xmr.llm.chat import ChatRequest, ChatResult, ResultCallback, one_line

_CHUNK_BYTES = 64 * 1024
_ERROR_BODY_BYTES = 64 * 1024  # read at most this much of a refusal, for its code and type
_IDENTIFIER = re.compile(r"[\w.\-]{1,60}")
_RETRIED = ("rate_limited", "server_error", "timeout", "connection_error")


def url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a base URL (``http(s)://host[:port]/path``), None when
    nothing is. The answer never repeats a URL that carries credentials."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return f"must be http(s)://host[:port]/path, got {url!r}"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials (the key goes in an environment variable)"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"must be http(s)://host[:port]/path, got {url!r}"
    if parts.query or parts.fragment:
        return f"must be a base URL without a query or fragment, got {url!r}"
    return None


def _error_identifiers(body: bytes | None) -> str:
    """``" (code=..., type=...)"`` from an OpenAI-style error body, ``""`` when it has none.

    Only short identifier-like values are kept: an error's free-text message may quote the
    prompt, so it is never repeated.
    """
    try:
        error = json.loads(body or b"").get("error")
    except (ValueError, RecursionError, AttributeError):
        return ""
    if not isinstance(error, dict):
        return ""
    found = [
        f"{name}={error[name]}"
        for name in ("code", "type")
        if isinstance(error.get(name), str) and _IDENTIFIER.fullmatch(error[name])
    ]
    return f" ({', '.join(found)})" if found else ""


def parse_completion(body: bytes) -> tuple[str | None, str]:
    """``(text, "")`` for a chat completion body, ``(None, reason)`` for anything else.

    Strict: UTF-8 JSON, an object without an ``error`` member, a non-empty ``choices`` list
    whose first ``message.content`` is a string. ``json.loads`` only: nothing is evaluated.
    """
    try:
        data = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "the answer is not UTF-8"
    except json.JSONDecodeError as exc:
        return None, f"the answer is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
    except RecursionError:
        return None, "the answer is JSON nested too deeply"
    if not isinstance(data, dict):
        return None, f"the answer is a JSON {type(data).__name__}, not an object"
    if "error" in data:
        return None, "a 200 answer with an error body" + _error_identifiers(body)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        return None, "the answer has no choices"
    first = choices[0]
    message = first.get("message") if isinstance(first, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str):
        return None, "the answer's choices[0].message.content is not a string"
    return content, ""


def retry_after_s(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait that a ``Retry-After`` header asks for (>= 0), None when absent or
    unreadable. Accepts seconds (``"2"``, ``"0.5"``) or an HTTP date.

    >>> retry_after_s("2"), retry_after_s("soon"), retry_after_s(None)
    (2.0, None, None)
    >>> retry_after_s("Thu, 01 Jan 2099 00:00:10 GMT", now=datetime(2099, 1, 1, tzinfo=UTC))
    10.0
    """
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


@dataclass(frozen=True)
class _Attempt:
    """How one HTTP exchange ended: a :class:`ChatResult` status, the text when ok, the reason
    otherwise, and the wait a ``Retry-After`` asked for."""

    status: str
    text: str = ""
    error: str = ""
    retry_after_s: float | None = None


class OpenAIChat:
    """Chat completions from an OpenAI-compatible endpoint (OpenAI, vLLM's server, ...).

    Args:
        url: the API's base URL, e.g. ``http://127.0.0.1:8000/v1``; requests go to
            ``{url}/chat/completions``.
        model: the ``model`` field of every request.
        key_env: the environment variable holding the API key, read at each ``complete``;
            unset or empty sends no ``Authorization`` header (local servers need none).
        max_in_flight: requests open at once (>= 1).
        timeout_s: the most seconds one attempt may take, answer read included.
        max_retries: further attempts after the first for retried failures (>= 0).
        max_response_bytes: the largest answer read; a bigger one is ``too_large``.
        backoff_s: the first retry waits ``backoff_s`` x [0.5, 1), doubling per retry.
        max_backoff_s: the longest wait between attempts, ``Retry-After`` included.
        seed: seeds the retry jitter (request ``i`` of a batch uses its own generator).

    Raises:
        ValueError: a bad argument (the message names it).
    """

    name = "openai"

    def __init__(
        self,
        url: str,
        model: str,
        *,
        key_env: str = "OPENAI_API_KEY",
        max_in_flight: int = 8,
        timeout_s: float = 60.0,
        max_retries: int = 4,
        max_response_bytes: int = 1 << 20,
        backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
        seed: int = 0,
    ) -> None:
        problem = url_problem(url)
        if problem:
            raise ValueError(f"url {problem}")
        if not model:
            raise ValueError("model must be a model name")
        lowest = {  # argument -> (value, least allowed value, whether that value is allowed)
            "max_in_flight": (max_in_flight, 1, True),
            "timeout_s": (timeout_s, 0, False),
            "max_retries": (max_retries, 0, True),
            "max_response_bytes": (max_response_bytes, 1, True),
            "backoff_s": (backoff_s, 0, True),
            "max_backoff_s": (max_backoff_s, 0, True),
        }
        for argument, (value, least, allowed) in lowest.items():
            if value < least or (value == least and not allowed):
                raise ValueError(
                    f"{argument} must be {'>=' if allowed else '>'} {least}, got {value}"
                )
        self.url = url.rstrip("/")
        self.endpoint = f"{self.url}/chat/completions"
        self.model = model
        self.key_env = key_env
        self.max_in_flight = max_in_flight
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.max_response_bytes = max_response_bytes
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.seed = seed
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        return (
            f"OpenAIChat(url={self.url!r}, model={self.model!r}, key_env={self.key_env!r}, "
            f"max_in_flight={self.max_in_flight}, timeout_s={self.timeout_s}, "
            f"max_retries={self.max_retries})"
        )

    def complete(
        self, requests: Sequence[ChatRequest], on_result: ResultCallback | None = None
    ) -> list[ChatResult]:
        """Answer ``requests`` concurrently; one result each, in order; never raises for a
        request that fails (its result says why). ``on_result(index, result)`` hears of each
        result as soon as it is final.

        Raises:
            ValueError: the key variable holds characters a header cannot carry.
        """
        requests = list(requests)
        if not requests:
            return []
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(self._complete_all(requests, on_result))

    def close(self) -> None:
        """Close the connections and the event loop (idempotent)."""
        if self._loop is None:
            return
        if self._session is not None:
            self._loop.run_until_complete(self._session.close())
            self._session = None
        self._loop.close()
        self._loop = None

    async def _complete_all(
        self, requests: list[ChatRequest], on_result: ResultCallback | None
    ) -> list[ChatResult]:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.max_in_flight)
            )
        key = os.environ.get(self.key_env, "").strip()
        if not all(" " < char <= "~" for char in key):  # never repeat the value
            raise ValueError(f"${self.key_env} holds characters an HTTP header cannot carry")
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        in_flight = asyncio.Semaphore(self.max_in_flight)

        async def answer(index: int, request: ChatRequest) -> ChatResult:
            r = await self._request(self._session, in_flight, headers, request, self._jitter(index))
            if key:  # defence in depth: no reason text may carry the key
                r = ChatResult(r.text, r.status, r.error.replace(key, "***"), r.attempts, r.cached)
            if on_result is not None:
                on_result(index, r)
            return r

        return list(await asyncio.gather(*(answer(i, r) for i, r in enumerate(requests))))

    def _payload(self, request: ChatRequest) -> bytes:
        payload: dict[str, object] = {
            "model": self.model,
            "messages": request.message_dicts(),
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
        }
        if request.seed is not None:
            payload["seed"] = request.seed
        return json.dumps(payload, ensure_ascii=False).encode("utf-8")

    def _jitter(self, index: int) -> random.Random:
        """The retry-jitter generator of request ``index`` of a batch (seeded)."""
        return random.Random(f"{self.seed}/{index}")

    def _delay_s(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if retry_after is not None:
            return min(retry_after, self.max_backoff_s)
        ceiling = min(self.max_backoff_s, self.backoff_s * 2.0 ** min(attempt - 1, 30))
        return ceiling * (0.5 + 0.5 * rng.random())

    async def _request(
        self,
        session: aiohttp.ClientSession,
        in_flight: asyncio.Semaphore,
        headers: dict[str, str],
        request: ChatRequest,
        rng: random.Random,
    ) -> ChatResult:
        """One request through its retries. The wait between attempts holds no slot."""
        body = self._payload(request)
        attempts = 0
        while True:
            attempts += 1
            async with in_flight:
                outcome = await self._attempt(session, headers, body)
            if outcome.status == "ok":
                return ChatResult(outcome.text, "ok", "", attempts)
            if outcome.status not in _RETRIED or attempts > self.max_retries:
                tries = f" after {attempts} attempts" if attempts > 1 else ""
                return ChatResult("", outcome.status, outcome.error + tries, attempts)
            await asyncio.sleep(self._delay_s(attempts, outcome.retry_after_s, rng))

    async def _read_capped(self, response: aiohttp.ClientResponse, limit: int) -> bytes | None:
        """The body, or None as soon as it is known to pass ``limit`` bytes (the rest unread)."""
        if response.content_length is not None and response.content_length > limit:
            return None
        chunks, size = [], 0
        async for chunk in response.content.iter_chunked(_CHUNK_BYTES):
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    async def _attempt(
        self, session: aiohttp.ClientSession, headers: dict[str, str], body: bytes
    ) -> _Attempt:
        """Send ``body`` once and classify the outcome."""
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        try:
            async with session.post(
                self.endpoint, data=body, headers=headers, timeout=timeout, allow_redirects=False
            ) as response:
                code = response.status
                if 200 <= code < 300:
                    raw = await self._read_capped(response, self.max_response_bytes)
                    if raw is None:
                        limit = self.max_response_bytes
                        return _Attempt("too_large", error=f"the answer exceeds {limit} bytes")
                    text, problem = parse_completion(raw)
                    return (
                        _Attempt("ok", text)
                        if text is not None
                        else _Attempt("bad_response", error=problem)
                    )
                detail = _error_identifiers(await self._read_capped(response, _ERROR_BODY_BYTES))
                said = f"HTTP {code} {one_line(response.reason or '', 60)}".rstrip() + detail
                wait = retry_after_s(response.headers.get("Retry-After"))
                if code == 429:
                    return _Attempt("rate_limited", error=said, retry_after_s=wait)
                if code == 408:
                    return _Attempt("timeout", error=said, retry_after_s=wait)
                if code >= 500:
                    return _Attempt("server_error", error=said, retry_after_s=wait)
                if code in (401, 403):
                    said += f"; check the key in ${self.key_env}"
                return _Attempt("http_error", error=said)
        except TimeoutError:
            return _Attempt("timeout", error=f"no whole answer within {self.timeout_s:g} s")
        except (aiohttp.ClientError, OSError) as exc:
            return _Attempt("connection_error", error=one_line(f"{type(exc).__name__}: {exc}"))
