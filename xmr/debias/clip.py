"""CLIP-clip (gender paper §3.2, Algorithm 1): drop the feature dimensions most informative of
gender, from image and text features alike.

Image features ``V`` are ``[N, D]`` (numpy or torch), the gender of image ``n`` is ``"male"``,
``"female"`` or ``"neutral"`` (or its code, see :data:`GENDER_CODES`). :func:`clip_scores`
estimates ``I(V_d; g(V))`` for every dimension (float64 ``[D]``, nats), :func:`clip_dims` picks
the ``m`` highest (the index set ``Z``), and :func:`apply_clip` removes ``Z`` from any ``[N, D]``
features, image or text, giving ``[N, D − m]``. The paper uses ``m = 100`` of CLIP's dimensions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from xmr.debias.mutual_information import _as_array, estimator_function

GENDER_CODES = {"male": 1, "female": -1, "neutral": 0}
"""Label code of each gender, the same as :func:`xmr.metrics.gender_bias.gender_codes`."""

_NAMES = {code: name for name, code in GENDER_CODES.items()}


def gender_labels(gender: Sequence[str] | Sequence[int] | np.ndarray) -> np.ndarray:
    """int64 ``[N]`` codes (+1 male, −1 female, 0 neutral) of per-image genders.

    Entries are ``"male"``/``"female"``/``"neutral"`` or already their codes (ints, a numpy
    array or a torch tensor). ``ValueError`` names the first bad entry, its index and value.
    """
    values = gender.tolist() if hasattr(gender, "tolist") else list(gender)
    out = np.empty(len(values), np.int64)
    for n, value in enumerate(values):
        if isinstance(value, str) and value in GENDER_CODES:
            out[n] = GENDER_CODES[value]
        elif (
            isinstance(value, int | np.integer) and not isinstance(value, bool) and value in _NAMES
        ):
            out[n] = value
        else:
            raise ValueError(
                f"gender[{n}] = {value!r} is not one of {tuple(GENDER_CODES)} "
                f"or their codes {tuple(GENDER_CODES.values())}"
            )
    return out


def _prepare(image_features: object, gender: object, estimator: str, params: dict):
    """Checked float64 features ``[N, D]``, gender codes ``[N]`` and the MI function."""
    features = _as_array(image_features)
    if features.ndim != 2:
        raise ValueError(f"image_features must be [N, D], got shape {features.shape}")
    labels = gender_labels(gender)
    if len(labels) != len(features):
        raise ValueError(f"{len(labels)} gender labels for {len(features)} image feature rows")
    present = np.unique(labels)
    if len(present) < 2:
        found = ", ".join(repr(_NAMES[int(c)]) for c in present) or "none"
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
    return np.argsort(-np.asarray(scores), kind="stable")[:m].astype(np.int64)


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

    numpy or torch in, numpy out: float dtypes are kept (float32 stays float32; 16-bit torch
    floats become float32), others become float64. ``ValueError`` for indices out of ``[0, D)``
    or repeated.
    """
    if hasattr(features, "detach"):  # a torch tensor
        tensor = features.detach().cpu()
        if tensor.is_floating_point() and tensor.element_size() < 4:
            tensor = tensor.float()
        array = tensor.numpy()
    else:
        array = np.asarray(features)
    if array.ndim not in (1, 2):
        raise ValueError(f"features must be [N, D] or [D], got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.floating):
        array = array.astype(np.float64)
    dims = array.shape[-1]
    drop = _as_array(indices).reshape(-1)
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
