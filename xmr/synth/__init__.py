"""Synthetic counterfactual images: which objects to remove (planning) and how to fill them.

Only the planner is exported here (numpy only); fill stages import their heavy dependencies from
their own modules.
"""

from xmr.synth.planning import plan_removals

__all__ = ["plan_removals"]
