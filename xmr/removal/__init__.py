"""Object removal (odmap §3.1): which objects to remove from an image, their box masks, and the
fills that paint the removed region (OpenCV, the padding baselines, Stable Diffusion).

Only the planner and the CPU fills are exported here (numpy and OpenCV); Stable Diffusion
inpainting imports its heavy dependencies from :mod:`xmr.removal.sd_inpaint`.
"""

from xmr.removal.fill import CPU_FILLS, FILL_METHODS
from xmr.removal.planning import box_mask, plan_removals, removal_plans

__all__ = ["CPU_FILLS", "FILL_METHODS", "box_mask", "plan_removals", "removal_plans"]
