"""CLIP-clip at evaluation time (gender paper §3.2): which embedding dimensions to drop.

The ``clip_m`` dimensions with the highest mutual information with the image gender label are
removed from every image and text embedding before ranking (:func:`xmr.eval.score.score`). A
``clip_m`` sweep encodes a split once and chooses the dimensions for every m from it.

Which images estimate the mutual information is the user's choice (``mi_split``). The default is
the train split: estimating it on the split that is then scored would let that split's gender
labels pick the dimensions, and Bias@K would be measured on the very labels it was fitted to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xmr.debias import apply_clip, clip_scores, top_dims
from xmr.eval.config import EvalConfig
from xmr.eval.encode import EncodedSplit


@dataclass
class ClippedDims:
    """What CLIP-clip removed: the dimensions (highest MI first) and every dimension's MI."""

    indices: np.ndarray  # int64 [m]
    mutual_information: np.ndarray  # float64 [D], nats
    estimator: str
    params: dict[str, float | int]
    mi_split: str
    mi_images: int
    mi_genders: dict[str, int]  # images per gender label among them

    def to_json(self) -> dict:
        return {
            "m": len(self.indices),
            "indices": self.indices.tolist(),
            "estimator": self.estimator,
            "params": self.params,
            "mi_split": self.mi_split,
            "mi_images": self.mi_images,
            "mi_genders": self.mi_genders,
            "mutual_information_nats": self.mutual_information.round(6).tolist(),
        }


def clip_embeddings(encoded: EncodedSplit, config: EvalConfig) -> ClippedDims:
    """CLIP-clip's dimensions for ``config`` (``clip_m``, estimator) from ``encoded``'s MI images.

    Raises ValueError when ``encoded`` holds no MI images, or ``clip_m`` is not below the
    embedding size.
    """
    if not len(encoded.mi_emb):
        raise ValueError(
            "CLIP-clip needs image features to estimate the mutual information: encode with "
            "mi_features=True"
        )
    scores = clip_scores(
        encoded.mi_emb, encoded.mi_genders, config.mi_estimator, **config.mi_params()
    )
    return ClippedDims(
        indices=top_dims(scores, config.clip_m),
        mutual_information=scores,
        estimator=config.mi_estimator,
        params=config.mi_params(),
        mi_split=config.mi_split,
        mi_images=len(encoded.mi_emb),
        mi_genders={g: encoded.mi_genders.count(g) for g in ("male", "female", "neutral")},
    )


def clipped_split(
    encoded: EncodedSplit, config: EvalConfig
) -> tuple[np.ndarray, np.ndarray, ClippedDims | None]:
    """``encoded``'s image ``[N, D]`` and text ``[T, D]`` embeddings with ``config``'s CLIP-clip
    dimensions removed, and what was removed; with ``clip_m = 0`` they are returned as they are,
    with None."""
    if not config.clip_m:
        return encoded.image_emb, encoded.text_emb, None
    clipped = clip_embeddings(encoded, config)
    image_emb, text_emb = (
        apply_clip(emb, clipped.indices, renormalize=config.clip_renormalize)
        for emb in (encoded.image_emb, encoded.text_emb)
    )
    return image_emb, text_emb, clipped
