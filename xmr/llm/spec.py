"""Which LLM a job uses (the ``--llm*`` flags) and the backend built from it in a worker.

:class:`LLMSpec` is a frozen options dataclass (see :mod:`xmr.fields`): it is built and checked
on the driver, before Ray starts, and shipped to the workers, where :func:`create_chat` builds
the backend (in a stage's ``setup()``). It never holds the API key, only the name of the
environment variable that does, so it can be logged and written to a manifest as it is.

``--llm oracle`` answers BiAug's prompts from a scene ToyWorld's ground truth
(:class:`xmr.biaug.oracle_chat.ToyWorldOracleChat`); it lives above this package, so the BiAug
stages build it themselves and :func:`create_chat` refuses it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xmr.fields import check_options, option, resolve_paths
from xmr.llm.cache import CachedChat, ResponseCache
from xmr.llm.chat import ChatBackend
from xmr.llm.hf_chat import HFChat
from xmr.llm.openai_client import OpenAIChat, url_problem
from xmr.llm.vllm import EngineAnswers, check_vllm
from xmr.pretrained import local_model_dir
from xmr.storage import StoragePath

BACKENDS = ("openai", "hf", "vllm", "oracle")
"""The values of ``--llm``."""

ORACLE = "oracle"
"""``--llm oracle``: ToyWorld's ground truth as the LLM (no model; reads the question's image)."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class LLMSpec:
    """An LLM backend and its settings, as the ``--llm*`` flags give them.

    Which settings apply: ``url``, ``key_env``, ``max_in_flight``, ``timeout_s``,
    ``max_retries``, ``max_response_bytes``, ``backoff_s``, ``seed`` to ``openai``;
    ``device`` and ``batch_size`` to ``hf``; ``batch_size``, ``runtime_env`` and
    ``engine_kwargs`` to ``vllm``;
    ``cache_dir`` to all but ``oracle``, which needs no model and no setting. Checked on
    construction (one-line ``ValueError`` naming the flag); :meth:`check_ready` adds the checks
    that need a model name or the environment.
    """

    backend: str = option(
        "openai",
        "LLM backend: openai, hf, vllm or oracle (oracle: ToyWorld ground truth, for BiAug on a "
        "scene ToyWorld; the BiAug job's default there, and --llm required elsewhere).",
        flag="llm",
    )
    model: str | None = option(
        None,
        "LLM: the endpoint's model name (openai), a Hub repo id or folder (hf, vllm).",
        flag="llm-model",
    )
    url: str = option(
        "https://api.openai.com/v1",
        "Base URL of an OpenAI-compatible API (--llm openai).",
        flag="llm-url",
    )
    key_env: str = option(
        "OPENAI_API_KEY",
        "Environment variable holding the API key (read in each worker).",
        flag="llm-key-env",
    )
    max_in_flight: int = option(8, "Requests open at once per worker.", flag="llm-in-flight", ge=1)
    timeout_s: float = option(60.0, "Seconds one LLM request may take.", flag="llm-timeout", gt=0)
    max_retries: int = option(
        4, "Retries of a request after 408/429/5xx/timeouts.", flag="llm-retries", ge=0
    )
    max_response_bytes: int = option(
        1 << 20, "Largest LLM answer read, in bytes.", flag="llm-max-response-bytes", ge=1024
    )
    backoff_s: float = option(
        1.0, "First retry wait in seconds (doubles per retry, jittered).", flag="llm-backoff", ge=0
    )
    seed: int = option(0, "Seed of the retry jitter.", flag="llm-seed")
    cache_dir: StoragePath | None = option(
        None,
        "Folder of the LLM response cache, shared by all workers: a local or shared path, or "
        "s3://bucket/folder (xmr synth: default $XMR_STORAGE/llm_cache, else ~/.cache/xmr/llm; "
        "beside --out for an s3:// --out).",
        flag="llm-cache",
        output=True,
    )
    device: str = option("auto", "Device of --llm hf: auto, cpu, cuda, cuda:N.", flag="llm-device")
    batch_size: int = option(
        8, "Requests per generate call (hf) or engine batch (vllm).", flag="llm-batch-size", ge=1
    )
    runtime_env: str | None = option(
        None,
        "JSON Ray runtime environment of the vLLM stage (an image or pip list with vLLM).",
        flag="llm-runtime-env",
    )
    engine_kwargs: str | None = option(
        None,
        "JSON vLLM engine arguments (max_model_len, tensor_parallel_size, ...; --llm vllm).",
        flag="llm-engine-kwargs",
    )

    def __post_init__(self) -> None:
        check_options(self)
        if self.backend not in BACKENDS:
            raise ValueError(f"--llm must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        problem = url_problem(self.url)
        if problem:
            raise ValueError(f"--llm-url {problem}")
        if not _ENV_NAME.fullmatch(self.key_env):
            # never repeat the value: it may be the key itself, pasted into the wrong flag
            raise ValueError(
                "--llm-key-env must name an environment variable (letters, digits, _), "
                "not hold the key"
            )
        if self.device != "auto" and not re.fullmatch(r"cpu|cuda(:\d+)?|mps", self.device):
            raise ValueError(
                f"--llm-device must be auto, cpu, cuda, cuda:N or mps, got {self.device!r}"
            )
        self.runtime_env_dict()
        self.engine_kwargs_dict()
        resolve_paths(self)

    def runtime_env_dict(self) -> dict[str, Any] | None:
        """``runtime_env`` parsed (a JSON object), None when unset. Raises ``ValueError``."""
        return _json_object(self.runtime_env, "--llm-runtime-env")

    def engine_kwargs_dict(self) -> dict[str, Any]:
        """``engine_kwargs`` parsed (a JSON object), empty when unset. Raises ``ValueError``."""
        return _json_object(self.engine_kwargs, "--llm-engine-kwargs") or {}

    @property
    def reads_images(self) -> bool:
        """True for a backend that reads the image a request names (``oracle``): its requests
        carry ``image``; text backends' requests do not, so their cache keys stay per caption."""
        return self.backend == ORACLE

    def check_ready(self) -> None:
        """The checks a job runs before Ray starts: a model is named, a model folder exists,
        vLLM can run (see :func:`xmr.llm.vllm.check_vllm`). ``oracle`` needs none of them.

        Raises:
            ValueError: ``--llm-model`` is missing.
            FileNotFoundError: ``--llm-model`` looks like a path that is not a folder.
            ImportError: ``--llm vllm`` cannot run here (the message says what to do).
        """
        if self.backend == ORACLE:
            return
        if not self.model:
            raise ValueError(f"--llm-model is required with --llm {self.backend}")
        if self.backend != "openai":
            local_model_dir(self.model)
        if self.backend == "vllm":
            check_vllm(self.runtime_env_dict())


def _json_object(text: str | None, flag: str) -> dict[str, Any] | None:
    """``text`` parsed as a JSON object, None when unset; ``ValueError`` naming ``flag``."""
    if text is None:
        return None
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{flag} is not valid JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise ValueError(f"{flag} must be a JSON object")
    return parsed


def create_chat(
    spec: LLMSpec, device: str | None = None, engine_failures: Mapping[str, str] | None = None
) -> ChatBackend:
    """The backend ``spec`` names, behind the response cache when ``spec.cache_dir`` is set.

    ``device``: where ``hf`` runs, overriding ``spec.device`` (a worker knows its GPU).
    ``vllm`` runs as a Ray Data pass before the stages (:func:`xmr.llm.vllm.
    build_vllm_processor`) that fills the cache; its chat backend reads that pass back
    (:class:`~xmr.llm.vllm.EngineAnswers`, ``engine_failures`` being the pass's failures by
    cache key), so it needs ``spec.cache_dir``.

    Raises:
        ValueError: ``--llm oracle``, which the BiAug stages build (it sits above this package),
            or what :meth:`LLMSpec.check_ready` refuses.
    """
    if spec.backend == ORACLE:
        raise ValueError(
            "--llm oracle is built by the BiAug stages (xmr.biaug.ToyWorldOracleChat), "
            "not by create_chat"
        )
    backend: ChatBackend
    if spec.backend == "vllm":  # the engine ran in its own environment: nothing to check here
        if spec.cache_dir is None or not spec.model:
            raise ValueError("--llm vllm reads its answers back from --llm-cache (and --llm-model)")
        backend = EngineAnswers(spec.model, engine_failures or {})
        return CachedChat(backend, ResponseCache(spec.cache_dir))
    spec.check_ready()
    assert spec.model is not None  # check_ready
    if spec.backend == "openai":
        backend = OpenAIChat(
            spec.url,
            spec.model,
            key_env=spec.key_env,
            max_in_flight=spec.max_in_flight,
            timeout_s=spec.timeout_s,
            max_retries=spec.max_retries,
            max_response_bytes=spec.max_response_bytes,
            backoff_s=spec.backoff_s,
            seed=spec.seed,
        )
    else:
        backend = HFChat(spec.model, device=device or spec.device, batch_size=spec.batch_size)
    return backend if spec.cache_dir is None else CachedChat(backend, ResponseCache(spec.cache_dir))
