"""The ``blip`` family on ``xmr-tiny-blip`` (random init, CPU, offline) and ITM re-ranking."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from xmr.metrics.gender_bias import GENDER_CODES
from xmr.metrics.ranking import Ranking, rank
from xmr.models import create_model, list_archs, save_checkpoint
from xmr.models.batch import TrainBatch
from xmr.models.blip import CONFIGS, BlipModel, hard_negatives, load_arch
from xmr.models.losses import LossConfig, contrastive_losses
from xmr.retrieval import rerank, topk_similarity
from xmr.toyworld.scene import captions as toyworld

TINY = "xmr-tiny-blip"
TEXTS = ["a man riding a horse on the beach", "two dogs catching a frisbee in a park"]
CAPTIONS = [
    "a man riding a horse on the beach",
    "a horse on the sand by the sea",
    "a person holding a red cup",
    "two dogs chasing a ball on the grass",
    "a woman sitting on a bench with an umbrella",
    "a cat under a wooden table",
]


def _images(n: int) -> list[Image.Image]:
    rng = np.random.default_rng(0)
    modes = [((80, 100, 3), "RGB"), ((64, 64), "L"), ((96, 72, 4), "RGBA")]
    return [
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode=mode)
        for shape, mode in (modes * n)[:n]
    ]


@pytest.fixture(scope="module")
def tiny() -> BlipModel:
    model = create_model("blip", arch=TINY, pretrained="none", seed=0)
    assert isinstance(model, BlipModel)
    return model


@pytest.fixture(scope="module")
def pixels(tiny: BlipModel) -> torch.Tensor:
    return torch.stack([tiny.preprocess(image) for image in _images(6)])


def _batch(tiny: BlipModel, pixels: torch.Tensor, image_ids: list[int]) -> TrainBatch:
    """Six pairs; rows with equal ``image_ids`` share the image (and its pixels)."""
    first = {i: row for row, i in reversed(list(enumerate(image_ids)))}
    genders = ["male", "female", "neutral", "male", "female", "male"]
    return TrainBatch(
        pixels=pixels[[first[i] for i in image_ids]],
        text=tiny.tokenize(CAPTIONS),
        image_ids=torch.tensor(image_ids),
        image_gender=torch.tensor([GENDER_CODES[genders[first[i]]] for i in image_ids]),
        caption_neutral=torch.tensor([False, True, True, True, False, True]),
    )


def test_archs() -> None:
    archs = list_archs("blip")
    assert archs == [
        "blip-itm-base-coco",
        "blip-itm-base-flickr",
        "blip-itm-large-coco",
        "blip-itm-large-flickr",
        TINY,
    ]
    for name in archs[:4]:
        arch = load_arch(name)
        assert arch.repo == f"Salesforce/{name}" and arch.vocab is None
        assert (arch.max_length, arch.enc_token_id) == (35, 30523)
        assert arch.rerank_k == (256 if name.endswith("coco") else 128)
    assert load_arch("blip-itm-large-coco").blip_config().vision_config.num_hidden_layers == 24
    with pytest.raises(ValueError, match=r"unknown blip arch 'xmr-tiny-blp'.*did you mean"):
        create_model("blip", arch="xmr-tiny-blp")


def test_same_seed_same_model(tiny: BlipModel, pixels: torch.Tensor) -> None:
    again = create_model("blip", arch=TINY, seed=0)
    other = create_model("blip", arch=TINY, seed=1)
    for key, value in tiny.state_dict().items():
        assert torch.equal(again.state_dict()[key], value), key
    torch.testing.assert_close(again.encode_images(pixels), tiny.encode_images(pixels))
    assert not torch.allclose(other.encode_texts(TEXTS), tiny.encode_texts(TEXTS))
    assert tiny.module.temp.item() == pytest.approx(0.07)


def test_tokenizer_is_offline_with_the_shipped_vocabulary(tiny: BlipModel) -> None:
    vocab = (CONFIGS / "xmr-tiny-blip-vocab.txt").read_text().splitlines()
    assert {vocab.index(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")} == {
        0,
        100,
        101,
        102,
        103,
    }
    assert len(vocab) == len(set(vocab))
    config = tiny.module.blip.config.text_config
    assert config.vocab_size == len(vocab)
    assert vocab[tiny.arch.enc_token_id] == "[ENC]" and vocab[config.bos_token_id] == "[DEC]"

    tokens = tiny.tokenize(TEXTS)
    assert set(tokens) == {"input_ids", "attention_mask"}
    assert tokens["input_ids"].shape == tokens["attention_mask"].shape == (2, 35)
    assert tokens["input_ids"].dtype == torch.int64
    assert (tokens["input_ids"][:, 0] == 101).all()
    assert tokens["attention_mask"][0].sum() == len(TEXTS[0].split()) + 2  # [CLS] ... [SEP]
    assert tiny.tokenize([" ".join(["dog"] * 100)])["input_ids"].shape == (1, 35)  # truncated

    # Every word ToyWorld's captions use is a whole token (never [UNK], never split).
    words = {w for one, many in toyworld.WORDS.values() for w, _ in one + many}
    words |= {w for one, many in toyworld.PERSON_WORDS.values() for w, _ in one + many}
    words |= {w for roles in toyworld.ROLE_WORDS.values() for w in roles}
    words |= {w for verbs in toyworld.VERBS.values() for w in verbs}
    words |= {w for places in toyworld.PLACES.values() for w in places}
    words |= set(toyworld.NUMBERS.values()) | set(toyworld.CONNECTORS) | set(toyworld.PREFIXES)
    words = {w for phrase in words for w in phrase.split()}
    pieces = tiny.tokenizer.tokenize(" ".join(sorted(words)))
    assert sorted(pieces) == sorted(words)
    assert tiny.tokenizer.tokenize("Zyzzyva!") == [
        "z",
        "##y",
        "##z",
        "##z",
        "##y",
        "##v",
        "##a",
        "!",
    ]


def test_encode_shapes_and_unit_norm(tiny: BlipModel, pixels: torch.Tensor) -> None:
    assert tiny.name == "blip/xmr-tiny-blip"
    assert (tiny.embed_dim, tiny.image_size) == (16, 64)
    assert pixels.shape == (6, 3, 64, 64) and pixels.dtype == torch.float32
    for features, n in ((tiny.encode_images(pixels), 6), (tiny.encode_texts(TEXTS), 2)):
        assert features.shape == (n, 16) and features.dtype == torch.float32
        torch.testing.assert_close(features.norm(dim=-1), torch.ones(n))


def test_embeddings_and_itm_match_transformers(tiny: BlipModel, pixels: torch.Tensor) -> None:
    tokens = tiny.tokenize(TEXTS)
    blip = tiny.module.blip
    with torch.inference_mode():
        cosine = blip(
            input_ids=tokens["input_ids"],
            pixel_values=pixels[:2],
            attention_mask=tokens["attention_mask"],
            use_itm_head=False,
        ).itm_score
        # BLIP's ITM input starts with [ENC]; transformers' forward takes the ids as given.
        enc_ids = tokens["input_ids"].clone()
        enc_ids[:, 0] = tiny.arch.enc_token_id
        itm = blip(
            input_ids=enc_ids, pixel_values=pixels[:2], attention_mask=tokens["attention_mask"]
        ).itm_score
    ours = tiny.encode_images(pixels[:2]) @ tiny.encode_texts(TEXTS).T
    torch.testing.assert_close(ours, cosine)
    torch.testing.assert_close(tiny.itm_logits(pixels[:2], tokens), itm[:, 1])


def test_local_folder_pretrained(tiny: BlipModel, pixels: torch.Tensor, tmp_path: Path) -> None:
    tiny.module.blip.save_pretrained(tmp_path / "tiny")
    loaded = create_model("blip", arch=TINY, pretrained=str(tmp_path / "tiny"), seed=5)
    torch.testing.assert_close(loaded.encode_images(pixels), tiny.encode_images(pixels))
    torch.testing.assert_close(loaded.encode_texts(TEXTS), tiny.encode_texts(TEXTS))
    tokens = tiny.tokenize(TEXTS)
    torch.testing.assert_close(
        loaded.itm_logits(pixels[:2], tokens), tiny.itm_logits(pixels[:2], tokens)
    )


def test_bad_pretrained_errors(tiny: BlipModel, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        create_model("blip", arch=TINY, pretrained=str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"no config.json.*xmr-tiny-blip"):
        create_model("blip", arch=TINY, pretrained=str(tmp_path / "empty"))
    tiny.module.blip.save_pretrained(tmp_path / "other")
    config = json.loads((tmp_path / "other" / "config.json").read_text())
    config["text_config"]["num_hidden_layers"] = 3
    (tmp_path / "other" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"not a blip 'xmr-tiny-blip'.*num_hidden_layers: 3"):
        create_model("blip", arch=TINY, pretrained=str(tmp_path / "other"))
    with pytest.raises(ValueError, match=r"no Hub weights.*--pretrained none"):
        create_model("blip", arch=TINY, pretrained="hub")
    with pytest.raises(ValueError, match=r"neither 'hub'.*nor an existing folder"):
        create_model("blip", arch=TINY, pretrained="openai")


def test_unreachable_hub_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # fail at once, not after retries
    with pytest.raises(RuntimeError, match=r"Salesforce/blip-itm-base-coco.*--pretrained none"):
        create_model("blip", arch="blip-itm-base-coco", pretrained="hub")


def test_checkpoint_round_trip(pixels: torch.Tensor, tmp_path: Path) -> None:
    trained = create_model("blip", arch=TINY, seed=3)
    with torch.no_grad():
        trained.module.temp.fill_(0.05)
    path = save_checkpoint(tmp_path / "model.pt", trained)
    loaded = create_model("blip", arch=TINY, checkpoint=path, seed=0)
    assert loaded.module.temp.item() == pytest.approx(0.05)
    torch.testing.assert_close(loaded.encode_images(pixels), trained.encode_images(pixels))
    torch.testing.assert_close(loaded.encode_texts(TEXTS), trained.encode_texts(TEXTS))


def test_objective_forward_backward(tiny: BlipModel, pixels: torch.Tensor) -> None:
    model = create_model("blip", arch=TINY, seed=0)
    objective = model.objective(LossConfig(fair_alpha=0.5, itm_weight=0.5), seed=1)
    assert any(m is model.module for m in objective.modules())
    model.module.train()
    with torch.no_grad():
        model.module.temp.fill_(0.9)  # clamped to BLIP's maximum before the step
    out = objective(_batch(model, pixels, [0, 0, 1, 2, 3, 3]))
    assert set(out) == {"loss", "loss_itc", "loss_itm"}
    assert model.module.temp.item() == pytest.approx(0.5)
    assert out["loss"].item() == pytest.approx(out["loss_itc"].item() + 0.5 * out["loss_itm"])
    assert not out["loss_itc"].requires_grad and not out["loss_itm"].requires_grad
    out["loss"].backward()
    blip = model.module.blip
    for param in (
        model.module.temp,
        blip.vision_model.embeddings.patch_embedding.weight,
        blip.text_encoder.embeddings.word_embeddings.weight,
        blip.text_encoder.encoder.layer[0].crossattention.self.query.weight,
        blip.itm_head.weight,
    ):
        assert param.grad is not None and torch.isfinite(param.grad).all()
        assert param.grad.abs().sum() > 0


def test_objective_is_reproducible_with_its_seed(tiny: BlipModel, pixels: torch.Tensor) -> None:
    batch = _batch(tiny, pixels, [0, 1, 2, 3, 4, 5])
    losses = {}
    for seed in (0, 0, 1):
        objective = tiny.objective(LossConfig(), seed=seed)
        with torch.no_grad():
            losses.setdefault(seed, []).append(
                [objective(batch)["loss_itm"].item() for _ in range(2)]
            )
    assert losses[0][0] == losses[0][1]
    assert losses[0][0] != losses[1][0]


def test_itc_without_fairsample_is_plain_infonce(tiny: BlipModel, pixels: torch.Tensor) -> None:
    batch = _batch(tiny, pixels, [0, 0, 1, 2, 3, 4])
    with torch.no_grad():
        plain = tiny.objective(LossConfig(fair_alpha=0.0, itm_weight=0.0))(batch)
        fair = tiny.objective(LossConfig(fair_alpha=1.0, itm_weight=0.0))(batch)
        image = F.normalize(tiny.module.image_embedding(tiny.module.vision_states(batch.pixels)))
        text = F.normalize(tiny.module.text_embedding(**batch.text))
        i2t, t2i = contrastive_losses(image, text, 1 / 0.07, batch.image_ids)
    torch.testing.assert_close(plain["loss_itc"], (i2t.mean() + t2i.mean()) / 2)
    assert plain["loss"] == plain["loss_itc"] and plain["loss_itm"] == 0
    assert not torch.isclose(fair["loss_itc"], plain["loss_itc"])


def test_hard_negatives_follow_the_softmax_and_skip_the_same_image() -> None:
    image_ids = torch.tensor([0, 0, 1, 2, 2, 3])
    similarity = torch.randn(6, 6, generator=torch.Generator().manual_seed(0))
    generator = torch.Generator().manual_seed(0)
    draws = [hard_negatives(similarity, image_ids, generator) for _ in range(1500)]
    neg_text = torch.stack([d[0] for d in draws])  # [draws, images]
    neg_image = torch.stack([d[1] for d in draws])  # [draws, texts]
    for negatives in (neg_text, neg_image):
        assert (image_ids[negatives] != image_ids).all()
    same = image_ids[:, None] == image_ids[None, :]
    expected = torch.softmax(similarity.masked_fill(same, -torch.inf), dim=1)
    observed = F.one_hot(neg_text, 6).float().mean(dim=0)
    torch.testing.assert_close(observed, expected, atol=0.04, rtol=0)
    again = hard_negatives(similarity, image_ids, torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(again, draws[0], strict=True))
    # One image only: nothing to draw.
    none = hard_negatives(similarity[:2, :2], torch.tensor([4, 4]), generator)
    assert all((n == -1).all() for n in none)


def test_objective_with_one_image_has_no_negatives(tiny: BlipModel, pixels: torch.Tensor) -> None:
    out = tiny.objective(LossConfig())(_batch(tiny, pixels, [7] * 6))
    assert torch.isfinite(out["loss"])


def _ranking() -> Ranking:
    """Two queries over five gallery items; dyadic scores, so sums are exact in float32."""
    scores = np.array([[0.875, 0.125, 0.5, 0.25, 0.75], [0.25, 0.5, 0.5, 0.875, 0.0]], np.float32)
    return rank(scores, k=5)


def _first_stage(ranking: Ranking, q: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The first-stage score of each pair (``q[i]``, ``g[i]``)."""
    dense = np.empty((ranking.num_queries, ranking.num_gallery), np.float32)
    np.put_along_axis(dense, ranking.indices, ranking.scores, axis=1)
    return dense[q, g]


def test_rerank_orders_the_top_k_by_pair_plus_first_stage_score() -> None:
    ranking = _ranking()
    bonus = np.array([[0.0, 5.0, 0.25, 0.0, 0.0], [1.0, 0.0, -0.5, 0.0, 9.0]], np.float32)
    calls = []

    def score_pairs(q: np.ndarray, g: np.ndarray) -> np.ndarray:
        calls.append(len(q))
        return bonus[q, g]

    out = rerank(ranking, score_pairs, k=3)
    assert out.num_gallery == 5 and out.k == 3 and calls == [6]
    # Query 0: first-stage top 3 = 0 (0.875), 4 (0.75), 2 (0.5); final 0.875, 0.75, 0.75: the
    # tie goes to gallery 2 (lower index); gallery 1 (+5) is not a candidate.
    np.testing.assert_array_equal(out.indices[0], [0, 2, 4])
    np.testing.assert_array_equal(out.scores[0], [0.875, 0.75, 0.75])
    # Query 1: top 3 = 3 (0.875), 1 (0.5), 2 (0.5) -> 0.875, 0.5, 0.0.
    np.testing.assert_array_equal(out.indices[1], [3, 1, 2])
    np.testing.assert_array_equal(out.scores[1], [0.875, 0.5, 0.0])
    for row in range(2):
        assert set(out.indices[row]) == set(ranking.top(3)[row])
    calls.clear()
    small = rerank(ranking, score_pairs, k=3, pairs_per_call=1)  # one query per call
    assert calls == [3, 3]
    np.testing.assert_array_equal(small.indices, out.indices)


def test_rerank_ties_go_to_the_lower_gallery_index() -> None:
    ranking = _ranking()
    out = rerank(ranking, lambda q, g: 1.0 - _first_stage(ranking, q, g), k=5)  # all 1.0
    np.testing.assert_array_equal(out.indices, [[0, 1, 2, 3, 4]] * 2)
    np.testing.assert_array_equal(out.scores, np.ones((2, 5), np.float32))


def test_rerank_depth_and_errors() -> None:
    ranking = _ranking()
    zero = lambda q, g: np.zeros(len(q))  # noqa: E731
    assert rerank(ranking, zero, k=50).k == 5  # k beyond the gallery: all of it
    partial = rank(np.array([[0.3, 0.2, 0.1]]), k=2)
    with pytest.raises(ValueError, match="holds only the top 2"):
        rerank(partial, zero, k=3)
    with pytest.raises(ValueError, match="has no first-stage scores"):
        rerank(Ranking(ranking.indices, 5), zero, k=2)
    with pytest.raises(ValueError, match="returned shape"):
        rerank(ranking, lambda q, g: np.zeros(1), k=2)
    with pytest.raises(ValueError, match="NaN"):
        rerank(ranking, lambda q, g: np.full(len(q), np.nan), k=2)


@pytest.mark.parametrize("direction", ["i2t", "t2i"])
def test_blip_pair_scorer_reranks_with_itm(tiny: BlipModel, direction: str) -> None:
    images = _images(5)
    image_emb = tiny.encode_images(torch.stack([tiny.preprocess(i) for i in images]))
    text_emb = tiny.encode_texts(CAPTIONS)
    queries, gallery = (image_emb, text_emb) if direction == "i2t" else (text_emb, image_emb)
    itc = topk_similarity(queries, gallery, k=4)
    score_pairs = tiny.pair_scorer(images, CAPTIONS, direction, image_batch=2, pair_batch=3)
    out = rerank(itc, score_pairs, k=3)
    # Reference: one pair at a time through itm_logits.
    for q in range(itc.num_queries):
        for g, final in zip(out.indices[q], out.scores[q], strict=True):
            image, text = (q, g) if direction == "i2t" else (g, q)
            pixels = tiny.preprocess(images[image])[None]
            itm = tiny.itm_logits(pixels, tiny.tokenize([CAPTIONS[text]])).item()
            cosine = (image_emb[image] @ text_emb[text]).item()
            assert final == pytest.approx(itm + cosine, abs=1e-5)
        assert set(out.indices[q]) == set(itc.top(3)[q])
    with pytest.raises(ValueError, match="direction"):
        tiny.pair_scorer(images, CAPTIONS, "both")  # type: ignore[arg-type]
