"""Post-processing debiasing of image–text features: CLIP-clip (gender paper §3.2)."""

from xmr.debias.clip import (
    GENDER_CODES,
    apply_clip,
    clip_dims,
    clip_scores,
    gender_labels,
    top_dims,
)
from xmr.debias.mutual_information import (
    MI_ESTIMATORS,
    histogram_mi,
    ksg_mi,
    mutual_information,
)

__all__ = [
    "GENDER_CODES",
    "MI_ESTIMATORS",
    "apply_clip",
    "clip_dims",
    "clip_scores",
    "gender_labels",
    "histogram_mi",
    "ksg_mi",
    "mutual_information",
    "top_dims",
]
