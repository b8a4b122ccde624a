"""Batch stages (plain classes, testable without Ray) and the thin executor onto Ray Data."""

from xmr.pipeline.stage import Resources, Stage

__all__ = ["Resources", "Stage"]
