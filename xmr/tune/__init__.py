"""Sweeps on Ray Tune (``xmr tune``): search spaces, trials, Pareto fronts, MLflow parent runs.

The sweep itself is :func:`xmr.tune.sweep.run_sweep` (it loads Ray); this package re-exports
only the search spaces, which do not.
"""

from xmr.tune.space import SearchSpace, SpaceError, load_space, shipped_spaces

__all__ = ["SearchSpace", "SpaceError", "load_space", "shipped_spaces"]
