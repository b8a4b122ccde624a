"""The ``vsepp`` family on its tiny CPU archs (random init): vocabulary, encoders, checkpoints,
objective. The paper's archs are only built on the meta device (shapes, no weights)."""

from __future__ import annotations

import urllib.error
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from xmr.metrics.gender_bias import GENDER_CODES
from xmr.models import (
    CheckpointError,
    Corpus,
    ModelSpec,
    create_model,
    list_archs,
    save_checkpoint,
    vsepp,
)
from xmr.models.batch import TrainBatch
from xmr.models.losses import LossConfig, triplet_losses
from xmr.models.vocabulary import Vocabulary
from xmr.models.vsepp import END, PAD, SPECIALS, START, UNK, VseppModel, word_vocabulary

TINY = ["xmr-tiny-vgg", "xmr-tiny-resnet"]
CAPTIONS = [
    "A dog catching a red frisbee on the grass.",
    "Two people riding horses on a beach",
    "A woman holding a cup of coffee",
    "A man riding a bicycle down the street",
    "A person sitting on a bench with a dog",
    "A dog and a frisbee in the park",
]
CORPUS = Corpus(CAPTIONS * 4)  # every word 4+ times: the tiny archs' min_word_count is 4
TEXTS = ["a dog catching a frisbee", "people riding horses on the beach at sunset"]


def _images(n: int = 3) -> list[Image.Image]:
    rng = np.random.default_rng(0)
    modes = [((80, 100, 3), "RGB"), ((64, 64), "L"), ((96, 72, 4), "RGBA")]
    return [
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode=mode)
        for shape, mode in (modes * n)[:n]
    ]


@pytest.fixture(scope="module", params=TINY)
def tiny(request: pytest.FixtureRequest) -> VseppModel:
    return create_model("vsepp", arch=request.param, corpus=CORPUS, seed=0)


def _batch(model: VseppModel) -> TrainBatch:
    """6 rows, 4 images (two shown twice), both genders, neutral and gendered captions."""
    images = _images(4)
    image_ids = torch.tensor([0, 0, 1, 2, 2, 3])
    captions = [
        "a person with a dog",  # neutral
        "a man with a dog",
        "a woman holding a cup",
        "a man riding a bicycle",
        "a person riding a bicycle",  # neutral
        "people on a beach",  # neutral
    ]
    gender = [GENDER_CODES[g] for g in ("male", "male", "female", "male", "male", "female")]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        pixels = torch.stack([model.train_transform(images[i]) for i in image_ids.tolist()])
    return TrainBatch(
        pixels=pixels,
        text=model.tokenize(captions),
        image_ids=image_ids,
        image_gender=torch.tensor(gender),
        caption_neutral=torch.tensor([True, False, False, False, True, True]),
    )


def test_archs_hold_the_papers_and_the_tiny_ones() -> None:
    archs = list_archs("vsepp")
    assert {"vgg19", "resnet152", *TINY} <= set(archs) and archs == sorted(archs)
    assert vsepp.list_archs() == archs
    for arch, dim in (("vgg19", 4096), ("resnet152", 2048)):
        config = vsepp.load_config(arch)
        assert (config.embed_dim, config.word_dim, config.min_word_count) == (1024, 300, 4)
        assert config.image_size == 224
        with torch.device("meta"):  # the real shapes, no weights allocated or downloaded
            net = vsepp.VseppNet(config, vocab_size=10)
        assert net.image.feature_dim == dim
        assert tuple(net.image.fc.weight.shape) == (1024, dim)
        assert tuple(net.text.embed.weight.shape) == (10, 300)
        assert net.text.rnn.bidirectional and isinstance(net.text.proj, torch.nn.Identity)
    assert vsepp.pretrained_tags("vgg19") == ["IMAGENET1K_V1"]
    assert "IMAGENET1K_V1" in vsepp.pretrained_tags("resnet152")
    assert vsepp.pretrained_tags("xmr-tiny-vgg") == []


def test_config_files_are_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = (vsepp.CONFIGS / "xmr-tiny-vgg.json").read_text()
    (tmp_path / "typo.json").write_text(good.replace('"word_dim"', '"word_dims"'))
    monkeypatch.setattr(vsepp, "CONFIGS", tmp_path)
    with pytest.raises(ValueError, match=r"typo\.json.*unknown fields \['word_dims'\].*word_dim"):
        vsepp.load_config("typo")
    with pytest.raises(ValueError, match=r"unknown vsepp arch 'nope'.*\['typo'\]"):
        vsepp.load_config("nope")


def test_word_vocabulary_from_captions() -> None:
    captions = ["The dog runs.", "A dog sits", "a Dog, a cat", "the cat", "a bird"]
    vocab = word_vocabulary(captions, min_count=2)
    # specials first, then by count (a: 3, dog: 3, cat: 2, the: 2), ties alphabetical
    assert vocab.tokens == (*SPECIALS, "a", "dog", "cat", "the")
    assert (PAD, START, END, UNK) == (0, 1, 2, 3) and vocab.unknown == UNK
    assert vocab.id("<pad>") == PAD and vocab.id("<unk>") == UNK
    assert vocab.id("bird") == UNK and vocab.id("runs") == UNK  # once only: below min_count
    assert vocab.ids(vsepp.word_tokenize("The DOG, a zebra")) == [
        vocab.id("the"), vocab.id("dog"), UNK, vocab.id("a"), UNK,
    ]  # fmt: skip
    assert word_vocabulary(reversed(captions), min_count=2) == vocab  # order-free
    assert word_vocabulary(captions, min_count=1).tokens[-3:] == ("bird", "runs", "sits")
    with pytest.raises(ValueError, match="no word occurs 9 times"):
        word_vocabulary(captions, min_count=9)
    with pytest.raises(ValueError, match="without captions"):
        word_vocabulary([], min_count=1)
    with pytest.raises(ValueError, match="starts with"):
        Vocabulary(["dog", "<pad>"], SPECIALS)
    with pytest.raises(ValueError, match="repeated"):
        Vocabulary([*SPECIALS, "dog", "dog"], SPECIALS)


def test_tokenize_pads_truncates_and_marks_ends(tiny: VseppModel) -> None:
    length = tiny.config.max_length
    long = " ".join(["dog"] * 100)
    ids = tiny.tokenize(["a dog", "", long, "zebra"])
    assert ids.shape == (4, length) and ids.dtype == torch.int64
    dog, a = tiny.vocab.id("dog"), tiny.vocab.id("a")
    assert ids[0, :4].tolist() == [START, a, dog, END] and not ids[0, 4:].any()
    assert ids[1, :3].tolist() == [START, END, PAD]
    assert ids[2].tolist() == [START, *[dog] * (length - 2), END]  # truncated, still closed
    assert ids[3, :3].tolist() == [START, UNK, END]
    assert tiny.tokenize([]).shape == (0, length)


def test_encode_shapes_and_unit_norm(tiny: VseppModel) -> None:
    assert (tiny.embed_dim, tiny.image_size) == (64, 64)
    pixels = torch.stack([tiny.preprocess(image) for image in _images()])
    assert pixels.shape == (3, 3, 64, 64) and pixels.dtype == torch.float32
    augmented = []
    for _ in range(2):
        torch.manual_seed(5)  # the trainer seeds torch: the augmentation follows
        augmented.append(torch.stack([tiny.train_transform(image) for image in _images()]))
    assert augmented[0].shape == (3, 3, 64, 64) and torch.equal(*augmented)
    for features, n in ((tiny.encode_images(pixels), 3), (tiny.encode_texts(TEXTS), 2)):
        assert features.shape == (n, 64) and features.dtype == torch.float32
        assert not features.requires_grad
        torch.testing.assert_close(features.norm(dim=-1), torch.ones(n))
    assert tiny.name.startswith("vsepp/xmr-tiny-")


def test_text_embedding_is_the_mean_of_both_directions_over_true_lengths(
    tiny: VseppModel,
) -> None:
    text = tiny.module.text
    ids = tiny.tokenize(["a dog", "a man riding a bicycle down the street"])
    with torch.no_grad():
        batched = text(ids)
        for i, n in enumerate((ids != PAD).sum(dim=1).tolist()):
            _, hidden = text.rnn(text.embed(ids[i : i + 1, :n]))  # unpadded, alone
            expected = text.proj((hidden[-2] + hidden[-1]) / 2)
            torch.testing.assert_close(batched[i], expected[0])


def test_same_seed_same_model() -> None:
    rng_before = torch.get_rng_state()
    a = create_model("vsepp", arch="xmr-tiny-vgg", corpus=CORPUS, seed=3)
    b = create_model("vsepp", arch="xmr-tiny-vgg", corpus=CORPUS, seed=3)
    c = create_model("vsepp", arch="xmr-tiny-vgg", corpus=CORPUS, seed=4)
    assert torch.equal(torch.get_rng_state(), rng_before)
    for key, value in a.state_dict().items():
        assert torch.equal(value, b.state_dict()[key]), key
    assert not torch.equal(a.state_dict()["text.embed.weight"], c.state_dict()["text.embed.weight"])
    assert a.vocab == b.vocab


@pytest.mark.parametrize("arch", TINY)
def test_checkpoint_round_trip_needs_no_corpus(tmp_path: Path, arch: str) -> None:
    trained = create_model("vsepp", arch=arch, corpus=CORPUS, seed=7)
    path = save_checkpoint(tmp_path / "model.pt", trained, {"epoch": 1})
    saved = torch.load(path, map_location="cpu", weights_only=True)
    assert saved["vocab"] == list(trained.vocab.tokens)

    loaded = create_model(ModelSpec("vsepp", arch, None, checkpoint=path), seed=0)
    assert loaded.vocab == trained.vocab
    pixels = torch.stack([trained.preprocess(image) for image in _images()])
    assert torch.equal(loaded.encode_images(pixels), trained.encode_images(pixels))
    assert torch.equal(loaded.encode_texts(TEXTS), trained.encode_texts(TEXTS))

    # The checkpoint's vocabulary wins over a corpus: its weights are tied to it.
    other = Corpus(["completely different words here"] * 4)
    again = create_model(ModelSpec("vsepp", arch, None, checkpoint=path), corpus=other)
    assert again.vocab == trained.vocab


def test_a_vocabulary_is_required(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"needs a word vocabulary.*xmr train --model vsepp"):
        create_model("vsepp", arch="xmr-tiny-vgg")
    model = create_model("vsepp", arch="xmr-tiny-vgg", corpus=CORPUS)
    raw = tmp_path / "raw.pt"  # a bare state dict: weights without their vocabulary
    torch.save(model.state_dict(), raw)
    with pytest.raises(CheckpointError, match=r"raw\.pt holds no VSE\+\+ vocabulary"):
        create_model("vsepp", arch="xmr-tiny-vgg", checkpoint=raw)
    loaded = create_model("vsepp", arch="xmr-tiny-vgg", checkpoint=raw, corpus=CORPUS)
    assert torch.equal(loaded.encode_texts(TEXTS), model.encode_texts(TEXTS))


def test_pretrained_tags_and_offline_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"unknown pretrained tag 'bogus'.*IMAGENET1K_V1"):
        create_model("vsepp", arch="vgg19", pretrained="bogus", corpus=CORPUS)
    with pytest.raises(ValueError, match=r"no pretrained weights.*--pretrained none"):
        create_model("vsepp", arch="xmr-tiny-resnet", pretrained="IMAGENET1K_V1", corpus=CORPUS)

    def offline(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", offline)
    with pytest.raises(RuntimeError, match=r"could not be fetched.*--pretrained none.*checkpoint"):
        create_model("vsepp", arch="resnet152", pretrained="IMAGENET1K_V2", corpus=CORPUS)


def test_objective_forward_backward_with_repeated_images(tiny: VseppModel) -> None:
    batch = _batch(tiny)
    objective = tiny.objective(LossConfig(fair_alpha=0.5))
    assert objective.model is tiny.module
    objective.train()
    out = objective(batch)
    assert set(out) == {"loss", "loss_i2t", "loss_t2i"}
    assert out["loss"].ndim == 0 and torch.isfinite(out["loss"]) and out["loss"] > 0
    assert not out["loss_i2t"].requires_grad and not out["loss_t2i"].requires_grad
    torch.testing.assert_close(out["loss"].detach(), out["loss_i2t"] + out["loss_t2i"])
    objective.zero_grad()
    out["loss"].backward()
    net = tiny.module
    for param in (net.image.fc.weight, net.text.embed.weight, net.text.rnn.weight_hh_l0_reverse):
        assert param.grad is not None and param.grad.abs().sum() > 0
    assert any(
        p.grad is not None and p.grad.abs().sum() > 0 for p in net.image.backbone.parameters()
    )
    objective.zero_grad()
    tiny.module.eval()


def test_fair_alpha_zero_is_the_plain_triplet_loss(tiny: VseppModel) -> None:
    batch = _batch(tiny)
    tiny.module.eval()  # no dropout: the runs below see the same network
    plain = tiny.objective(LossConfig())(batch)
    with torch.no_grad():
        image = F.normalize(tiny.module.encode_image(batch.pixels), dim=-1)
        text = F.normalize(tiny.module.encode_text(batch.text), dim=-1)
    i2t, t2i = triplet_losses(image, text, batch.image_ids, margin=0.2, max_violation=True)
    assert torch.equal(plain["loss"].detach(), i2t.sum() + t2i.sum())
    assert torch.equal(plain["loss_t2i"], t2i.sum())

    fair = tiny.objective(LossConfig(fair_alpha=1.0))(batch)
    assert torch.equal(fair["loss_i2t"], plain["loss_i2t"])  # FairSample is text->image only
    assert not torch.equal(fair["loss_t2i"], plain["loss_t2i"])
    summed = tiny.objective(LossConfig(max_violation=False, margin=0.5))(batch)
    assert summed["loss"] > plain["loss"]  # every violating negative, larger margin


def test_a_few_adam_steps_reduce_the_loss() -> None:
    # From random init the hardest-negative loss collapses to 2·B·margin (all scores equal):
    # train with the sum over negatives (VSE0) and check the hardest negatives came apart too.
    model = create_model("vsepp", arch="xmr-tiny-vgg", corpus=CORPUS, seed=0)
    batch = _batch(model)
    summed = model.objective(LossConfig(max_violation=False))
    hardest = model.objective(LossConfig())
    optimizer = torch.optim.Adam(summed.parameters(), lr=1e-3)
    model.module.eval()  # deterministic steps on the fixed batch
    with torch.no_grad():
        before = summed(batch)["loss"].item()
    for _ in range(30):
        optimizer.zero_grad()
        summed(batch)["loss"].backward()
        optimizer.step()
    with torch.no_grad():
        after = summed(batch)["loss"].item()
        collapsed = 2 * len(batch) * hardest.loss.margin
        assert hardest(batch)["loss"].item() < 0.5 * collapsed
    assert after < 0.1 * before
