"""Batch stages (plain classes, testable without Ray) and the thin executor onto Ray Data."""

from xmr.pipeline.executor import Executor, LocalExecutor
from xmr.pipeline.stage import Resources, Stage, run_local

__all__ = ["Executor", "LocalExecutor", "Resources", "Stage", "run_local"]
