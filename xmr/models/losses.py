"""Training losses, one definition each, over a batch of ``B`` L2-normalised embeddings.

Every function returns per-row losses (``[B]``) so callers choose the reduction, computed in
float32 whatever the autocast precision of the forward pass (:func:`in_fp32`); rows that
show the same image (equal ``image_ids``) are never each other's negatives.

- :func:`contrastive_losses`: CLIP's symmetric InfoNCE (image->text and text->image).
- :func:`triplet_losses`: VSE++'s hinge triplet loss with the hardest negative (max violation)
  or the sum over negatives (odmap paper appendix B; Faghri et al. 2018).
- FairSample (gender paper §3.1, eq. 6): for gender-neutral captions the text->image negatives
  are drawn half from male and half from female images of the batch;
  :func:`fair_triplet_t2i` is eq. 6, :func:`fair_contrastive_t2i` its softmax analogue. The
  final text->image loss is ``α·L_fair + (1-α)·L_t2i`` (:func:`mix_fair`); image->text is
  unchanged. This follows the paper's text; the authors' released SCAN code instead gives each
  gendered image one caption of the other gender as its image->text negative (and a neutral
  one a neutral caption), which is a different loss.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ParamSpec, TypeVar

import torch
import torch.nn.functional as F

from xmr.metrics.gender_bias import GENDER_CODES

FAIR_CAPTIONS = ("neutral", "gendered-images")
"""Which captions FairSample balances: ``neutral``, every gender-neutral caption (eq. 6);
``gendered-images``, a diagnostic, not a method: only the neutral captions of images that show
men or women, so that captions of person-less scenes keep their plain negatives."""


@dataclass(frozen=True)
class LossConfig:
    """Loss settings shared by the families' objectives (logged as ``loss.*``).

    Attributes:
        fair_alpha: FairSample weight α in ``[0, 1]`` (gender paper §3.1); 0 = plain training.
        margin: triplet margin γ (VSE++).
        max_violation: hardest negative (VSE++) instead of the sum over negatives.
        itm_weight: weight of BLIP's image-text matching loss next to its contrastive loss.
        fair_captions: the captions FairSample applies to, one of :data:`FAIR_CAPTIONS`.
        max_violation_after: with ``max_violation``, the epochs that first sum over negatives
            (a warm-up: from random weights the hardest negative collapses), the hardest
            negative from then on (:meth:`for_epoch`).
    """

    fair_alpha: float = 0.0
    margin: float = 0.2
    max_violation: bool = True
    itm_weight: float = 1.0
    fair_captions: str = "neutral"
    max_violation_after: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.fair_alpha <= 1.0:
            raise ValueError(f"fair_alpha must be in [0, 1], got {self.fair_alpha}")
        if self.fair_captions not in FAIR_CAPTIONS:
            raise ValueError(
                f"--fair-captions {self.fair_captions!r} is not one of {', '.join(FAIR_CAPTIONS)}"
            )
        if self.max_violation_after < 0:
            raise ValueError(f"max_violation_after must be >= 0, got {self.max_violation_after}")
        if self.max_violation_after and not self.max_violation:
            raise ValueError(
                "--max-violation-after warms up the hardest negative; it needs --max-violation"
            )

    def for_epoch(self, epoch: int) -> LossConfig:
        """The loss of 0-based ``epoch``: summed over negatives during the first
        ``max_violation_after`` epochs, this config otherwise."""
        if epoch < self.max_violation_after:
            return replace(self, max_violation=False, max_violation_after=0)
        return self

    def fair_applies(
        self, caption_neutral: torch.Tensor, image_gender: torch.Tensor
    ) -> torch.Tensor:
        """``[B]`` bool: the captions whose text->image negatives FairSample balances, from
        each row's ``[B]`` caption-neutral flag and image gender code (:data:`FAIR_CAPTIONS`)."""
        if self.fair_captions == "gendered-images":
            return caption_neutral & (image_gender != GENDER_CODES["neutral"])
        return caption_neutral

    def params(self) -> dict[str, str]:
        return {f"loss.{k}": str(v) for k, v in self.__dict__.items()}


P = ParamSpec("P")
R = TypeVar("R")


def in_fp32(loss: Callable[P, R]) -> Callable[P, R]:
    """Run ``loss`` outside autocast, its floating-point tensor arguments cast to float32 (the
    softmax and hinge terms of a contrastive loss lose too much in bf16 or fp16)."""

    def fp32(value: object) -> object:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.float()
        return value

    @functools.wraps(loss)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        device = next(a for a in args if isinstance(a, torch.Tensor)).device.type
        with torch.autocast(device_type=device, enabled=False):
            return loss(*map(fp32, args), **{k: fp32(v) for k, v in kwargs.items()})

    return wrapper


def same_image(image_ids: torch.Tensor) -> torch.Tensor:
    """``[B]`` ids -> ``[B, B]`` bool, True where rows ``i`` and ``j`` show the same image."""
    return image_ids[:, None] == image_ids[None, :]


def _false_negatives(image_ids: torch.Tensor) -> torch.Tensor:
    """``[B, B]`` bool: same image but not the diagonal (another caption of the positive)."""
    same = same_image(image_ids)
    return same & ~torch.eye(len(image_ids), dtype=torch.bool, device=same.device)


@in_fp32
def contrastive_losses(
    image_emb: torch.Tensor,
    text_emb: torch.Tensor,
    logit_scale: torch.Tensor | float,
    image_ids: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """InfoNCE both ways: ``([B] image->text, [B] text->image)`` cross-entropies.

    Args:
        image_emb: ``[B, D]``, L2-normalised.
        text_emb: ``[B, D]``, L2-normalised; row ``i`` is the caption of image ``i``.
        logit_scale: the temperature's inverse (``exp`` of CLIP's learnable log-scale).
        image_ids: ``[B]``; other captions of the same image are left out of the softmax.
    """
    logits = logit_scale * image_emb @ text_emb.T  # [B images, B texts]
    logits = logits.masked_fill(_false_negatives(image_ids), float("-inf"))
    target = torch.arange(len(logits), device=logits.device)
    i2t = F.cross_entropy(logits, target, reduction="none")
    t2i = F.cross_entropy(logits.T, target, reduction="none")
    return i2t, t2i


@in_fp32
def triplet_losses(
    image_emb: torch.Tensor,
    text_emb: torch.Tensor,
    image_ids: torch.Tensor,
    *,
    margin: float = 0.2,
    max_violation: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hinge triplet loss both ways: ``([B] image->text, [B] text->image)``.

    ``[margin - S(v, c) + S(v, c~)]_+`` for image->text and ``[margin - S(v, c) + S(v~, c)]_+``
    for text->image, with cosine similarity ``S``; the hardest negative of the batch
    (``max_violation``, VSE++) or the sum over all negatives (VSE0).
    """
    scores = image_emb @ text_emb.T  # [B images, B texts]
    positive = scores.diagonal()
    excluded = same_image(image_ids)  # the positive and other captions of the same image
    cost_text = (margin - positive[:, None] + scores).clamp(min=0).masked_fill(excluded, 0.0)
    cost_image = (margin - positive[None, :] + scores).clamp(min=0).masked_fill(excluded, 0.0)
    if max_violation:
        return cost_text.max(dim=1).values, cost_image.max(dim=0).values
    return cost_text.sum(dim=1), cost_image.sum(dim=0)


def _balanced_negatives(
    image_ids: torch.Tensor, image_gender: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[B images, B texts]`` weights of each image as a FairSample negative of each text.

    For text ``j`` the male images (other than ``j``'s) share weight ½ and the female ones ½;
    when one group is absent from the batch the other takes all of it. Also returns ``[B]``
    ``n``: each text's number of gendered negatives (0 where FairSample cannot apply).
    """
    candidates = ~same_image(image_ids)  # [images, texts]
    weights = torch.zeros(candidates.shape, dtype=torch.float32, device=image_ids.device)
    groups = []
    for name in ("male", "female"):
        member = candidates & (image_gender == GENDER_CODES[name])[:, None]
        groups.append((member, member.sum(dim=0)))
    present = sum((count > 0).float() for _, count in groups)  # [texts]: 0, 1 or 2 groups
    for member, count in groups:
        share = torch.where(count > 0, 1.0 / (present.clamp(min=1) * count.clamp(min=1)), 0.0)
        weights += member.float() * share[None, :]
    return weights, sum(count for _, count in groups)


@in_fp32
def fair_triplet_t2i(
    image_emb: torch.Tensor,
    text_emb: torch.Tensor,
    image_ids: torch.Tensor,
    image_gender: torch.Tensor,
    caption_neutral: torch.Tensor,
    *,
    margin: float = 0.2,
    max_violation: bool = True,
) -> torch.Tensor:
    """``[B]`` text->image triplet loss with FairSample (gender paper eq. 6).

    With ``max_violation`` (the paper's SCAN: one negative per caption) a gender-neutral
    caption's loss is eq. 6's ``½·E_male[hinge] + ½·E_female[hinge]`` over the batch's male and
    female images. Summing over negatives (VSE0) it is that expectation times ``n``, the number
    of gendered negatives: a sum, like the plain loss, over as many negatives as the batch has
    gendered images, half of the mass on each gender (an expectation alone would be ``n`` times
    smaller than that sum, and about ``B - 1`` times smaller than the plain one).
    Neutral images are not negatives here. Other captions (and neutral ones in a batch without
    gendered images) keep the plain negatives of :func:`triplet_losses`.
    """
    _, plain = triplet_losses(
        image_emb, text_emb, image_ids, margin=margin, max_violation=max_violation
    )
    scores = image_emb @ text_emb.T
    hinge = (margin - scores.diagonal()[None, :] + scores).clamp(min=0)
    weights, gendered = _balanced_negatives(image_ids, image_gender)
    fair = (hinge * weights).sum(dim=0)
    if not max_violation:
        fair = fair * gendered
    return torch.where(caption_neutral & (gendered > 0), fair, plain)


@in_fp32
def fair_contrastive_t2i(
    image_emb: torch.Tensor,
    text_emb: torch.Tensor,
    logit_scale: torch.Tensor | float,
    image_ids: torch.Tensor,
    image_gender: torch.Tensor,
    caption_neutral: torch.Tensor,
) -> torch.Tensor:
    """``[B]`` text->image InfoNCE with FairSample's gender-balanced negative set.

    For a gender-neutral caption the softmax runs over its image and the batch's male and
    female images, reweighted so that each gender holds half of the negative mass:
    ``-s⁺ + log(e^{s⁺} + n·Σ_v w_v e^{s_v})`` with ``w`` from the FairSample weights (½ per
    gender, spread evenly within it) and ``n`` the number of gendered negatives, so the
    denominator has the scale of the plain loss. Neutral images are not negatives here. Other
    captions keep the plain loss of :func:`contrastive_losses`.
    """
    _, plain = contrastive_losses(image_emb, text_emb, logit_scale, image_ids)
    logits = logit_scale * image_emb @ text_emb.T  # [images, texts]
    weights, gendered = _balanced_negatives(image_ids, image_gender)
    log_w = torch.where(weights > 0, torch.log(weights * gendered[None, :]), -math.inf)
    positive = logits.diagonal()
    terms = torch.cat([positive[None, :], logits + log_w], dim=0)
    fair = torch.logsumexp(terms, dim=0) - positive
    return torch.where(caption_neutral & (gendered > 0), fair, plain)


def mix_fair(plain_t2i: torch.Tensor, fair_t2i: torch.Tensor | None, alpha: float) -> torch.Tensor:
    """``α·fair + (1-α)·plain``; ``α = 0`` returns ``plain_t2i`` itself (no FairSample)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"fair_alpha must be in [0, 1], got {alpha}")
    if alpha == 0.0 or fair_t2i is None:
        return plain_t2i
    return alpha * fair_t2i + (1.0 - alpha) * plain_t2i
