"""Batch stages (plain classes, testable without Ray) and the thin executor that maps them onto Ray."""

from xmr.pipeline.stage import Resources, Stage

__all__ = ["Resources", "Stage"]
