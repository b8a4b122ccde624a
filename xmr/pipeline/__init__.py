"""Batch stages (plain classes, testable without Ray) and the thin executor onto Ray Data."""

from xmr.pipeline.stage import Resources, Stage, run_local

__all__ = ["Resources", "Stage", "run_local"]
