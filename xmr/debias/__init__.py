"""Post-processing debiasing of image–text features: CLIP-clip (gender paper §3.2)."""

from xmr.debias.clip import apply_clip, clip_dims, clip_scores, top_dims
from xmr.debias.mutual_information import (
    MI_ESTIMATORS,
    histogram_mi,
    ksg_mi,
    mutual_information,
)

__all__ = [
    "MI_ESTIMATORS",
    "apply_clip",
    "clip_dims",
    "clip_scores",
    "histogram_mi",
    "ksg_mi",
    "mutual_information",
    "top_dims",
]
