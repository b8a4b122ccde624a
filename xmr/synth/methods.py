"""The D′ methods by ``--mode``, and the one-call builds the commands and jobs run.

A method is a :class:`~xmr.synth.runner.SynthMethod`: ``removal`` (:mod:`xmr.synth.removal`,
the odmap paper) or ``biaug`` (:mod:`xmr.synth.biaug`, the BiAug paper).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from xmr.llm import LLMSpec
from xmr.pipeline import Executor
from xmr.storage import StoragePath
from xmr.synth.config import SynthOptions, SynthRuntime
from xmr.synth.runner import SynthMethod, SynthResult, build, ray_executor


def _removal(options: SynthOptions, runtime: SynthRuntime, llm: LLMSpec | None) -> SynthMethod:
    from xmr.synth.removal.method import RemovalMethod

    return RemovalMethod(options, runtime)


def _biaug(options: SynthOptions, runtime: SynthRuntime, llm: LLMSpec | None) -> SynthMethod:
    from xmr.synth.biaug.method import BiAugMethod

    if llm is None:
        raise ValueError("--mode biaug needs an LLM (--llm)")
    return BiAugMethod(options, runtime, llm)


METHODS: dict[str, Callable[[SynthOptions, SynthRuntime, LLMSpec | None], SynthMethod]] = {
    "removal": _removal,
    "biaug": _biaug,
}
"""Each D′ method's builder, by ``--mode`` (the modes of
:data:`~xmr.synth.config.METHOD_CONFIGS`); a method's module is imported when it builds."""


def synth_method(
    options: SynthOptions, runtime: SynthRuntime, llm: LLMSpec | None = None
) -> SynthMethod:
    """The method of ``options.mode``, for a build with ``runtime`` (``llm``: BiAug's LLM):
    it builds from the shared config and its own.

    Raises:
        ValueError: ``--mode biaug`` without an LLM.
    """
    return METHODS[options.mode](options, runtime, llm)


def synthesize(
    options: SynthOptions,
    runtime: SynthRuntime,
    llm: LLMSpec | None = None,
    *,
    executor: Callable[[], Executor],
) -> SynthResult:
    """Build (or finish building) D′ with the method of ``options.mode`` into ``runtime.out``
    (:func:`~xmr.synth.runner.build`). ``executor``: makes the executor when there is work
    (Ray Data: :func:`~xmr.synth.runner.ray_executor`; in this process:
    :class:`~xmr.pipeline.LocalExecutor`)."""
    return build(synth_method(options, runtime, llm), runtime, executor)


def synthesize_defaults(
    world: Path,
    out: StoragePath,
    *,
    seed: int = 0,
    address: str | None = None,
    progress: bool = True,
) -> SynthResult:
    """D′ of ``world``'s train split with every option at its default (box masks, Telea
    inpainting, noun-phrase removal), into ``out``; resumes or reuses a finished build there.

    What ``xmr demo`` and the ``synth_ratio`` sweep train on; not logged to MLflow.
    """
    from xmr.synth.config import load_configs

    options, runtime = load_configs(
        None,
        {"data": world, "out": out, "seed": seed, "progress": progress, "address": address,
         "log_mlflow": False},
    )  # fmt: skip
    return synthesize(options, runtime, executor=ray_executor(runtime))
