"""Training losses and FairSample on batches with known genders (no Ray)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from xmr.metrics.gender_bias import GENDER_CODES
from xmr.models import create_model
from xmr.models.batch import TrainBatch
from xmr.models.losses import (
    LossConfig,
    contrastive_losses,
    fair_contrastive_t2i,
    fair_triplet_t2i,
    mix_fair,
    triplet_losses,
)
from xmr.train.config import OptimConfig, resolve_config
from xmr.train.optim import lr_factor

M, F_, N = GENDER_CODES["male"], GENDER_CODES["female"], GENDER_CODES["neutral"]


def _embeddings(b: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (
        F.normalize(torch.randn(b, 16, generator=g), dim=-1),
        F.normalize(torch.randn(b, 16, generator=g), dim=-1),
    )


def test_contrastive_matches_cross_entropy_and_masks_other_captions() -> None:
    image, text = _embeddings(4)
    ids = torch.arange(4)
    i2t, t2i = contrastive_losses(image, text, 10.0, ids)
    logits = 10.0 * image @ text.T
    assert torch.allclose(i2t, F.cross_entropy(logits, ids, reduction="none"))
    assert torch.allclose(t2i, F.cross_entropy(logits.T, ids, reduction="none"))
    # rows 2 and 3 show the same image: neither is the other's negative
    same = torch.tensor([0, 1, 2, 2])
    i2t, _ = contrastive_losses(image, text, 10.0, same)
    expected = -logits[2, 2] + torch.logsumexp(logits[2, :3], dim=0)
    assert torch.isclose(i2t[2], expected)


def test_triplet_takes_the_hardest_negative() -> None:
    image, text = _embeddings(5)
    ids = torch.arange(5)
    i2t, t2i = triplet_losses(image, text, ids, margin=0.2)
    s = image @ text.T
    for i in range(5):
        others = [j for j in range(5) if j != i]
        assert torch.isclose(i2t[i], (0.2 - s[i, i] + s[i, others]).clamp(min=0).max())
        assert torch.isclose(t2i[i], (0.2 - s[i, i] + s[others, i]).clamp(min=0).max())
    summed, _ = triplet_losses(image, text, ids, margin=0.2, max_violation=False)
    assert torch.all(summed >= i2t)


def test_fair_triplet_is_half_male_half_female_for_neutral_captions() -> None:
    image, text = _embeddings(6)
    ids = torch.arange(6)
    gender = torch.tensor([M, M, M, F_, N, F_])
    neutral = torch.tensor([True, False, True, True, True, True])
    fair = fair_triplet_t2i(image, text, ids, gender, neutral, margin=0.2)
    s = image @ text.T
    hinge = (0.2 - s.diagonal()[None, :] + s).clamp(min=0)  # [negative image, text]
    # text 0 (its image is male): males {1, 2} share ½, females {3, 5} share ½; neutral 4 unused
    expected = 0.5 * hinge[[1, 2], 0].mean() + 0.5 * hinge[[3, 5], 0].mean()
    assert torch.isclose(fair[0], expected)
    # a gendered caption keeps the plain hardest negative
    _, plain = triplet_losses(image, text, ids, margin=0.2)
    assert torch.isclose(fair[1], plain[1])


def test_fair_triplet_summed_is_a_sum_over_the_gendered_negatives() -> None:
    image, text = _embeddings(6)
    ids = torch.arange(6)
    neutral = torch.ones(6, dtype=torch.bool)
    s = image @ text.T
    hinge = (0.2 - s.diagonal()[None, :] + s).clamp(min=0)  # [negative image, text]
    # text 0: males {1, 2, 3} and the female 5 are its n = 4 gendered negatives, neutral 4 unused
    gender = torch.tensor([M, M, M, M, N, F_])
    fair = fair_triplet_t2i(image, text, ids, gender, neutral, margin=0.2, max_violation=False)
    expected = 4 * (0.5 * hinge[[1, 2, 3], 0].mean() + 0.5 * hinge[5, 0])
    assert torch.isclose(fair[0], expected)
    # balanced genders: the plain sum over the gendered negatives
    balanced = torch.tensor([M, M, F_, M, N, F_])
    fair = fair_triplet_t2i(image, text, ids, balanced, neutral, margin=0.2, max_violation=False)
    assert torch.isclose(fair[0], hinge[[1, 2, 3, 5], 0].sum())


def test_fair_contrastive_balances_the_negative_mass() -> None:
    image, text = _embeddings(5)
    ids = torch.arange(5)
    gender = torch.tensor([N, M, M, M, F_])
    neutral = torch.ones(5, dtype=torch.bool)
    fair = fair_contrastive_t2i(image, text, 10.0, ids, gender, neutral)
    logits = 10.0 * image @ text.T
    # text 0: three male negatives share ½ of the mass, the single female one ½; n = 4
    weights = torch.tensor([1 / 6, 1 / 6, 1 / 6, 1 / 2]) * 4
    denominator = torch.exp(logits[0, 0]) + (weights * torch.exp(logits[1:, 0])).sum()
    assert torch.isclose(fair[0], torch.log(denominator) - logits[0, 0])
    # with balanced genders and uniform weights it is the plain loss over gendered negatives
    balanced = torch.tensor([N, M, F_, M, F_])
    fair = fair_contrastive_t2i(image, text, 10.0, ids, balanced, neutral)
    plain_gendered = torch.logsumexp(logits[:, 0], dim=0) - logits[0, 0]
    assert torch.isclose(fair[0], plain_gendered)


def test_batch_without_gendered_negatives_falls_back_to_plain() -> None:
    image, text = _embeddings(3)
    ids = torch.arange(3)
    gender = torch.full((3,), N)
    neutral = torch.ones(3, dtype=torch.bool)
    _, plain = contrastive_losses(image, text, 10.0, ids)
    assert torch.equal(fair_contrastive_t2i(image, text, 10.0, ids, gender, neutral), plain)


def test_mix_fair() -> None:
    plain, fair = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 5.0])
    assert mix_fair(plain, fair, 0.0) is plain
    assert torch.equal(mix_fair(plain, fair, 1.0), fair)
    assert torch.allclose(mix_fair(plain, fair, 0.4), 0.4 * fair + 0.6 * plain)
    with pytest.raises(ValueError, match="fair_alpha"):
        LossConfig(fair_alpha=1.5)


def _clip_batch(model, genders: list[int], neutral: list[bool]) -> TrainBatch:
    g = torch.Generator().manual_seed(1)
    b = len(genders)
    return TrainBatch(
        pixels=torch.rand(b, 3, model.image_size, model.image_size, generator=g),
        text=model.tokenize([f"a photo of thing {i}" for i in range(b)]),
        image_ids=torch.arange(b),
        image_gender=torch.tensor(genders),
        caption_neutral=torch.tensor(neutral),
    )


def test_clip_objective_fair_alpha_zero_is_plain_training() -> None:
    model = create_model("clip", arch="xmr-tiny", seed=0)
    batch = _clip_batch(model, [M, F_, M, N, F_, M], [True, True, False, True, True, True])
    plain = model.objective(LossConfig())(batch)
    zero = model.objective(LossConfig(fair_alpha=0.0))(batch)
    assert torch.equal(plain["loss"], zero["loss"])
    one = model.objective(LossConfig(fair_alpha=1.0))(batch)
    assert torch.equal(one["loss_i2t"], plain["loss_i2t"])  # image->text is never changed
    assert not torch.isclose(one["loss_t2i"], plain["loss_t2i"])
    one["loss"].backward()
    assert model.module.logit_scale.grad is not None


def test_fair_captions_of_gendered_images_leave_person_less_scenes_plain() -> None:
    """The diagnostic scope: FairSample balances the neutral captions of images with men or
    women only; a neutral caption of a person-less scene (row 3) keeps its plain loss."""
    model = create_model("clip", arch="xmr-tiny", seed=0)
    genders, neutral = [M, F_, M, N, F_, M], [True, True, False, True, True, True]
    batch = _clip_batch(model, genders, neutral)
    scoped = LossConfig(fair_alpha=1.0, fair_captions="gendered-images")
    applies = scoped.fair_applies(torch.tensor(neutral), torch.tensor(genders))
    assert applies.tolist() == [True, True, False, False, True, True]
    assert LossConfig().fair_applies(torch.tensor(neutral), torch.tensor(genders)).tolist() == (
        neutral
    )
    image, text = _embeddings(6)
    ids, gender = torch.arange(6), torch.tensor(genders)
    _, plain = contrastive_losses(image, text, 10.0, ids)
    everywhere = fair_contrastive_t2i(image, text, 10.0, ids, gender, torch.tensor(neutral))
    only = fair_contrastive_t2i(image, text, 10.0, ids, gender, applies)
    assert torch.equal(only[3], plain[3]) and not torch.isclose(everywhere[3], plain[3])
    assert torch.equal(only[[0, 1, 4, 5]], everywhere[[0, 1, 4, 5]])
    configs = (LossConfig(fair_alpha=1.0), scoped)
    both = [model.objective(config)(batch)["loss_t2i"] for config in configs]
    assert not torch.isclose(*both)
    with pytest.raises(ValueError, match="--fair-captions 'persons' is not one of"):
        LossConfig(fair_captions="persons")


def test_the_hardest_negative_waits_for_its_warm_up_epochs() -> None:
    warm = LossConfig(max_violation=True, max_violation_after=2)
    assert [warm.for_epoch(e).max_violation for e in range(4)] == [False, False, True, True]
    assert warm.for_epoch(3) is warm and LossConfig().for_epoch(0) == LossConfig()
    with pytest.raises(ValueError, match="needs --max-violation"):
        LossConfig(max_violation=False, max_violation_after=1)
    with pytest.raises(ValueError, match="max_violation_after must be >= 0"):
        LossConfig(max_violation_after=-1)
    # ToyWorld's VSE++ preset sums; a warm-up asks for the hardest negative after it
    assert not resolve_config("vsepp").loss.max_violation
    config = resolve_config("vsepp", max_violation_after=3)
    assert config.loss.max_violation and config.loss.max_violation_after == 3
    assert resolve_config("vsepp", max_violation=True).loss.max_violation_after == 0
    # runs named before the new loss fields keep their names (hashes from before them); a
    # warm-up or the diagnostic scope is another run
    assert resolve_config("clip").fingerprint() == "88b42893"
    assert resolve_config("vsepp", max_violation=True).fingerprint() == "6133f671"
    assert config.fingerprint() != resolve_config("vsepp", max_violation=True).fingerprint()
    assert resolve_config("clip", fair_captions="gendered-images").fingerprint() != "88b42893"


def test_step_schedule_halves_every_two_epochs_after_warmup() -> None:
    optim = OptimConfig(lr=1.0, step_epochs=2, gamma=0.5)
    assert [lr_factor(s, optim, 10, 100) for s in (0, 19, 20, 40)] == [1.0, 1.0, 0.5, 0.25]
    cosine = OptimConfig(lr=1.0, schedule="cosine", warmup_steps=10)
    assert lr_factor(0, cosine, 10, 110) == pytest.approx(0.1)
    assert lr_factor(10, cosine, 10, 110) == pytest.approx(1.0)
    assert lr_factor(110, cosine, 10, 110) == pytest.approx(0.0)


@pytest.mark.parametrize("loss", [contrastive_losses, triplet_losses])
def test_losses_are_computed_in_fp32_under_autocast(loss) -> None:
    """``--precision bf16|amp``: the embeddings may come out of autocast in bf16, the loss
    itself is float32 (the same value as on the float32 copies of those embeddings)."""
    image, text = (x.bfloat16() for x in _embeddings(6))
    ids = torch.arange(6)
    args = (image, text, 30.0, ids) if loss is contrastive_losses else (image, text, ids)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = loss(*args)
    outside = loss(*(a.float() if a.is_floating_point() else a for a in args[:2]), *args[2:])
    for a, b in zip(inside, outside, strict=True):
        assert a.dtype == torch.float32 and torch.equal(a, b)
