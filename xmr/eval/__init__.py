"""Evaluation: encode with a model on Ray, compute the papers' metrics, report and log them."""

from xmr.eval.evaluate import EvalConfig, EvalResult, evaluate

__all__ = ["EvalConfig", "EvalResult", "evaluate"]
