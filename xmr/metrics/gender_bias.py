"""Gender bias of text-to-image search (gender-bias paper): Bias@K (§2.2) and similarity bias (§5),
with the two shares that tell what moved Bias@K.

Each image has a gender label ``g(v)``: ``"male"`` when it shows only men, ``"female"`` when it
shows only women, otherwise ``"neutral"``. Positive values skew towards male, negative towards
female.

Bias@K mixes two things. A query whose top K holds no gendered image scores 0, so more
neutral images in the top K pull Bias@K towards 0 without any change in how men and women are
ranked against each other (dilution). The diagnostics separate them:

- ``gendered_share@K`` (:func:`gendered_share_at_k`): the mean over queries of the share of the
  top K that is gendered, ``(N_male + N_female) / K``;
- ``male_share@K`` (:func:`male_share_at_k`): of the gendered images in all queries' top K, the
  share that shows men, ``Σ N_male / Σ (N_male + N_female)`` (0.5: balanced). It is the mean of
  each query's own male share ``N_male / (N_male + N_female)`` weighted by the query's gendered
  share, so a query without a gendered image weighs nothing.

Dilution lowers the first and leaves the second; a real rebalancing moves the second towards
0.5. Neither has a better value (:class:`~xmr.metrics.direction.Direction` ``NONE``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from xmr.metrics.arrays import as_numpy
from xmr.metrics.ranking import Ranking, as_ranking, check_ks

GENDER_CODES = {"male": 1, "female": -1, "neutral": 0}
"""Each image gender label and its integer code, the one numbering in :mod:`xmr`: the metrics
here, CLIP-clip's mutual-information labels (:mod:`xmr.debias.clip`) and the training batches'
``image_gender`` (:class:`xmr.models.batch.TrainBatch`). The sign is the direction of a bias."""

GENDERS = tuple(GENDER_CODES)
"""The image gender labels: ``("male", "female", "neutral")``."""

GENDER_OF_CODE = {code: label for label, code in GENDER_CODES.items()}
"""Code -> image gender label, the inverse of :data:`GENDER_CODES`."""


def gender_codes(
    genders: Sequence[str] | Sequence[int] | np.ndarray | torch.Tensor, name: str = "image_gender"
) -> np.ndarray:
    """int64 ``[N]`` :data:`GENDER_CODES` (+1 male, -1 female, 0 neutral) of ``N`` per-image
    genders: labels, or already codes (ints, a numpy array or a torch tensor).

    ``ValueError`` names the first bad entry as ``{name}[index] = value``.
    """
    values = genders.tolist() if hasattr(genders, "tolist") else list(genders)
    out = np.empty(len(values), np.int64)
    for n, value in enumerate(values):
        if isinstance(value, str) and value in GENDER_CODES:
            out[n] = GENDER_CODES[value]
        elif (
            isinstance(value, int | np.integer)
            and not isinstance(value, bool)
            and value in GENDER_OF_CODE
        ):
            out[n] = value
        else:
            raise ValueError(
                f"{name}[{n}] = {value!r} is not one of {GENDERS} "
                f"or their codes {tuple(GENDER_CODES.values())}"
            )
    return out


@dataclass(frozen=True, eq=False)
class TopKGenders:
    """How many of each query's top ``depth`` images show men and how many women.

    ``male`` and ``female`` are int64 ``[Q]``; ``depth`` is the number of images counted,
    ``min(K, N)`` for a gallery of ``N``. Every per-query value of this module derives from them.
    """

    depth: int
    male: np.ndarray
    female: np.ndarray

    @property
    def gendered(self) -> np.ndarray:
        """int64 ``[Q]``: gendered images in each query's top K."""
        return self.male + self.female

    def deltas(self) -> np.ndarray:
        """float64 ``[Q]`` in [-1, 1]: Δ_K (eq. 2), 0 for a query without a gendered image."""
        gendered = self.gendered
        return np.divide(
            self.male - self.female,
            gendered,
            out=np.zeros(len(gendered)),
            where=gendered > 0,
            dtype=np.float64,
        )

    def gendered_shares(self) -> np.ndarray:
        """float64 ``[Q]`` in [0, 1]: the share of each query's top K that is gendered."""
        return self.gendered / np.float64(self.depth)

    def male_shares(self) -> np.ndarray:
        """float64 ``[Q]`` in [0, 1]: the share of men among each query's gendered top-K images,
        NaN for a query without one (it has no share; its weight, :meth:`gendered_shares`, is 0)."""
        gendered = self.gendered
        return np.divide(
            self.male, gendered, out=np.full(len(gendered), np.nan), where=gendered > 0,
            dtype=np.float64,
        )  # fmt: skip


def top_k_genders(
    scores: np.ndarray | torch.Tensor | Ranking,
    image_gender: Sequence[str],
    ks: Iterable[int] = tuple(range(1, 11)),
) -> dict[int, TopKGenders]:
    """``{K: TopKGenders}`` of each query's top K for each K in ``ks``.

    ``scores`` is a dense text-to-image ``[Q, N]`` score matrix (higher first, ties to the lower
    image index) or a :class:`Ranking` with at least the top ``max(ks)`` (or all ``N``).
    ``image_gender[n]`` is ``"male"``, ``"female"`` or ``"neutral"`` (or its code). A K above
    ``N`` counts the whole gallery.
    """
    ks = check_ks(ks)
    ranking = as_ranking(scores, max(ks))
    codes = gender_codes(image_gender)
    if len(codes) != ranking.num_gallery:
        raise ValueError(f"{len(codes)} gender labels for a gallery of {ranking.num_gallery}")
    top = codes[ranking.top(max(ks))]
    n_male = np.cumsum(top == GENDER_CODES["male"], axis=1)  # [Q, K]: male images in rank <= i + 1
    n_female = np.cumsum(top == GENDER_CODES["female"], axis=1)
    out = {}
    for k in ks:
        depth = min(k, top.shape[1])
        out[k] = TopKGenders(depth, n_male[:, depth - 1], n_female[:, depth - 1])
    return out


def bias_deltas(
    scores: np.ndarray | torch.Tensor | Ranking,
    image_gender: Sequence[str],
    ks: Iterable[int] = tuple(range(1, 11)),
) -> dict[int, np.ndarray]:
    """Each query's Δ_K (eq. 2) for each K in ``ks``: ``{K: float64 [Q] in [-1, 1]}``.

    Arguments as :func:`top_k_genders`. Per query, ``Δ_K = (N_male − N_female) / (N_male +
    N_female)`` over its top K images, 0 when none of them is gendered. Bias@K is the mean
    (:func:`bias_at_k`); its bootstrap resamples these.
    """
    return {k: counts.deltas() for k, counts in top_k_genders(scores, image_gender, ks).items()}


def bias_at_k(
    scores: np.ndarray | torch.Tensor | Ranking,
    image_gender: Sequence[str],
    ks: Iterable[int] = tuple(range(1, 11)),
) -> dict[int, float]:
    """Bias@K (eq. 2–3) for each K in ``ks``: ``{K: signed mean in [-1, 1]}``, the mean over
    all queries of :func:`bias_deltas` (same arguments), sign kept."""
    return {k: float(delta.mean()) for k, delta in bias_deltas(scores, image_gender, ks).items()}


def gendered_share_at_k(
    scores: np.ndarray | torch.Tensor | Ranking,
    image_gender: Sequence[str],
    ks: Iterable[int] = tuple(range(1, 11)),
) -> dict[int, float]:
    """``gendered_share@K`` for each K in ``ks``: ``{K: mean in [0, 1]}``, the mean over all
    queries of the share of their top K images that is gendered (arguments as
    :func:`top_k_genders`). What dilutes Bias@K: at 0 every query scores Δ_K = 0."""
    return {
        k: float(counts.gendered_shares().mean())
        for k, counts in top_k_genders(scores, image_gender, ks).items()
    }


def male_share_at_k(
    scores: np.ndarray | torch.Tensor | Ranking,
    image_gender: Sequence[str],
    ks: Iterable[int] = tuple(range(1, 11)),
) -> dict[int, float]:
    """``male_share@K`` for each K in ``ks``: ``{K: share in [0, 1]}``, the men among all the
    gendered images of all queries' top K, ``Σ N_male / Σ (N_male + N_female)`` (arguments as
    :func:`top_k_genders`); NaN when no query's top K holds a gendered image. Equal to the
    mean of the queries' male shares weighted by their gendered shares (the form the bootstrap
    resamples: :data:`xmr.metrics.weighting.WEIGHTS`)."""
    out = {}
    for k, counts in top_k_genders(scores, image_gender, ks).items():
        gendered = int(counts.gendered.sum())
        out[k] = float(counts.male.sum() / gendered) if gendered else float("nan")
    return out


def similarity_bias(
    image_features: np.ndarray | torch.Tensor,
    text_features: np.ndarray | torch.Tensor,
    image_gender: Sequence[str],
) -> float:
    """Similarity bias of one text query o (eq. 9): ``E_male S(v, o) − E_female S(v, o)``.

    ``image_features`` is ``[N, D]`` (the images of one concept, e.g. an occupation's search
    results), ``text_features`` ``[D]`` or ``[1, D]`` (that concept's query), ``image_gender[n]``
    ``"male"``, ``"female"`` or ``"neutral"`` (neutral images are left out). ``S`` is cosine
    similarity (features need not be normalised), so the result lies in [-2, 2]. Call once per
    concept. ``ValueError`` when either gender group is empty or a feature vector is zero.
    """
    images = as_numpy(image_features).astype(np.float64)
    text = as_numpy(text_features).astype(np.float64)
    if text.ndim == 2 and text.shape[0] == 1:
        text = text[0]
    if images.ndim != 2 or text.ndim != 1 or images.shape[1] != text.shape[0]:
        raise ValueError(
            f"expected image_features [N, D] and text_features [D] or [1, D], got "
            f"{list(images.shape)} and {list(np.shape(text_features))}"
        )
    codes = gender_codes(image_gender)
    if len(codes) != len(images):
        raise ValueError(f"{len(codes)} gender labels for {len(images)} images")
    for name in ("male", "female"):
        if not (codes == GENDER_CODES[name]).any():
            raise ValueError(f"no {name} image: the similarity bias needs both gender groups")
    image_norm = np.linalg.norm(images, axis=1)
    text_norm = np.linalg.norm(text)
    if text_norm == 0 or (image_norm == 0).any():
        raise ValueError("cosine similarity is undefined for a zero feature vector")
    similarity = images @ text / (image_norm * text_norm)
    male, female = codes == GENDER_CODES["male"], codes == GENDER_CODES["female"]
    return float(similarity[male].mean() - similarity[female].mean())
