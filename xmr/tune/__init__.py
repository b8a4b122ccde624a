"""Sweeps on Ray Tune (``xmr tune``): search spaces, trials, Pareto fronts, MLflow parent runs."""

from xmr.tune.space import SearchSpace, SpaceError, load_space, shipped_spaces
from xmr.tune.sweep import SweepInterrupted, SweepResult, run_sweep

__all__ = [
    "SearchSpace",
    "SpaceError",
    "SweepInterrupted",
    "SweepResult",
    "load_space",
    "run_sweep",
    "shipped_spaces",
]
