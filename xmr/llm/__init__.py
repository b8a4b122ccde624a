"""LLM chat backends behind one interface, and a response cache.

- :mod:`xmr.llm.chat`: :class:`ChatRequest`, :class:`ChatResult`, the :class:`ChatBackend`
  protocol and its statuses.
- :mod:`xmr.llm.openai_client`: :class:`OpenAIChat`, any OpenAI-compatible endpoint (aiohttp).
- :mod:`xmr.llm.hf_chat`: :class:`HFChat`, a local transformers chat model.
- :mod:`xmr.llm.vllm_processor`: the vLLM Ray Data processor (Ray wiring; vLLM in its own
  environment); :mod:`xmr.llm.vllm`: its check, rows and answers read back (plain).
- :mod:`xmr.llm.cache`: :class:`ResponseCache` on disk and :class:`CachedChat`.
- :mod:`xmr.llm.spec`: :class:`LLMSpec` (the ``--llm*`` flags) and :func:`create_chat`.

Importing this package loads neither torch nor Ray.
"""

from xmr.llm.cache import CachedChat, ResponseCache, cache_key
from xmr.llm.chat import STATUSES, ChatBackend, ChatRequest, ChatResult
from xmr.llm.hf_chat import HFChat
from xmr.llm.openai_client import OpenAIChat
from xmr.llm.spec import BACKENDS, LLMSpec, create_chat

__all__ = [
    "BACKENDS",
    "STATUSES",
    "CachedChat",
    "ChatBackend",
    "ChatRequest",
    "ChatResult",
    "HFChat",
    "LLMSpec",
    "OpenAIChat",
    "ResponseCache",
    "cache_key",
    "create_chat",
]
