"""``ray.data.llm``'s vLLM engine as a Ray Data processor (Ray wiring; Ray is imported inside
:func:`build_vllm_processor` only). The rows it reads and writes, and the check that vLLM can
run, are in :mod:`xmr.llm.vllm`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from xmr.llm.vllm import check_vllm, vllm_request_fields, vllm_result_row

if TYPE_CHECKING:
    from ray.data import Dataset


def build_vllm_processor(
    model: str,
    *,
    keep_columns: Sequence[str],
    batch_size: int = 16,
    concurrency: int = 1,
    engine_kwargs: Mapping[str, Any] | None = None,
    runtime_env: Mapping[str, Any] | None = None,
) -> Callable[[Dataset], Dataset]:
    """A function ``dataset -> dataset`` that answers each row's ``request`` with vLLM.

    Args:
        model: the model's Hub repo id or folder (``model_source``).
        keep_columns: input columns to carry to the output (a row id at least).
        batch_size: rows per engine batch.
        concurrency: vLLM engine replicas (each on its own GPU set).
        engine_kwargs: ``vllm`` engine arguments (``max_model_len``, ``tensor_parallel_size``...).
        runtime_env: the vLLM stage's own Ray runtime environment (see :func:`check_vllm`).

    Output rows: ``keep_columns`` + ``response`` (str), ``status`` (``"ok"`` or
    ``"engine_error"``), ``error`` (str), one per input row. Sampling follows each request
    (``temperature`` 0 is greedy). Building connects to Ray (``ray.init`` when needed).
    """
    check_vllm(runtime_env)
    from ray.data.llm import build_processor, vLLMEngineProcessorConfig

    config = vLLMEngineProcessorConfig(
        model_source=model,
        batch_size=batch_size,
        concurrency=concurrency,
        engine_kwargs=dict(engine_kwargs or {}),
        runtime_env=dict(runtime_env) if runtime_env is not None else None,
        should_continue_on_error=True,
    )
    # postprocess: identity (the processor's default), so that answered and failed rows keep
    # one schema; vllm_result_row then maps both to the same columns.
    processor = build_processor(config, preprocess=vllm_request_fields)
    keep = tuple(keep_columns)

    def answer(dataset: Dataset) -> Dataset:
        return processor(dataset).map(vllm_result_row, fn_kwargs={"keep_columns": keep})

    return answer
