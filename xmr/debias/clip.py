"""CLIP-clip (gender paper §3.2, Algorithm 1): drop the feature dimensions most informative of
gender, from image and text features alike.

Image features ``V`` are ``[N, D]`` (numpy or torch), the gender of image ``n`` is ``"male"``,
``"female"`` or ``"neutral"`` (or its code, :data:`xmr.metrics.gender_bias.GENDER_CODES`).
:func:`clip_scores` estimates ``I(V_d; g(V))`` for every dimension (float64 ``[D]``, nats),
:func:`clip_dims` picks the ``m`` highest (the index set ``Z``), and :func:`apply_clip` removes
``Z`` from any ``[N, D]`` features, image or text, giving ``[N, D − m]``. The paper uses
``m = 100`` of CLIP's dimensions.
"""

from __future__ import annotations

import numpy as np

from xmr.debias.mutual_information import estimator_function
from xmr.metrics.arrays import as_numpy
from xmr.metrics.gender_bias import GENDER_OF_CODE, gender_codes


def _prepare(image_features: object, gender: object, estimator: str, params: dict):
    """Checked numpy features ``[N, D]``, int64 gender codes ``[N]`` and the MI function."""
    features = as_numpy(image_features)
    if features.ndim != 2:
        raise ValueError(f"image_features must be [N, D], got shape {features.shape}")
    labels = gender_codes(gender, "gender")
    if len(labels) != len(features):
        raise ValueError(f"{len(labels)} gender labels for {len(features)} image feature rows")
    present = np.unique(labels)
    if len(present) < 2:
        found = ", ".join(repr(GENDER_OF_CODE[int(c)]) for c in present) or "none"
        raise ValueError(f"need at least two distinct gender labels to estimate MI, got {found}")
    return features, labels, estimator_function(estimator, params)


def clip_scores(
    image_features: object, gender: object, estimator: str = "histogram", **params: object
) -> np.ndarray:
    """``I(V_d; g(V))`` for every dimension ``d``: float64 ``[D]`` in nats (what
    :func:`clip_dims` ranks). ``estimator`` and ``params`` as in
    :func:`xmr.debias.mutual_information.mutual_information`.
    """
    features, labels, function = _prepare(image_features, gender, estimator, params)
    return function(features, labels, **params)


def clip_dims(
    image_features: object,
    gender: object,
    m: int,
    estimator: str = "histogram",
    **estimator_params: object,
) -> np.ndarray:
    """Algorithm 1: the ``m`` dimensions with the highest MI with gender, int64 ``[m]``.

    Highest MI first; equal scores in increasing index order. ``m == 0`` gives an empty array
    (inputs are still checked, no MI is estimated). ``ValueError`` unless ``0 <= m < D``, when
    the gender labels do not match the rows, or when fewer than two genders occur.
    """
    features, labels, function = _prepare(image_features, gender, estimator, estimator_params)
    dims = features.shape[1]
    if isinstance(m, bool) or not isinstance(m, int | np.integer) or not 0 <= m < dims:
        raise ValueError(f"m={m!r} but the features have {dims} dims (need 0 <= m < {dims})")
    if m == 0:
        return np.empty(0, np.int64)
    return top_dims(function(features, labels, **estimator_params), m)


def top_dims(scores: np.ndarray, m: int) -> np.ndarray:
    """The ``m`` dimensions with the highest ``scores`` ``[D]`` (MI from :func:`clip_scores`),
    int64 ``[m]``, highest first, ties in increasing index order. ``ValueError`` unless
    ``0 <= m < D``."""
    dims = len(scores)
    if isinstance(m, bool) or not isinstance(m, int | np.integer) or not 0 <= m < dims:
        raise ValueError(f"m={m!r} but the features have {dims} dims (need 0 <= m < {dims})")
    return np.argsort(-as_numpy(scores), kind="stable")[:m].astype(np.int64)


def apply_clip(features: object, indices: object, *, renormalize: bool = False) -> np.ndarray:
    """``features`` ``[N, D]`` (or one ``[D]`` vector) without the columns ``indices`` (the
    index set ``Z`` of :func:`clip_dims`): ``[N, D − m]``, the kept columns in their order.

    Apply the same ``indices`` to image and text features. Without renormalisation (the
    default, as the reference code does) the clipped vectors are not unit length: for unit
    ``v``, ``c``, the dot product ``v*·c* = v·c − Σ_{z∈Z} v_z c_z`` (the original similarity
    minus the clipped part), and a text-to-image ranking by it ranks images by cosine times
    ``‖v*‖`` (the query's norm ``‖c*‖`` does not change the order). ``renormalize=True``
    L2-normalises each clipped row, so dot products are eq. 8's cosine similarity exactly; a
    row that becomes all zero stays zero.

    numpy or torch in, numpy out: float32 and float64 are kept, 16-bit floats become float32
    (:func:`~xmr.metrics.arrays.as_numpy`), others float64. ``ValueError`` for indices out of
    ``[0, D)`` or repeated.
    """
    array = as_numpy(features)
    if array.ndim not in (1, 2):
        raise ValueError(f"features must be [N, D] or [D], got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.floating):
        array = array.astype(np.float64)
    dims = array.shape[-1]
    drop = as_numpy(indices).reshape(-1)
    if drop.size and not np.issubdtype(drop.dtype, np.integer):
        raise ValueError(f"indices must be integers, got dtype {drop.dtype}")
    drop = drop.astype(np.int64)
    if drop.size and (drop.min() < 0 or drop.max() >= dims):
        raise ValueError(f"indices must lie in [0, {dims}), got {drop.min()}..{drop.max()}")
    if len(np.unique(drop)) != drop.size:
        raise ValueError("indices contain a repeated dimension")
    keep = np.ones(dims, bool)
    keep[drop] = False
    out = array[..., keep]
    if renormalize:
        norms = np.linalg.norm(out, axis=-1, keepdims=True)
        out = np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)
    return out
