"""The ``vllm`` backend's plain parts: the check that it can run, its rows, its answers.

``ray[llm]`` pins a vLLM (0.29.0 for Ray 2.60) that needs torch 2.13, while xmr needs 2.14, so
vLLM cannot live in xmr's environment: the vLLM stage gets its own Ray runtime environment (a
container image or a pip list, ``runtime_env``), or the user serves the model with
``vllm serve`` and uses the ``openai`` backend. :func:`check_vllm` says so, in one line, before
Ray starts. :func:`~xmr.llm.vllm_processor.build_vllm_processor` wires the processor: rows carry
a ``request`` column (:meth:`ChatRequest.to_json <xmr.llm.chat.ChatRequest.to_json>`) and come
back with ``response``,
``status`` (``ok`` or ``engine_error``) and ``error`` columns next to the kept ones: a failing
row is reported (``should_continue_on_error``), never dropped and never fatal.

A job asks the engine in one pass over the requests its cache cannot answer, storing each
answer in the cache as it arrives; its LLM stages then read the answers back through
:class:`EngineAnswers` behind that cache, so they parse and validate them exactly as the
answers of the other backends.

The processor itself (Ray wiring) is in :mod:`xmr.llm.vllm_processor`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Mapping, Sequence
from typing import Any

from xmr.llm.cache import cache_key
from xmr.llm.chat import ChatRequest, ChatResult, ResultCallback, one_line

BACKEND = "vllm"
"""The backend name in cache keys."""

RUNTIME_ENV_KEYS = ("image_uri", "container", "pip", "uv", "conda", "py_executable")
"""Runtime-environment fields that can give the vLLM stage a Python with vLLM in it."""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _ray_version() -> str:
    try:
        return importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        return "<your ray version>"


def check_vllm(runtime_env: Mapping[str, Any] | None = None) -> None:
    """Refuse ``--llm vllm`` where it cannot run, with what to do instead; starts no Ray.

    ``runtime_env``: the Ray runtime environment the vLLM stage will run in (None: this one).

    Raises:
        ImportError: ``ray.data.llm`` is missing, or vLLM is missing here and no
            ``runtime_env`` brings it.
        ValueError: ``runtime_env`` names no image or package list that could bring vLLM.
    """
    ray_version = _ray_version()
    if not _installed("ray.data.llm"):
        raise ImportError(
            f"--llm vllm needs ray.data.llm, which this Ray ({ray_version}) lacks: "
            'pip install "ray[data]>=2.60"'
        )
    if runtime_env is not None:
        if not any(key in runtime_env for key in RUNTIME_ENV_KEYS):
            raise ValueError(
                f"--llm-runtime-env must give the vLLM stage a Python with vLLM: set one of "
                f"{', '.join(RUNTIME_ENV_KEYS)}"
            )
        return
    if not _installed("vllm"):
        raise ImportError(
            f"--llm vllm: vLLM is not installed here, and it cannot be: ray[llm]=={ray_version} "
            "pins a vLLM that needs torch 2.13 (xmr needs 2.14). Run the vLLM stage in its own "
            'environment with --llm-runtime-env \'{"image_uri": "<an image with '
            f'ray[llm]=={ray_version}>"}}\' (or \'{{"pip": ["ray[llm]=={ray_version}"]}}\'), '
            "or serve the model with `vllm serve MODEL` and use --llm openai "
            "--llm-url http://HOST:8000/v1"
        )


def vllm_request_fields(row: dict[str, Any]) -> dict[str, Any]:
    """The processor's preprocess: a row's ``request`` JSON -> ``messages`` and
    ``sampling_params`` (the row's other columns are carried along by the processor)."""
    request = ChatRequest.from_json(row["request"])
    sampling: dict[str, Any] = {
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
    }
    if request.seed is not None:
        sampling["seed"] = request.seed
    return {"messages": request.message_dicts(), "sampling_params": sampling}


def vllm_result_row(row: dict[str, Any], keep_columns: Sequence[str]) -> dict[str, Any]:
    """A processed row -> ``keep_columns`` + ``response``, ``status``, ``error``.

    Rows the engine failed on carry ``__inference_error__`` (they skip the processor's
    postprocess); they become ``engine_error`` with that reason on one line.
    """
    kept = {column: row[column] for column in keep_columns}
    failure = row.get("__inference_error__") or ""
    if failure:
        return {**kept, "response": "", "status": "engine_error", "error": one_line(failure)}
    return {**kept, "response": str(row.get("generated_text") or ""), "status": "ok", "error": ""}


class EngineAnswers:
    """The vLLM engine's pass read back as a chat backend, behind the response cache.

    What the engine answered is in the cache, so the :class:`~xmr.llm.cache.CachedChat` in
    front answers it; a request that reaches this backend is one the engine failed on (its
    reason from ``failures``) or never got (a job that changed its requests since the pass).

    Args:
        model: the model the engine ran (part of the cache keys).
        failures: cache key (:func:`~xmr.llm.cache.cache_key` of ``"vllm"``, ``model``, the
            request) -> the engine's one-line reason.
    """

    name = BACKEND

    def __init__(self, model: str, failures: Mapping[str, str]) -> None:
        self.model = model
        self.failures = dict(failures)

    def __repr__(self) -> str:
        return f"EngineAnswers({self.model!r}, {len(self.failures)} failures)"

    def complete(
        self, requests: Sequence[ChatRequest], on_result: ResultCallback | None = None
    ) -> list[ChatResult]:
        """An ``engine_error`` result per request, with the engine's reason."""
        results = []
        for index, request in enumerate(requests):
            reason = self.failures.get(
                cache_key(BACKEND, self.model, request),
                "the vLLM engine pass did not answer this request",
            )
            results.append(ChatResult("", "engine_error", reason, 1))
            if on_result is not None:
                on_result(index, results[-1])
        return results

    def close(self) -> None:
        """Nothing to release."""
