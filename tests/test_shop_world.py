"""ToyWorld shop mode: deterministic product photos, entities, visible logos, colliding brands."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from xmr.cli import app
from xmr.data import ImageRecord, read_dataset
from xmr.toyworld import ShopConfig, default_toyworld, generate, load_config, load_shop_config
from xmr.toyworld.scene.captions import class_words
from xmr.toyworld.scene.classes import CLASSES
from xmr.toyworld.shop.catalogue import SUBCATEGORIES
from xmr.toyworld.shop.generate import describe, sample_product
from xmr.toyworld.shop.render import draw_logo, render_product
from xmr.toyworld.world import scene_rng

GROUPS = {"brand", "category", "subcategory", "season", "composition"}
SPLITS = {"train": 60, "val": 10, "test": 10}


def _config(**overrides) -> ShopConfig:
    return ShopConfig.from_dict({"image_size": 96, "splits": SPLITS, **overrides})


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("shop") / "world", _config(), seed=5)


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_same_seed_same_bytes_and_images_depend_on_split_and_index(world, tmp_path) -> None:
    again = generate(tmp_path / "again", _config(), seed=5)  # mode from the config type
    assert _digests(again) == _digests(world)
    other = generate(tmp_path / "other", _config(), seed=6)
    assert _digests(other)["train/000000000001.png"] != _digests(world)["train/000000000001.png"]
    # Image i of a split is drawn from (seed, split, i) alone: fewer train images keep the rest.
    fewer = generate(tmp_path / "fewer", _config(splits={"train": 30, "val": 10}), seed=5)
    first, second = _digests(world), _digests(fewer)
    assert all(second[f"train/{i:012d}.png"] == first[f"train/{i:012d}.png"] for i in (1, 30))
    assert second["val/000000000031.png"] == first["val/000000000061.png"]
    meta = json.loads((world / "world.json").read_text())
    assert (meta["mode"], meta["seed"], meta["config"]["mode"]) == ("shop", 5, "shop")
    assert {s: c["images"] for s, c in meta["counts"].items()} == SPLITS


def test_reader_fills_entities_objects_and_one_description(world) -> None:
    config = _config()
    brands = {b.entity: b for b in config.brands}
    ids = []
    for split, count in SPLITS.items():
        records = read_dataset("toyworld", world, split)
        assert len(records) == count
        for record in records:
            ids.append(record.image_id)
            assert set(record.entities) == GROUPS
            entities = record.entities
            spec = SUBCATEGORIES[entities["subcategory"]]
            assert entities["category"] == spec.category
            assert entities["category"] in brands[entities["brand"]].sells
            assert entities["composition"] in spec.compositions
            assert entities["season"] in {s.lower() for s in config.seasons}
            assert ImageRecord.from_dict(record.to_dict()) == record
            assert len(record.captions) == 1 and record.captions[0].id == record.image_id
            product, logo = record.objects
            assert product.category == entities["subcategory"]
            assert logo.category == "logo" and logo.attributes == {"brand": entities["brand"]}
            text = record.caption_texts[0]
            style, colour = product.attributes["style"], product.attributes["colour"]
            assert f"{style} {spec.noun} in {colour}." in text
            assert re.search(r"(Spring/summer|Autumn/winter) 20\d\d collection\.$", text)
            x, y, w, h = logo.bbox  # the logo lies on the product
            px, py, pw, ph = product.bbox
            assert px <= x and py <= y and x + w <= px + pw and y + h <= py + ph
    assert ids == list(range(1, 81))


def test_plain_light_background_outside_the_product(world) -> None:
    for record in read_dataset("toyworld", world, "val"):
        pixels = np.asarray(Image.open(record.path))
        x, y, w, h = (int(v) for v in record.objects[0].bbox)
        outside = np.ones(pixels.shape[:2], bool)
        outside[y : y + h, x : x + w] = False
        background = pixels[outside]
        assert (background == background[0]).all()  # one uniform colour
        assert background[0].min() >= 220  # light
        inside = pixels[y : y + h, x : x + w]
        assert (inside != background[0]).any(axis=-1).mean() > 0.2  # the product is drawn


def test_brand_logo_is_visible_and_only_there() -> None:
    config = _config()
    product = sample_product(config, scene_rng(0, "train", 3))
    base = render_product(product)
    x, y, w, h = product.logo
    for brand in config.brands:
        if brand == product.brand:
            continue
        other = render_product(replace(product, brand=brand))
        changed = (other != base).any(axis=-1)
        assert changed[y : y + h, x : x + w].sum() > 0.1 * w * h
        changed[y : y + h, x : x + w] = False
        assert not changed.any()
    logos = {b.name: np.asarray(draw_logo(b.glyph, b.colour, 20)) for b in config.brands}
    names = sorted(logos)
    assert all(
        not np.array_equal(logos[a], logos[b]) for i, a in enumerate(names) for b in names[i + 1 :]
    )


def test_colliding_brand_names_appear_in_descriptions(world) -> None:
    config = load_shop_config()
    coco_words = {word for c in CLASSES if c != "person" for word in class_words(c)}
    colliding = {b.entity for b in config.brands if b.entity in coco_words}
    assert {"horse", "dog", "table", "umbrella", "cup"} <= colliding
    assert {"canvas", "autumn", "navy"} <= {b.entity for b in config.brands}  # shop-copy words
    named = set()
    for split in SPLITS:
        for record in read_dataset("toyworld", world, split):
            brand = next(b for b in config.brands if b.entity == record.entities["brand"])
            if record.caption_texts[0].startswith(f"{brand.name} "):
                named.add(brand.entity)
    assert len(named & colliding) >= 3


def test_descriptions_follow_the_captions_config() -> None:
    product = sample_product(_config(), scene_rng(0, "train", 0))
    never = _config(captions={"brand_prob": 0.0, "logo_prob": 0.0, "max_details": 0})
    always = _config(captions={"brand_prob": 1.0, "logo_prob": 1.0})
    text = describe(product, scene_rng(0, "x", 0), never.captions)
    assert not text.startswith(product.brand.name) and "Logo" not in text
    assert len(text.split(". ")) == 2  # the product, the season
    text = describe(product, scene_rng(0, "x", 0), always.captions)
    spec = SUBCATEGORIES[product.subcategory]
    assert text.startswith(f"{product.brand.name} ")
    assert f"Logo patch {spec.logo_phrase}." in text


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("colour: [red]\n", r"unknown key 'colour'"),
        ("layout: {logo_sise: 0.1}\n", r"unknown key 'layout\.logo_sise'"),
        (
            "brands: [{name: Horse, glyph: hexagon, colour: red, sells: [tops]}]\n",
            r"brands\[0\]\.glyph",
        ),
        (
            "brands: [{name: Horse, glyph: star, colour: red, sells: [tops]},"
            " {name: horse, glyph: ring, colour: red, sells: [bags]}]\n",
            r"brands\[1\]\.name: 'horse' repeats brands\[0\]",
        ),
        (
            "brands: [{name: A, glyph: star, colour: red, sells: [tops]},"
            " {name: B, glyph: star, colour: red, sells: [bags]}]\n",
            r"brands\[1\]: logo red star repeats brands\[0\]",
        ),
        ("brands: [{name: A, glyph: star, colour: red, sells: [hats]}]\n", r"brands\[0\]\.sells"),
        ("seasons: [Summer2024]\n", r"seasons: must be distinct codes"),
        ("captions: {brand_prob: 1.5}\n", r"captions\.brand_prob"),
        ("mode: scene\n", r"mode: must be 'shop'"),
    ],
)
def test_config_errors_name_the_file_and_key(tmp_path, yaml_text, message) -> None:
    path = tmp_path / "shop.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ValueError, match=rf"shop\.yaml: {message}"):
        load_shop_config(path)


def test_modes_from_yaml_cli_and_mismatch(tmp_path) -> None:
    shop_yaml = tmp_path / "small.yaml"
    shop_yaml.write_text("mode: shop\nimage_size: 64\nsplits: {train: 3, test: 2}\n")
    bare_yaml = tmp_path / "bare.yaml"
    bare_yaml.write_text("splits: {train: 2}\n")
    runner = CliRunner()
    result = runner.invoke(
        app, ["data", "toyworld", "--out", str(tmp_path / "a"), "--config", str(shop_yaml)]
    )
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "a" / "world.json").read_text())["mode"] == "shop"
    args = ["data", "toyworld", "--out", str(tmp_path / "b"), "--config", str(bare_yaml)]
    result = runner.invoke(app, [*args, "--mode", "shop", "--seed", "2"])
    assert result.exit_code == 0, result.output
    assert read_dataset("toyworld", tmp_path / "b", "train")[0].entities.keys() == GROUPS
    result = runner.invoke(
        app,
        [
            "data",
            "toyworld",
            "--out",
            str(tmp_path / "c"),
            "--config",
            str(shop_yaml),
            "--mode",
            "scene",
        ],
    )
    assert result.exit_code == 2 and "small.yaml: mode: the config is a shop world" in result.output
    (tmp_path / "scene.yaml").write_text("mode: shop\n")
    with pytest.raises(ValueError, match=r"scene\.yaml: mode: must be 'scene'"):
        load_config(tmp_path / "scene.yaml")


def test_default_shop_world_is_cached(tmp_path, monkeypatch) -> None:
    import xmr.toyworld.default_world as default_world

    calls = []

    def small_world(out, config=None, *, mode, seed, progress):
        calls.append(mode)
        return generate(out, _config(splits={"train": 2}), seed=seed)

    monkeypatch.setenv("XMR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(default_world, "generate", small_world)
    root = default_toyworld(4, mode="shop", progress=False)
    assert root.name.startswith("shop-") and root.parent == tmp_path / "toyworld"
    assert default_toyworld(4, mode="shop", progress=False) == root
    assert calls == ["shop"]
    assert json.loads((root / "world.json").read_text())["mode"] == "shop"
    with pytest.raises(ValueError, match="unknown ToyWorld mode 'shops'"):
        default_toyworld(4, mode="shops")


def test_a_shop_worlds_brand_kinds_come_from_its_own_record(world, small_toyworld) -> None:
    """What training's brand split reads: the shop's brands from its ``world.json``, each a
    scene word, a shop word or an invented name; none for a scene world."""
    from xmr.toyworld.shop.brand_kinds import brand_kinds, world_brand_kinds

    assert world_brand_kinds(world) == brand_kinds(_config())
    assert world_brand_kinds(world)["dog"] == "scene_word"
    assert world_brand_kinds(small_toyworld) is None


def test_the_confounded_shop_shows_the_scene_words_namesakes_on_other_brands() -> None:
    """EI-CLIP's positive control (``--config shop-confounded``): the invented brands' logos
    are scene objects drawn as scenes draw them (Verlaine a horse), the scene-word brands keep
    abstract glyphs, at twice the logo size."""
    from xmr.toyworld.shop.brand_kinds import brand_kinds
    from xmr.toyworld.shop.catalogue import SCENE_GLYPHS

    config = load_shop_config("shop-confounded")
    glyphs = {brand.entity: brand.glyph for brand in config.brands}
    kinds = brand_kinds(config)
    assert glyphs["verlaine"] == "horse" and glyphs["horse"] == "triangle"
    assert {g for b, g in glyphs.items() if kinds[b] == "scene_word"}.isdisjoint(SCENE_GLYPHS)
    assert config.layout.logo_size == 0.3
    horse = np.asarray(draw_logo("horse", "red", 48))
    triangle = np.asarray(draw_logo("triangle", "red", 48))
    assert horse.shape == triangle.shape and not np.array_equal(horse, triangle)
    assert (horse[..., :3] == (0, 0, 0)).all(axis=-1).any()  # the horse's black mane and hooves
