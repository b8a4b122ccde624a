"""A response cache on disk, so that a resumed or repeated job pays for no LLM call twice.

An entry is the answer text of one successful request, keyed by the SHA-256 of (backend name,
model, the request's canonical JSON) and stored as ``FOLDER/ab/cd/<key>.txt`` (UTF-8). Entries
are written to a temporary file in the same folder and renamed into place (``os.replace``), so
a reader sees a whole entry or none, and any number of processes, on one node or on nodes that
share the folder, may read and write at once: two writers of one key write the same answer and
the last rename wins. ``FOLDER`` may be in an object store (``s3://bucket/cache``, an
:class:`~xmr.storage.ObjectPath`), which every node reaches: there an entry is one upload, which
appears whole or not at all, and the last upload of a key wins. Failed requests are never cached
(a retry may succeed).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

from xmr.llm.chat import ChatBackend, ChatRequest, ChatResult, ResultCallback
from xmr.storage import ObjectPath, StoragePath, is_uri, write_atomic

_KEY = re.compile(r"[0-9a-f]{64}")


def cache_key(backend: str, model: str, request: ChatRequest) -> str:
    """The cache key of ``request`` sent to ``model`` on ``backend``: 64 hex characters."""
    identity = json.dumps([backend, model, request.to_json()], ensure_ascii=False)
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()


class ResponseCache:
    """Answers under ``folder`` (created when missing): a local or shared folder, or an object
    store's (a URI or :class:`~xmr.storage.ObjectPath`).

    Raises:
        NotADirectoryError: ``folder`` exists and is not a folder.
    """

    def __init__(self, folder: str | StoragePath) -> None:
        if isinstance(folder, ObjectPath) or is_uri(folder):
            self.folder: StoragePath = ObjectPath(str(folder))
        else:
            self.folder = Path(folder)
        if self.folder.exists() and not self.folder.is_dir():
            raise NotADirectoryError(f"LLM cache {self.folder} is not a folder")
        self.folder.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.folder)!r})"

    def path(self, key: str) -> StoragePath:
        """Where the entry of ``key`` lives. Raises ``ValueError`` for a malformed key."""
        if not _KEY.fullmatch(key):
            raise ValueError(f"a cache key is 64 lower-case hex characters, got {key!r}")
        return self.folder / key[:2] / key[2:4] / f"{key}.txt"

    def get(self, key: str) -> str | None:
        """The cached answer of ``key``, None when there is none."""
        try:
            return self.path(key).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def put(self, key: str, text: str) -> None:
        """Store ``text`` as the answer of ``key``, atomically (temp file, fsync, rename; in an
        object store: one upload)."""
        write_atomic(self.path(key), text)


class CachedChat:
    """``backend`` behind ``cache``: cached requests are answered without a call (``cached``,
    0 attempts); the others, each distinct request once, go to ``backend`` in one
    :meth:`~xmr.llm.chat.ChatBackend.complete` call, and its successful answers are stored."""

    def __init__(self, backend: ChatBackend, cache: ResponseCache) -> None:
        self.backend = backend
        self.cache = cache
        self.name = backend.name
        self.model = backend.model

    def __repr__(self) -> str:
        return f"CachedChat({self.backend!r}, {self.cache!r})"

    def complete(
        self, requests: Sequence[ChatRequest], on_result: ResultCallback | None = None
    ) -> list[ChatResult]:
        """One result per request, in order; see the class. Each answer is stored as soon as
        it arrives, so a job killed mid-batch asks again only what had not been answered."""
        keys = [cache_key(self.name, self.model, request) for request in requests]
        results: list[ChatResult | None] = []
        missing: dict[str, ChatRequest] = {}  # key -> request, first occurrence, in order
        for key, request in zip(keys, requests, strict=True):
            text = self.cache.get(key)
            results.append(None if text is None else ChatResult(text, "ok", "", 0, True))
            if text is None:
                missing.setdefault(key, request)
        for index, result in enumerate(results):
            if result is not None and on_result is not None:
                on_result(index, result)
        if missing:
            asked = list(missing)
            waiting = [i for i, r in enumerate(results) if r is None]

            def store(position: int, answer: ChatResult) -> None:
                if answer.ok:
                    self.cache.put(asked[position], answer.text)
                if on_result is not None:
                    for index in waiting:
                        if keys[index] == asked[position]:
                            on_result(index, answer)

            answers = dict(
                zip(asked, self.backend.complete(list(missing.values()), store), strict=True)
            )
            results = [
                answers[key] if r is None else r for key, r in zip(keys, results, strict=True)
            ]
        return [result for result in results if result is not None]

    def close(self) -> None:
        """Close the wrapped backend."""
        self.backend.close()
