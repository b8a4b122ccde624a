"""A local transformers chat model as a :class:`~xmr.llm.chat.ChatBackend`.

The model is a Hub repo id or a folder written by ``save_pretrained`` (see
:func:`xmr.pretrained.local_model_dir`) whose tokenizer has a chat template. Requests are
rendered with ``apply_chat_template(..., add_generation_prompt=True)``, left-padded and generated
in batches of ``batch_size``, greedily: the same request always gets the same answer, so
``temperature`` and ``seed`` are ignored. A request whose prompt and token budget do not fit the
model's context is ``too_large``; a generation that fails marks every request of its batch
``engine_error`` with the reason. torch and transformers are imported when the model loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from jinja2 import TemplateError

from xmr.llm.chat import ChatRequest, ChatResult, ResultCallback, one_line
from xmr.pretrained import local_model_dir, resolve_device

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


class HFChat:
    """Greedy batched chat generation with a transformers causal LM.

    Args:
        model: a Hub repo id or a local model folder (with a tokenizer and a chat template).
        device: ``"cuda"``, ``"cpu"``, ... or ``"auto"`` (the GPU when one is visible).
        batch_size: requests per ``generate`` call (>= 1).

    The model loads on the first :meth:`complete` (in the worker, not where the object is built).
    """

    name = "hf"

    def __init__(self, model: str, *, device: str = "auto", batch_size: int = 8) -> None:
        if not model:
            raise ValueError("model must be a Hub repo id or a model folder")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        local_model_dir(model)  # a path that is not a folder fails here, on the driver
        self.model = model
        self.device = device
        self.batch_size = batch_size
        self._tokenizer: PreTrainedTokenizerBase | None = None
        self._model: PreTrainedModel | None = None

    def __repr__(self) -> str:
        return f"HFChat(model={self.model!r}, device={self.device!r}, batch_size={self.batch_size})"

    def _load(self) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
        if self._model is None or self._tokenizer is None:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            source = str(local_model_dir(self.model) or self.model)
            tokenizer = AutoTokenizer.from_pretrained(source)
            if not tokenizer.chat_template:
                raise ValueError(f"model {self.model!r}: its tokenizer has no chat template")
            tokenizer.padding_side = "left"
            if tokenizer.pad_token is None:
                tokenizer.pad_token = tokenizer.eos_token
            model = AutoModelForCausalLM.from_pretrained(source)
            self._model = model.to(resolve_device(self.device)).eval()
            self._tokenizer = tokenizer
        return self._tokenizer, self._model

    def _context_tokens(self) -> int | None:
        """The most tokens (prompt + answer) the model takes, None when its config does not say."""
        assert self._model is not None
        limit = getattr(self._model.config, "max_position_embeddings", None)
        return limit if isinstance(limit, int) and limit > 0 else None

    def complete(
        self, requests: Sequence[ChatRequest], on_result: ResultCallback | None = None
    ) -> list[ChatResult]:
        """Greedy answers, one per request, in order (the decoded new tokens, special tokens
        dropped). Raises only when the model cannot be loaded. ``on_result(index, result)``
        hears of each generated batch's results as soon as it is done."""
        requests = list(requests)
        if not requests:
            return []
        tokenizer, _ = self._load()
        context = self._context_tokens()
        results: list[ChatResult | None] = [None] * len(requests)
        prompts: dict[int, str] = {}
        for index, request in enumerate(requests):
            try:
                prompt = tokenizer.apply_chat_template(
                    request.message_dicts(), add_generation_prompt=True, tokenize=False
                )
            except (TemplateError, ValueError, TypeError) as exc:
                reason = one_line(f"the chat template refuses the conversation: {exc}")
                results[index] = ChatResult("", "engine_error", reason, attempts=0)
                continue
            length = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
            if context is not None and length + request.max_tokens > context:
                results[index] = ChatResult(
                    "",
                    "too_large",
                    f"a prompt of {length} tokens + {request.max_tokens} new tokens exceeds "
                    f"the model's context of {context}",
                    attempts=0,
                )
            else:
                prompts[index] = prompt
        fitting = list(prompts)
        for start in range(0, len(fitting), self.batch_size):
            chunk = fitting[start : start + self.batch_size]
            answers = self._generate([prompts[i] for i in chunk], [requests[i] for i in chunk])
            for index, answer in zip(chunk, answers, strict=True):
                results[index] = answer
                if on_result is not None:
                    on_result(index, answer)
        return [result for result in results if result is not None]

    def _generate(self, prompts: list[str], requests: list[ChatRequest]) -> list[ChatResult]:
        """Generate one batch: up to the largest ``max_tokens``, each answer cut to its own."""
        import torch

        tokenizer, model = self._load()
        try:
            encoded = tokenizer(
                prompts, add_special_tokens=False, padding=True, return_tensors="pt"
            ).to(model.device)
            with torch.inference_mode():
                output = model.generate(
                    **encoded,
                    max_new_tokens=max(request.max_tokens for request in requests),
                    do_sample=False,
                    pad_token_id=tokenizer.pad_token_id,
                )
        except (RuntimeError, ValueError, IndexError) as exc:  # CUDA out of memory included
            reason = one_line(f"generation failed: {type(exc).__name__}: {exc}")
            return [ChatResult("", "engine_error", reason) for _ in requests]
        new_tokens = output[:, encoded["input_ids"].shape[1] :]
        return [
            ChatResult(tokenizer.decode(ids[: request.max_tokens], skip_special_tokens=True), "ok")
            for ids, request in zip(new_tokens, requests, strict=True)
        ]

    def close(self) -> None:
        """Drop the model and tokenizer (and free GPU memory they held)."""
        self._model = None
        self._tokenizer = None
