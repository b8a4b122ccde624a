"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests and benchmarks.

A real HTTP server (``ThreadingHTTPServer``, one thread per connection, HTTP/1.1 keep-alive) in a
background thread. ``POST /v1/chat/completions`` answers by script: the last user message may
hold a marker ``[[script:NAME]]`` naming one of :data:`SCRIPTS`; without one, the answer is the
first :meth:`ChatServer.reply_when` rule whose fragment the message contains, else ``default``
(an echo of the message). Every request is logged (:class:`LoggedRequest`), and the most
requests seen open at once is kept (:attr:`ChatServer.max_concurrent`).

    with ChatServer(latency_s=0.2) as server:
        OpenAIChat(server.url, "scripted").complete([...])
        server.log  # what arrived
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MIB = 1024 * 1024
HUGE_BYTES = 8 * MIB
MARKER = re.compile(r"\[\[script:([a-z_]+)\]\]")

CSV_HEADER = "object,category,attribute,caption,negative_attribute,negative_caption"

SCRIPTS = {
    "json_list": "a valid JSON list of objects",
    "malformed_json": "a JSON list cut short",
    "csv_wrong_fields": "a CSV header and a row of four fields instead of six",
    "python_expression": "a Python expression that creates PWNED if anything evaluates it",
    "huge": "an 8 MiB answer streamed without a Content-Length",
    "rate_limit_once": "429 with Retry-After the first time a body is seen, then an answer",
    "server_error": "500, every time",
    "slow": "an answer after `slow_s` seconds",
    "unauthorized": "401 whose error message quotes the Authorization header",
    "error_body": "200 whose body is an error object quoting the prompt",
    "bad_body": "200 whose body is not JSON",
}
"""The scripts a ``[[script:NAME]]`` marker selects, and what each answers."""

FIXED_ANSWERS = {
    "json_list": '["dog", "frisbee", "grass"]',
    "malformed_json": '["dog", "frisbee"',
    "csv_wrong_fields": f"{CSV_HEADER}\ndog,color,brown dog,a brown dog on the grass\n",
    "python_expression": "__import__('os').system('touch PWNED')",
}


@dataclass(frozen=True)
class LoggedRequest:
    """One request the server received.

    ``started``/``finished`` are ``time.monotonic()`` seconds, ``finished`` taken when the answer
    was ready, just before it went out; ``status`` is the answer's HTTP status (500 for a
    streamed answer the client hung up on).
    """

    path: str
    body_sha256: str
    user_text: str
    script: str
    authorization: str
    started: float
    finished: float
    status: int


def completion(text: str, model: str) -> bytes:
    """A chat-completion JSON body answering ``text``."""
    return json.dumps(
        {
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    ).encode()


def error_body(message: str, kind: str, code: str | None = None) -> bytes:
    """An OpenAI-style error JSON body."""
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


class _Listener(ThreadingHTTPServer):
    request_queue_size = 256  # the default backlog of 5 drops connects when many open at once
    daemon_threads = True
    block_on_close = False  # a `slow` answer still sleeping does not block stop


class ChatServer:
    """The scripted server (see the module).

    Args:
        latency_s: seconds every request waits before it is answered.
        slow_s: seconds the ``slow`` script waits.
        retry_after: the ``Retry-After`` header of ``rate_limit_once``.
        expected_key: when set, requests without ``Authorization: Bearer <key>`` get 401.
        default: the answer to a message without a marker or a matching rule.
    """

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        slow_s: float = 3.0,
        retry_after: str = "1",
        expected_key: str | None = None,
        default: Callable[[str], str] = lambda text: f"echo: {text}",
    ) -> None:
        self.latency_s = latency_s
        self.slow_s = slow_s
        self.retry_after = retry_after
        self.expected_key = expected_key
        self.default = default
        self.rules: list[tuple[str, str]] = []
        self.failures: list[tuple[str, int]] = []
        self.max_concurrent = 0
        self._log: list[LoggedRequest] = []
        self._open = 0
        self._seen: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._httpd: _Listener | None = None
        self._thread: threading.Thread | None = None

    def reply_when(self, fragment: str, text: str) -> None:
        """Answer ``text`` to user messages containing ``fragment`` (first matching rule wins)."""
        self.rules.append((fragment, text))

    def fail_when(self, fragment: str, status: int) -> None:
        """Answer HTTP ``status`` (an error body; 429 with ``Retry-After``) to every user
        message containing ``fragment``."""
        self.failures.append((fragment, status))

    @property
    def url(self) -> str:
        """The API base URL, ``http://127.0.0.1:PORT/v1``."""
        assert self._httpd is not None, "start the server first"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def log(self) -> list[LoggedRequest]:
        """The requests received so far, in the order their answers were ready."""
        with self._lock:
            return list(self._log)

    def start(self) -> ChatServer:
        handler = type("Handler", (_Handler,), {"chat": self})
        self._httpd = _Listener(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            assert self._thread is not None
            self._thread.join(timeout=10)
            self._httpd = None

    def __enter__(self) -> ChatServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _enter(self) -> None:
        with self._lock:
            self._open += 1
            self.max_concurrent = max(self.max_concurrent, self._open)

    def _leave(self, entry: LoggedRequest) -> None:
        with self._lock:
            self._open -= 1
            self._log.append(entry)

    def _first_time(self, body_sha256: str) -> bool:
        with self._lock:
            self._seen[body_sha256] += 1
            return self._seen[body_sha256] == 1


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once (no 40 ms delayed-ACK stall)
    chat: ChatServer  # set on the subclass ChatServer.start makes

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the request log is :attr:`ChatServer.log`."""

    def _record(self, status: int) -> None:
        """Log this request once, before its answer goes out.

        A client that has read the answer can then rely on :attr:`ChatServer.log` holding it.
        """
        if self._entry is None:
            return
        entry, self._entry = replace(self._entry, finished=time.monotonic(), status=status), None
        self.chat._leave(entry)

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self._record(status)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _send_huge(self) -> None:
        """A valid completion of HUGE_BYTES characters, streamed until the client hangs up.

        Logged when the stream ends: 500 when the client hung up first (see ``do_POST``).
        """
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        head, tail = completion("@", "scripted").split(b"@")
        self.wfile.write(head)
        chunk = b"x" * (64 * 1024)
        for _ in range(HUGE_BYTES // len(chunk)):
            self.wfile.write(chunk)
        self.wfile.write(tail)

    def do_POST(self) -> None:
        chat = self.chat
        started = time.monotonic()
        chat._enter()
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        digest = hashlib.sha256(body).hexdigest()
        authorization = self.headers.get("Authorization", "")
        self._entry: LoggedRequest | None = LoggedRequest(
            self.path, digest, "", "", authorization, started, started, 500
        )
        status = 500
        try:
            request = json.loads(body)
            users = [m["content"] for m in request["messages"] if m["role"] == "user"]
            user_text = users[-1] if users else ""
            marker = MARKER.search(user_text)
            script = marker.group(1) if marker else "default"
            self._entry = replace(self._entry, user_text=user_text, script=script)
            status = self._answer(chat, request, user_text, script, digest, authorization)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (timeout, size cap)
        finally:
            self._record(status)

    def _answer(
        self, chat: ChatServer, request: dict, user_text: str, script: str, digest: str, auth: str
    ) -> int:
        """Send the scripted answer; return its HTTP status."""
        if self.path != "/v1/chat/completions":
            self._send(404, error_body("no such route", "invalid_request_error"))
            return 404
        if chat.latency_s:
            time.sleep(chat.latency_s)
        if script == "unauthorized" or (
            chat.expected_key is not None and auth != f"Bearer {chat.expected_key}"
        ):
            said = f"Incorrect API key provided: {auth!r}"
            self._send(401, error_body(said, "invalid_request_error", "invalid_api_key"))
            return 401
        model = str(request.get("model", ""))
        if script != "default" and script not in SCRIPTS:
            self._send(400, error_body(f"unknown script {script!r}", "invalid_request_error"))
            return 400
        failure = next((code for fragment, code in chat.failures if fragment in user_text), None)
        if failure is not None:
            headers = {"Retry-After": chat.retry_after} if failure == 429 else None
            self._send(failure, error_body("scripted failure", "server_error"), headers)
            return failure
        if script in FIXED_ANSWERS:
            self._send(200, completion(FIXED_ANSWERS[script], model))
        elif script == "huge":
            self._send_huge()
        elif script == "rate_limit_once" and chat._first_time(digest):
            self._send(
                429,
                error_body("Rate limit reached", "requests", "rate_limit_exceeded"),
                {"Retry-After": chat.retry_after},
            )
            return 429
        elif script == "server_error":
            self._send(500, error_body("The server had an error", "server_error"))
            return 500
        elif script == "slow":
            time.sleep(chat.slow_s)
            self._send(200, completion("late answer", model))
        elif script == "error_body":
            said = f"Could not process: {user_text}"
            self._send(200, error_body(said, "invalid_request_error", "bad_prompt"))
        elif script == "bad_body":
            self._send(200, b"not json {")
        else:
            rule = next((text for fragment, text in chat.rules if fragment in user_text), None)
            self._send(
                200, completion(rule if rule is not None else chat.default(user_text), model)
            )
        return 200
