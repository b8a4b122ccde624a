"""The ``eiclip`` family on ``xmr-tiny`` (random init, CPU) and the e-commerce product retrieval
protocols (full candidate set, Sample 100 within the sub-category) on a tiny ToyWorld shop and
the Fashion-Gen fixture."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F
from fashiongen_fixture import write_fashiongen
from PIL import Image

from xmr.data import read_dataset
from xmr.data.fashiongen import read_fashiongen, read_product_ids
from xmr.data.records import ImageRecord
from xmr.eval.product_retrieval import (
    ProductSet,
    ProductTextEncoder,
    candidate_recall,
    encode_images,
    full_recall,
    product_retrieval,
    sample_candidates,
)
from xmr.metrics import summed_recall
from xmr.metrics.gender_bias import GENDER_CODES
from xmr.models import CheckpointError, Corpus, ModelSpec, create_model, save_checkpoint
from xmr.models.batch import TrainBatch
from xmr.models.eiclip import ENTITY_RESERVED, UNKNOWN, EiClipModel, entity_vocabularies
from xmr.models.losses import LossConfig, contrastive_losses
from xmr.models.vocabulary import Vocabulary
from xmr.toyworld import ShopConfig, generate
from xmr.train.data import PAIR_SCHEMA, collate

DESCRIPTIONS = [
    "Golden Goose low-top leather sneakers in white.",
    "Canada Goose down bomber jacket in black.",
    "Horse wool crew-neck sweater in navy.",
    "Dog suede boots in brown.",
    "Navy cotton trousers in red.",
    "Long sleeve t-shirt in grey.",
]
ENTITIES = {
    "brand": ["Golden Goose", "canada goose", "horse", "dog", "navy", "golden  goose"],
    "subcategory": ["sneaker", "bomber", "sweater", "boot", "trousers", ""],
    "season": ["ss2024", "fw2024", "fw2024", "ss2024", "ss2024", "fw2024"],
}
CORPUS = Corpus(DESCRIPTIONS * 2, {g: v * 2 for g, v in ENTITIES.items()})


def _images(n: int) -> list[Image.Image]:
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (72, 80, 3), dtype=np.uint8)) for _ in range(n)]


@pytest.fixture(scope="module")
def tiny() -> EiClipModel:
    return create_model("eiclip", arch="xmr-tiny", corpus=CORPUS, seed=0)


def _batch(model: EiClipModel, entities: dict[str, list[str]] | None = ENTITIES) -> TrainBatch:
    """6 rows, 5 images (image 0 shown twice), both genders, neutral and gendered captions."""
    image_ids = torch.tensor([0, 0, 1, 2, 3, 4])
    images = _images(5)
    pixels = torch.stack([model.preprocess(images[i]) for i in image_ids.tolist()])
    gender = [GENDER_CODES[g] for g in ("male", "male", "female", "male", "female", "neutral")]
    return TrainBatch(
        pixels=pixels,
        text=model.tokenize(DESCRIPTIONS),
        image_ids=image_ids,
        image_gender=torch.tensor(gender),
        caption_neutral=torch.tensor([True, True, False, True, True, True]),
        entities=model.entity_ids(entities) if entities else {},
    )


def _boosted(model: EiClipModel) -> EiClipModel:
    """A copy whose entity terms are as large as the description's (so checks are not vacuous)."""
    model = copy.deepcopy(model)
    with torch.no_grad():
        for encoder in model.module.entity.values():
            encoder.embedding.weight.mul_(50.0)
        for gate in model.module.gate.values():
            gate.weight.mul_(20.0)
    return model


# ---------------------------------------------------------------------------------------------
# Model


def test_same_seed_same_model_and_shapes(tiny: EiClipModel) -> None:
    again = create_model("eiclip", arch="xmr-tiny", corpus=CORPUS, seed=0)
    other = create_model("eiclip", arch="xmr-tiny", corpus=CORPUS, seed=1)
    state, same, diff = tiny.state_dict(), again.state_dict(), other.state_dict()
    assert all(torch.equal(state[k], same[k]) for k in state)
    assert not torch.equal(
        state["entity.brand.embedding.weight"], diff["entity.brand.embedding.weight"]
    )
    assert tiny.name == "eiclip/xmr-tiny" and tiny.groups == ("brand", "season", "subcategory")
    pixels = torch.stack([tiny.preprocess(image) for image in _images(2)])
    image = tiny.encode_images(pixels)
    text = tiny.encode_product_texts(DESCRIPTIONS[:2], {g: v[:2] for g, v in ENTITIES.items()})
    assert image.shape == text.shape == (2, 128)
    assert torch.allclose(text.norm(dim=-1), torch.ones(2), atol=1e-5)
    # text_features is the description alone (generic evaluation): no entity enters it.
    desc = F.normalize(tiny.text_features(DESCRIPTIONS[:2]), dim=-1)
    assert torch.allclose(tiny.encode_texts(DESCRIPTIONS[:2]), desc.detach(), atol=1e-6)


def test_entity_vocabularies_hold_whole_strings_from_the_corpus(tiny: EiClipModel) -> None:
    brand = tiny.vocabularies["brand"]
    # Whole normalised strings, most frequent first, ties alphabetical; "" (unknown) is id 0.
    assert brand.tokens == ("", "golden goose", "canada goose", "dog", "horse", "navy")
    assert brand.unknown == UNKNOWN == brand.id("") == brand.id("golden") == brand.id("goose")
    looked_up = tiny.entity_ids({"brand": ["Golden\u00a0GOOSE ", "golden goose", "GOOSE", ""]})
    assert looked_up["brand"].tolist() == [1, 1, UNKNOWN, UNKNOWN]  # normalised, then looked up
    ids = tiny.entity_ids({"brand": ["dog", "gucci"], "gender": ["men", "women"]})
    assert set(ids) == set(tiny.groups)  # unknown groups ignored, missing ones all unknown
    assert ids["brand"].tolist() == [3, 0] and ids["brand"].dtype == torch.int64
    assert ids["season"].tolist() == ids["subcategory"].tolist() == [UNKNOWN, UNKNOWN]
    assert tiny.entity_ids({}) == {}
    with pytest.raises(ValueError, match="different lengths"):
        tiny.entity_ids({"brand": ["dog"], "season": ["ss2024", "fw2024"]})
    with pytest.raises(ValueError, match=r"group 'brand': expected \[2\], got \[1\]"):
        tiny.encode_product_texts(DESCRIPTIONS[:2], {"brand": ["dog"]})

    vocab = entity_vocabularies(CORPUS, min_count=4)  # only golden goose (x4) and the seasons
    assert vocab["brand"].tokens == ("", "golden goose")
    assert vocab["season"].tokens == ("", "fw2024", "ss2024")
    assert "subcategory" not in vocab  # no sub-category seen 4 times: the group is left out
    with pytest.raises(ValueError, match="needs entity metadata"):
        entity_vocabularies(Corpus(DESCRIPTIONS), 1)
    with pytest.raises(ValueError, match=r"starts with \[''\]"):
        Vocabulary(["dog", ""], ENTITY_RESERVED)
    with pytest.raises(ValueError, match="needs entity vocabularies"):
        create_model("eiclip", arch="xmr-tiny")


def test_checkpoint_round_trip_keeps_vocabularies_and_outputs(
    tiny: EiClipModel, tmp_path: Path
) -> None:
    path = save_checkpoint(tmp_path / "eiclip.pt", tiny, {"epoch": 1})
    other = Corpus(["A red cap."], {"brand": ["arvo"], "colour": ["red"]})
    # The checkpoint's vocabularies win over a corpus: its ids are the ones its weights know.
    loaded = create_model(ModelSpec.from_checkpoint(path), corpus=other, seed=7)
    assert loaded.vocabularies == tiny.vocabularies and loaded.entity_dim == tiny.entity_dim
    entities = {g: v[:3] for g, v in ENTITIES.items()}
    assert torch.equal(
        loaded.encode_product_texts(DESCRIPTIONS[:3], entities),
        tiny.encode_product_texts(DESCRIPTIONS[:3], entities),
    )
    assert torch.equal(loaded.gates(entities), tiny.gates(entities))

    bare = tmp_path / "bare.pt"
    torch.save({"model": tiny.state_dict()}, bare)
    with pytest.raises(CheckpointError, match="holds no EI-CLIP entity vocabularies"):
        create_model("eiclip", arch="xmr-tiny", checkpoint=bare)
    broken = tmp_path / "broken.pt"
    torch.save(
        {"model": tiny.state_dict(), "entity_vocab": {"brand": ["dog"]}, "entity_dim": 8}, broken
    )
    with pytest.raises(CheckpointError, match=r"broken\.pt: its 'entity_vocab' is unusable"):
        create_model("eiclip", arch="xmr-tiny", checkpoint=broken)


def test_text_embedding_is_description_plus_gated_entities(tiny: EiClipModel) -> None:
    model = _boosted(tiny)
    entities = {g: list(v) for g, v in ENTITIES.items()}
    gates = model.gates(entities)
    assert gates.shape == (6, 3) and bool(((gates > 0) & (gates < 1)).all())
    assert gates.std() > 0.05  # the boosted gates differ between entities
    net = model.module
    with torch.no_grad():
        ids = model.entity_ids(entities)
        desc = model.text_features(DESCRIPTIONS)
        expected = desc.clone()
        for k, group in enumerate(model.groups):
            h = net.entity[group].proj(net.entity[group].embedding.weight[ids[group]])
            w = torch.sigmoid(h @ net.gate[group].weight.T + net.gate[group].bias).squeeze(-1)
            assert torch.allclose(w, gates[:, k], atol=1e-6)
            expected += ((ids[group] != UNKNOWN).float() * w)[:, None] * h  # unknown adds nothing
        actual = model.product_text_features(DESCRIPTIONS, entities)
    assert torch.allclose(actual, expected, atol=1e-5)
    assert (actual - desc).norm(dim=-1).min() > 0.1 * desc.norm(dim=-1).max()
    assert torch.allclose(model.encode_product_texts(DESCRIPTIONS, entities), F.normalize(expected))
    # No known entity: the description alone.
    none = model.encode_product_texts(DESCRIPTIONS[:2], {"brand": ["gucci", ""]})
    assert torch.allclose(none, model.encode_texts(DESCRIPTIONS[:2]), atol=1e-6)


def test_objective_forward_backward_and_fair_alpha_zero_is_plain(tiny: EiClipModel) -> None:
    model = _boosted(tiny)
    model.module.train()
    batch = _batch(model)
    objective = model.objective(LossConfig())
    assert objective.model is model.module
    out = objective(batch)
    assert set(out) == {"loss", "loss_full", "loss_desc", "loss_entity"}
    assert torch.allclose(out["loss"], out["loss_full"] + out["loss_desc"] + out["loss_entity"])
    assert all(not out[k].requires_grad for k in ("loss_full", "loss_desc", "loss_entity"))
    out["loss"].backward()
    net = model.module
    for name in ("clip.logit_scale", "clip.token_embedding.weight", "gate.brand.weight"):
        assert net.get_parameter(name).grad.abs().sum() > 0, name
    # Only the entities of the batch get gradient: whole-string rows, never sub-words.
    grad = net.entity["brand"].embedding.weight.grad.abs().sum(dim=1)
    assert (grad[1:] > 0).all() and grad[0] == 0

    # The three InfoNCE losses by hand (α = 0: no FairSample).
    with torch.no_grad():
        image = F.normalize(net.encode_image(batch.pixels), dim=-1)
        desc = net.encode_text(batch.text)
        fused, _, _ = net.entities(batch.entities, len(batch))
        scale = net.logit_scale.exp()

        def clip_loss(text: torch.Tensor) -> torch.Tensor:
            i2t, t2i = contrastive_losses(image, F.normalize(text, dim=-1), scale, batch.image_ids)
            return (i2t.mean() + t2i.mean()) / 2

        plain = objective(batch)
        expected = [clip_loss(desc + fused), clip_loss(desc), clip_loss(fused)]
        assert torch.allclose(plain["loss_full"], expected[0], atol=1e-5)
        assert torch.allclose(plain["loss_desc"], expected[1], atol=1e-5)
        assert torch.allclose(plain["loss_entity"], expected[2], atol=1e-5)
        fair = model.objective(LossConfig(fair_alpha=0.5))(batch)
        assert all(not torch.allclose(fair[k], plain[k]) for k in ("loss_full", "loss_desc"))

        # Rows without entities: left out of the entity loss; no entities at all: it is 0.
        partial = _batch(model, {"brand": ["horse", "", "", "dog", "navy", ""]})
        _, _, known = net.entities(partial.entities, len(partial))
        rows = known.any(dim=1)
        i2t, t2i = contrastive_losses(
            image[rows],
            F.normalize(net.entities(partial.entities, 6)[0][rows], dim=-1),
            scale,
            partial.image_ids[rows],
        )
        got = objective(partial)["loss_entity"]
        assert torch.allclose(got, (i2t.mean() + t2i.mean()) / 2, atol=1e-5)
        empty = objective(_batch(model, None))
        assert empty["loss_entity"] == 0 and torch.isfinite(empty["loss"])


ENTITY_ROWS = [{"brand": "horse"}, {"season": "ss2024"}]


def test_collate_gives_entity_ids(tiny: EiClipModel, tmp_path: Path) -> None:
    paths = []
    for i, image in enumerate(_images(2)):
        paths.append(tmp_path / f"{i}.png")
        image.save(paths[-1])
    rows = pa.Table.from_pylist(
        [
            {
                "image_id": i,
                "image_path": str(p),
                "image_png": b"",
                "caption": DESCRIPTIONS[i],
                "image_gender": "neutral",
                "caption_neutral": True,
                "source": "D",
                "entities": list(e.items()),
            }
            for i, (p, e) in enumerate(zip(paths, ENTITY_ROWS, strict=True))
        ],
        schema=PAIR_SCHEMA,
    ).to_pydict()
    batch = collate({k: np.asarray(v, dtype=object) for k, v in rows.items()}, tiny)
    assert batch.entities["brand"].tolist() == [tiny.vocabularies["brand"].id("horse"), UNKNOWN]
    assert batch.entities["season"].tolist() == [UNKNOWN, tiny.vocabularies["season"].id("ss2024")]
    assert tiny.objective(LossConfig())(batch)["loss"].isfinite()


def test_a_few_adam_steps_reduce_the_loss(tiny: EiClipModel) -> None:
    model = copy.deepcopy(tiny)
    model.module.train()
    batch = _batch(model)
    objective = model.objective(LossConfig())
    optimizer = torch.optim.Adam(objective.parameters(), lr=1e-3)
    losses = []
    for _ in range(6):
        out = objective(batch)
        optimizer.zero_grad()
        out["loss"].backward()
        optimizer.step()
        losses.append(float(out["loss"].detach()))
    assert losses[-1] < 0.8 * losses[0], losses


# ---------------------------------------------------------------------------------------------
# Product retrieval protocols


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[ImageRecord], list[ImageRecord]]:
    config = ShopConfig.from_dict({"image_size": 64, "splits": {"train": 30, "test": 90}})
    root = generate(tmp_path_factory.mktemp("shop") / "world", config, seed=3)
    return read_dataset("toyworld", root, "train"), read_dataset("toyworld", root, "test")


@pytest.fixture(scope="module")
def shop_model(shop: tuple[list[ImageRecord], list[ImageRecord]]) -> EiClipModel:
    train = shop[0]
    groups = sorted({g for r in train for g in r.entities})
    corpus = Corpus(
        [c for r in train for c in r.caption_texts],
        {g: [r.entities.get(g, "") for r in train] for g in groups},
    )
    return create_model("eiclip", arch="xmr-tiny", corpus=corpus, seed=0)


def test_sample_candidates_stay_in_the_subcategory_with_the_positive_and_are_seeded() -> None:
    rng = np.random.default_rng(0)
    subcategory = ["a"] * 30 + ["b"] * 3 + ["c"] + [""]  # 35 products
    gallery_product = np.repeat(np.arange(35), 3)  # 3 views each
    query_product = np.arange(35)
    sets = sample_candidates(query_product, gallery_product, subcategory, 10, rng)
    for product, candidates in enumerate(sets):
        if subcategory[product] in ("c", ""):  # alone in its sub-category, or none: skipped
            assert candidates is None
            continue
        owners = gallery_product[candidates]
        assert {subcategory[p] for p in owners} == {subcategory[product]}
        assert (owners == product).sum() == 3  # every view of the product
        assert len(candidates) == 3 + (10 if subcategory[product] == "a" else 6)  # b: all 6 others
        assert np.all(np.diff(candidates) > 0)
    again = sample_candidates(
        query_product, gallery_product, subcategory, 10, np.random.default_rng(0)
    )
    other = sample_candidates(
        query_product, gallery_product, subcategory, 10, np.random.default_rng(1)
    )
    assert all(np.array_equal(x, y) for x, y in zip(sets[:30], again[:30], strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(sets[:30], other[:30], strict=True))


def test_candidate_ranking_is_the_full_ranking_restricted_to_the_candidates() -> None:
    gen = torch.Generator().manual_seed(0)
    queries = F.normalize(torch.randn(20, 8, generator=gen), dim=-1)
    gallery = F.normalize(torch.randn(40, 8, generator=gen), dim=-1)
    query_product, gallery_product = np.arange(20), np.arange(40) % 20  # 2 views each
    sets = [np.sort(np.random.default_rng(q).choice(40, 12, replace=False)) for q in range(20)]
    sets = [np.union1d(s, np.flatnonzero(gallery_product == q)) for q, s in enumerate(sets)]
    recalls, n = candidate_recall(queries, gallery, sets, query_product, gallery_product, (1, 3))
    scores = queries @ gallery.T
    hits = {1: 0, 3: 0}
    for q, candidates in enumerate(sets):
        order = candidates[torch.argsort(scores[q, candidates], descending=True).numpy()]
        for k in hits:
            hits[k] += int((gallery_product[order[:k]] == q).any())
    assert n == 20 and recalls == {k: v / 20 for k, v in hits.items()}
    # Perfect embeddings: every view of the product is a hit, in both protocols.
    onehot = torch.eye(20)
    assert full_recall(onehot, onehot[gallery_product], query_product, gallery_product, (1,)) == {
        1: 1.0
    }
    assert candidate_recall(
        onehot, onehot[gallery_product], sets, query_product, gallery_product, (1,)
    )[0] == {1: 1.0}


def test_both_protocols_on_a_shop_world(shop, shop_model: EiClipModel) -> None:
    test = shop[1]
    result = product_retrieval(shop_model, test, split="test", candidates=20, seed=0)
    metrics, counts = result.metrics, result.counts
    recalls = {
        d: {k: metrics[f"test/recall_{d}_at_{k}"] for k in (1, 5, 10)} for d in ("i2t", "t2i")
    }
    sub = {
        d: {k: metrics[f"test/subcat_recall_{d}_at_{k}"] for k in (1, 5, 10)}
        for d in ("i2t", "t2i")
    }
    assert len(metrics) == 14 and all("@" not in name for name in metrics)
    assert all(0.0 <= v <= 1.0 for r in (*recalls.values(), *sub.values()) for v in r.values())
    assert metrics["test/sumr"] == pytest.approx(
        100 * sum(sum(r.values()) for r in recalls.values())
    )
    assert metrics["test/subcat_sumr"] == pytest.approx(summed_recall(sub.values()))
    assert counts["products"] == counts["images"] == counts["texts"] == 90
    assert counts["subcat_queries_i2t"] + counts["subcat_skipped_i2t"] == 90
    # 20 candidates of ~90 products spread over 14 sub-categories: the smaller set is easier.
    assert metrics["test/subcat_recall_t2i_at_10"] >= metrics["test/recall_t2i_at_10"]
    # Each Rank@K with its interval over its queries (SumR, over both directions, has none),
    # and the per-query hits they resample: the queries of each direction and protocol.
    ranks = [name for name in metrics if "sumr" not in name]
    assert list(result.intervals) == ranks
    assert set(result.interval_metrics()) == {
        f"{n}_ci_{end}" for n in ranks for end in ("low", "high")
    }
    for name in ranks:
        interval = result.intervals[name]
        assert interval.value == metrics[name] and interval.low <= interval.value <= interval.high
    assert list(result.per_query) == ["products_i2t", "products_t2i", "subcat_i2t", "subcat_t2i"]
    images, texts = result.per_query["products_i2t"], result.per_query["products_t2i"]
    assert images.keys[0] == f"{test[0].image_id}:{test[0].caption_texts[0]}"
    assert texts.keys[0].endswith(f":{test[0].caption_texts[0]}") and len(texts.keys) == 90
    assert len(result.per_query["subcat_i2t"].keys) == counts["subcat_queries_i2t"]
    assert (
        result.per_query["subcat_t2i"].values["test/subcat_recall_t2i_at_10"].mean()
        == (metrics["test/subcat_recall_t2i_at_10"])
    )
    again = product_retrieval(shop_model, test, candidates=20, seed=0)
    assert again.metrics == metrics and again.intervals == result.intervals
    # The seed draws the negatives (here fewer than a sub-category holds): only those change.
    few = product_retrieval(shop_model, test, candidates=4, seed=0).metrics
    again = product_retrieval(shop_model, test, candidates=4, seed=1).metrics
    assert all(few[k] == again[k] == metrics[k] for k in metrics if "subcat" not in k)
    assert any(few[k] != again[k] for k in metrics if "subcat_recall" in k)

    # Any other model: its plain text embeddings.
    clip = create_model("clip", arch="xmr-tiny", seed=0)
    assert not isinstance(clip, ProductTextEncoder) and isinstance(shop_model, ProductTextEncoder)
    plain = product_retrieval(clip, test, split="val", protocols=("full",), resamples=0)
    assert set(plain.metrics) == {
        f"val/recall_{d}_at_{k}" for d in ("i2t", "t2i") for k in (1, 5, 10)
    } | {"val/sumr"}
    assert plain.intervals == {} and list(plain.per_query) == ["products_i2t", "products_t2i"]
    with pytest.raises(ValueError, match="unknown protocols"):
        product_retrieval(clip, test, protocols=("sample",))
    bare = [ImageRecord(r.image_id, r.path, 64, 64, r.captions, (), "test") for r in test[:4]]
    with pytest.raises(ValueError, match="needs the entity group 'subcategory'"):
        product_retrieval(clip, bare)


def test_each_kind_of_brand_name_is_scored_on_its_own_queries(shop, shop_model) -> None:
    """``split_by``: each protocol again on the queries of each kind of brand name (a scene
    word the toy CLIP knows, a shop word, an invented name), its per-query hits the full
    set's hits of those queries, with an interval, and SumR per kind and protocol."""
    from xmr.toyworld import load_shop_config
    from xmr.toyworld.shop.brand_kinds import BRAND_KINDS, brand_kinds

    test = shop[1]
    kinds = brand_kinds(load_shop_config(None))
    assert {kinds[b] for b in ("horse", "navy", "verlaine")} == set(BRAND_KINDS)
    whole = product_retrieval(shop_model, test, candidates=20, seed=0)
    result = product_retrieval(shop_model, test, candidates=20, seed=0, split_by=("brand", kinds))
    assert {k: v for k, v in result.metrics.items() if "brand_" not in k} == whole.metrics
    for name, queries in whole.per_query.items():
        parts = {kind: result.per_query.get(f"{name}_brand_{kind}") for kind in BRAND_KINDS}
        present = {kind: part for kind, part in parts.items() if part is not None}
        assert sum(len(part.keys) for part in present.values()) == len(queries.keys)
        for kind, part in present.items():
            index = [queries.keys.index(key) for key in part.keys]
            for metric, hits in queries.values.items():
                cut = metric.replace("test/", f"test/brand_{kind}/", 1)
                assert np.array_equal(part.values[cut], hits[index])
                assert result.metrics[cut] == pytest.approx(hits[index].mean())
                assert cut in result.intervals
    for kind in BRAND_KINDS:
        assert f"test/brand_{kind}/sumr" in result.metrics
        assert f"test/brand_{kind}/subcat_sumr" in result.metrics


def test_subcat_protocol_discards_the_category_entities(shop, shop_model: EiClipModel) -> None:
    test, model = shop[1], _boosted(shop_model)
    got = product_retrieval(model, test, protocols=("subcat",), candidates=4, ks=(1,)).metrics
    products = ProductSet.from_records(test)
    images = encode_images(model, products.image_paths, 64)
    sets = sample_candidates(
        products.text_product,
        products.image_product,
        products.product_subcategory,
        4,
        np.random.default_rng([0, 1]),  # direction 1: text->image
    )
    expected = {}
    for name, discard in (("kept", ("category", "subcategory")), ("all", ())):
        entities = {g: v for g, v in products.text_entities.items() if g not in discard}
        texts = model.encode_product_texts(products.texts, entities)
        expected[name] = candidate_recall(
            texts, images, sets, products.text_product, products.image_product, (1,)
        )[0][1]
    assert got["test/subcat_recall_t2i_at_1"] == expected["kept"] != expected["all"]


def test_fashiongen_views_of_a_product_count_as_one_product(tmp_path: Path) -> None:
    rows = write_fashiongen(tmp_path / "fashiongen_256_256_validation.h5", 36, seed=4)
    records = read_fashiongen(tmp_path, "validation")
    product_ids = read_product_ids(tmp_path, "validation")
    products = ProductSet.from_records(records, product_ids)
    assert len(products.product_ids) == len(set(product_ids.values())) < len(records)
    assert len(products.texts) == len(products.product_ids)  # views share the description
    assert products.text_entities["brand"][0] == rows[0]["input_brand"].lower()
    # Image -> text: every view of a product has that product's text as its positive.
    for image, product in enumerate(products.image_product):
        assert products.texts[product] == records[image].caption_texts[0]

    train = Corpus(
        [r.caption_texts[0] for r in records],
        {g: [r.entities.get(g, "") for r in records] for g in ("brand", "season", "subcategory")},
    )
    model = create_model("eiclip", arch="xmr-tiny", corpus=train, seed=0)
    result = product_retrieval(model, records, split="val", product_ids=product_ids, candidates=5)
    assert result.counts["images"] == 36 and result.counts["texts"] == len(products.texts)
    assert result.metrics["val/sumr"] == pytest.approx(
        100 * sum(v for k, v in result.metrics.items() if "/recall_" in k)
    )
    assert result.metrics["val/subcat_sumr"] == pytest.approx(
        100 * sum(v for k, v in result.metrics.items() if "subcat_recall_" in k)
    )
    with pytest.raises(ValueError, match="has no product id"):
        ProductSet.from_records(records, {})
