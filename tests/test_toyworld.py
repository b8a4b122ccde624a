"""ToyWorld: COCO output, captions, planted biases, removal rule coverage, counterfactuals."""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pycocotools.coco import COCO

from xmr.removal.planning import class_masks, plan_removals, removal_mask
from xmr.toyworld import WorldConfig, generate, load_config
from xmr.toyworld.config import PACKAGED_WORLDS
from xmr.toyworld.scene.captions import class_words
from xmr.toyworld.scene.generate import image_scene, scene_objects
from xmr.toyworld.scene.render import render
from xmr.toyworld.scene.sample import sample_scene
from xmr.toyworld.world import scene_rng

SPLITS = ("train", "val", "test")
REQUIRED_CLASSES = {
    "person": 1,
    "bicycle": 2,
    "car": 3,
    "cat": 17,
    "dog": 18,
    "horse": 19,
    "frisbee": 34,
    "sports ball": 37,
    "cup": 47,
    "dining table": 67,
}
# Gender paper, appendix A (table 3).
FEMININE = {"woman", "women", "female", "girl", "lady", "mother", "mom", "sister", "daughter"}
FEMININE |= {"wife", "girlfriend"}
MASCULINE = {"man", "men", "male", "boy", "gentleman", "father", "brother", "son", "husband"}
MASCULINE |= {"boyfriend"}


def _small_config(**overrides) -> WorldConfig:
    data = {"image_size": 96, "splits": {"train": 40, "val": 10, "test": 20}}
    return WorldConfig.from_dict({**data, **overrides})


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """A small world with sensor noise (counterfactuals must reproduce it exactly)."""
    config = _small_config(layout={"noise_std": 2.0})
    return generate(tmp_path_factory.mktemp("tw") / "world", config, seed=7)


def _coco(path: Path) -> COCO:
    with contextlib.redirect_stdout(io.StringIO()):
        return COCO(str(path))


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def _mentions(text: str, classes) -> set[str]:
    """Classes whose caption words (single or multi-word) occur in ``text``."""
    words = _words(text)
    found = set()
    for category in classes:
        for entry in class_words(category):
            entry_words = entry.split()
            n = len(entry_words)
            if any(words[i : i + n] == entry_words for i in range(len(words))):
                found.add(category)
    return found


def _load(split: str, root: Path) -> tuple[COCO, COCO]:
    return (
        _coco(root / "annotations" / f"instances_{split}.json"),
        _coco(root / "annotations" / f"captions_{split}.json"),
    )


def test_coco_files_load_with_ids_categories_and_genders(world: Path) -> None:
    image_ids, caption_ids, ann_ids = [], [], []
    for split in SPLITS:
        instances, captions = _load(split, world)
        assert sorted(instances.getImgIds()) == sorted(captions.getImgIds())
        categories = {c["name"]: c["id"] for c in instances.loadCats(instances.getCatIds())}
        assert REQUIRED_CLASSES.items() <= categories.items()  # real COCO ids
        for image in instances.loadImgs(instances.getImgIds()):
            assert (world / split / image["file_name"]).is_file()
            assert Image.open(world / split / image["file_name"]).size == (96, 96)
            caps = captions.loadAnns(captions.getAnnIds(imgIds=image["id"]))
            assert len(caps) == 5
            caption_ids += [c["id"] for c in caps]
            anns = instances.loadAnns(instances.getAnnIds(imgIds=image["id"]))
            assert 1 <= len(anns) <= 4
            for ann in anns:
                x, y, w, h = ann["bbox"]
                assert x >= 0 and y >= 0 and w > 0 and h > 0 and x + w <= 96 and y + h <= 96
                is_person = ann["category_id"] == REQUIRED_CLASSES["person"]
                assert ("attributes" in ann) == is_person
                if is_person:
                    assert ann["attributes"]["gender"] in ("male", "female")
            ann_ids += [a["id"] for a in anns]
        image_ids += instances.getImgIds()
    assert len(set(image_ids)) == len(image_ids) == 70
    assert len(set(caption_ids)) == len(caption_ids) == 350
    assert len(set(ann_ids)) == len(ann_ids)
    meta = json.loads((world / "world.json").read_text())
    assert meta["seed"] == 7 and meta["config"]["seed"] == 7
    assert meta["config"]["splits"] == {"train": 40, "val": 10, "test": 20}
    assert {s: meta["counts"][s]["images"] for s in SPLITS} == {"train": 40, "val": 10, "test": 20}
    assert "xmr_version" in meta


def test_captions_mention_only_and_mostly_all_image_classes(world: Path) -> None:
    complete = total = 0
    for split in SPLITS:
        instances, captions = _load(split, world)
        names = {c["id"]: c["name"] for c in instances.loadCats(instances.getCatIds())}
        for image_id in instances.getImgIds():
            anns = instances.loadAnns(instances.getAnnIds(imgIds=image_id))
            present = {names[a["category_id"]] for a in anns}
            mentioned = set()
            for cap in captions.loadAnns(captions.getAnnIds(imgIds=image_id)):
                found = _mentions(cap["caption"], names.values())
                assert found, cap["caption"]  # at least one object
                assert found <= present, (cap["caption"], present)  # no hallucinated class
                mentioned |= found
            complete += mentioned == present
            total += 1
    assert complete / total >= 0.95


def test_counts_in_captions_match_instances(world: Path) -> None:
    instances, captions = _load("train", world)
    dog_id = REQUIRED_CLASSES["dog"]
    for image_id in instances.getImgIds():
        dogs = len(instances.getAnnIds(imgIds=image_id, catIds=[dog_id]))
        for cap in captions.loadAnns(captions.getAnnIds(imgIds=image_id)):
            words = _words(cap["caption"])
            if dogs == 2 and "dogs" in words:
                assert "two dogs" in cap["caption"].lower()
            if dogs == 1:
                assert "dogs" not in words and "puppies" not in words


def test_test_captions_are_gender_neutral_train_captions_are_not(world: Path) -> None:
    _, test_captions = _load("test", world)
    for cap in test_captions.loadAnns(test_captions.getAnnIds()):
        assert not set(_words(cap["caption"])) & (FEMININE | MASCULINE), cap["caption"]
    instances, train_captions = _load("train", world)
    gendered = 0
    for image_id in instances.getImgIds():
        anns = instances.loadAnns(instances.getAnnIds(imgIds=image_id))
        genders = {a["attributes"]["gender"] for a in anns if "attributes" in a}
        for cap in train_captions.loadAnns(train_captions.getAnnIds(imgIds=image_id)):
            words = set(_words(cap["caption"]))
            # Gendered words agree with the drawn genders.
            assert not words & FEMININE or "female" in genders, cap["caption"]
            assert not words & MASCULINE or "male" in genders, cap["caption"]
            gendered += bool(words & (FEMININE | MASCULINE))
    assert gendered > 0


def test_class_words_are_in_noun_phrases(world: Path, nltk_tagger) -> None:
    """The project's chunker + class-word table find the ToyWorld class words (odmap §3.2)."""
    from xmr.text import COCO_CLASS_WORDS, mentioned_classes_batch

    texts, expected = [], []
    for split in SPLITS:
        instances, captions = _load(split, world)
        names = [c["name"] for c in instances.loadCats(instances.getCatIds())]
        for cap in captions.loadAnns(captions.getAnnIds()):
            texts.append(cap["caption"])
            expected.append(_mentions(cap["caption"], names))
    found = mentioned_classes_batch(texts, COCO_CLASS_WORDS)
    hits = sum(len(e & f) for e, f in zip(expected, found, strict=True))
    assert all(f <= e for e, f in zip(expected, found, strict=True))
    assert hits / sum(len(e) for e in expected) >= 0.99


def test_planted_cooccurrence_and_gender_bias(tmp_path: Path) -> None:
    config = WorldConfig.from_dict(
        {
            "image_size": 64,
            "splits": {"train": 1000, "test": 400},
            "counterfactuals": {"splits": []},
        }
    )
    root = generate(tmp_path / "world", config, seed=3)
    rates = {}
    for split in ("train", "test"):
        instances = _coco(root / "annotations" / f"instances_{split}.json")
        names = {c["id"]: c["name"] for c in instances.loadCats(instances.getCatIds())}
        images, genders = [], []
        for image_id in instances.getImgIds():
            anns = instances.loadAnns(instances.getAnnIds(imgIds=image_id))
            images.append({names[a["category_id"]] for a in anns})
            genders.append([a["attributes"]["gender"] for a in anns if "attributes" in a])
        with_dog = [classes for classes in images if "dog" in classes]
        rates[split] = sum("frisbee" in c for c in with_dog) / len(with_dog)
        rates[split + "_marginal"] = sum("frisbee" in c for c in images) / len(images)
        cup_persons = [
            g
            for classes, gs in zip(images, genders, strict=True)
            if "cup" in classes and "bicycle" not in classes
            for g in gs
        ]
        rates[split + "_cup_female"] = cup_persons.count("female") / len(cup_persons)
        everyone = [g for gs in genders for g in gs]
        rates[split + "_female"] = everyone.count("female") / len(everyone)
        assert len(with_dog) >= 40
    # Tolerances are ~3 standard deviations at these sample sizes. Train: P(frisbee | dog) = 0.9,
    # a person with a cup is a woman w.p. 0.8; test: independent classes, 50/50 genders.
    assert abs(rates["train"] - 0.9) < 0.08
    assert abs(rates["test"] - rates["test_marginal"]) < 0.2
    assert rates["test"] < 0.6
    assert abs(rates["train_cup_female"] - 0.8) < 0.2
    assert abs(rates["test_female"] - 0.5) < 0.15
    # The parallel workers drew exactly what an in-process render of the same scene gives.
    for i in (0, 150, 999):
        scene = sample_scene(config, scene_rng(3, "train", i), biased=True)
        png = np.asarray(Image.open(root / "train" / f"{i + 1:012d}.png"))
        assert np.array_equal(png, render(scene))


def test_female_share_sets_the_gender_of_persons_no_rule_governs() -> None:
    """``female_share: 0.25``: in the biased split, persons away from a rule's class are women
    1 time in 4 (the imbalance FairSample is for); a rule still decides its class's persons, and
    unbiased splits stay 50/50. The default (0.5) draws the same worlds as before the key."""
    config = _small_config(female_share=0.25)
    genders: dict[str, list[str]] = {"free": [], "cup": [], "test": []}
    for i in range(4000):
        for split, biased in (("train", True), ("test", False)):
            scene = sample_scene(config, scene_rng(0, split, i), biased=biased)
            classes = {o.category for o in scene.objects}
            persons = [o.gender for o in scene.objects if o.category == "person"]
            if not biased:
                genders["test"] += persons
            elif "cup" in classes and "bicycle" not in classes:
                genders["cup"] += persons
            elif not classes & {"cup", "bicycle"}:
                genders["free"] += persons
    share = {k: v.count("female") / len(v) for k, v in genders.items()}
    assert min(len(v) for v in genders.values()) >= 80
    # ~3 standard deviations at these counts
    assert abs(share["free"] - 0.25) < 0.04 and abs(share["test"] - 0.5) < 0.06
    assert abs(share["cup"] - 0.8) < 0.13
    default = _small_config()
    assert default.female_share == 0.5
    assert sample_scene(default, scene_rng(0, "train", 3), biased=True) == sample_scene(
        _small_config(female_share=0.5), scene_rng(0, "train", 3), biased=True
    )


def test_a_gender_split_balances_each_linked_class_between_men_and_women(tmp_path: Path) -> None:
    rules = [
        {"with": "umbrella", "gender": "female", "p": 0.9},
        {"with": "sports ball", "gender": "male", "p": 0.7},
        {"with": "horse", "gender": "male", "p": 0.9},
    ]
    config = _small_config(
        seed=5,
        image_size=64,
        splits={"train": 4, "test": 2, "gender_test": 60},
        gender_bias=rules,
        counterfactuals={"splits": []},
    )
    assert config.gender_classes == ("umbrella", "sports ball", "horse")
    root = generate(tmp_path / "world", config)
    instances = _coco(root / "annotations" / "instances_gender_test.json")
    names = {c["id"]: c["name"] for c in instances.loadCats(instances.getCatIds())}
    per_class: dict[str, list[str]] = {}
    for image_id in instances.getImgIds():
        anns = instances.loadAnns(instances.getAnnIds(imgIds=image_id))
        classes = {names[a["category_id"]] for a in anns}
        linked = classes & set(config.gender_classes)
        genders = {a["attributes"]["gender"] for a in anns if "attributes" in a}
        assert len(linked) == 1 and len(genders) == 1 and "person" in classes, classes
        per_class.setdefault(linked.pop(), []).append(genders.pop())
    # 60 images: each class 20, of which 10 show women and 10 men.
    assert sorted(per_class) == sorted(config.gender_classes)
    assert all(g.count("female") == g.count("male") == 10 for g in per_class.values())
    captions = json.loads((root / "annotations" / "captions_gender_test.json").read_text())
    words = {w for a in captions["annotations"] for w in _words(a["caption"])}
    assert not words & (MASCULINE | FEMININE)  # gender-neutral, so queries say nothing of it
    # A re-render of an image is the same scene (the BiAug oracle and the counterfactuals rely
    # on image_scene), and a world without rules still balances its persons' genders.
    scene, _ = image_scene(config, "gender_test", 7)
    png = np.asarray(Image.open(root / "gender_test" / f"{4 + 2 + 7 + 1:012d}.png"))
    assert np.array_equal(png, render(scene))
    plain = _small_config(splits={"train": 2, "test": 1, "gender_test": 4}, gender_bias=[])
    genders = [image_scene(plain, "gender_test", i)[0].objects for i in range(4)]
    assert [{o.gender for o in objects if o.gender} for objects in genders] == [
        {"female"}, {"male"}, {"female"}, {"male"},
    ]  # fmt: skip


def _branches(objects, size: int, a1=0.4, a2=0.8, a3=0.7) -> list[str]:
    """The removal rule, written out with full-size masks: one outcome per candidate class."""
    masks = class_masks(objects, size, size)
    outcomes = []
    for q in masks:
        removed = {q} | {
            g for g in masks if g != q and (masks[q] & masks[g]).sum() / masks[g].sum() > a2
        }
        region = np.any([masks[r] for r in removed], axis=0)
        kept = [k for k in masks if k not in removed]
        if not kept:
            outcomes.append("nothing kept")
        elif region.mean() >= a3:
            outcomes.append("alpha3")
        elif any((region & masks[k]).sum() / masks[k].sum() >= a1 for k in kept):
            outcomes.append("alpha1")
        else:
            outcomes.append(("single" if len(removed) == 1 else "multi", tuple(sorted(removed))))
    return outcomes


def test_default_world_exercises_every_branch_of_the_removal_rule() -> None:
    config = load_config()
    counts: Counter = Counter()
    for i in range(config.splits["test"]):
        scene = sample_scene(config, scene_rng(config.seed, "test", i), biased=False)
        objects = scene_objects(scene)
        outcomes = _branches(objects, config.image_size)
        counts.update(o if isinstance(o, str) else o[0] for o in outcomes)
        kept = sorted({o[1] for o in outcomes if not isinstance(o, str)})
        assert plan_removals(objects, config.image_size, config.image_size) == kept
    assert counts["single"] > 100
    assert counts["multi"] >= 10
    assert counts["alpha1"] >= 10
    assert counts["alpha3"] >= 3


def test_counterfactual_index_is_complete_and_exact(world: Path) -> None:
    instances = _coco(world / "annotations" / "instances_test.json")
    names = {c["id"]: c["name"] for c in instances.loadCats(instances.getCatIds())}
    index = json.loads((world / "counterfactuals" / "index_test.json").read_text())
    assert len({e["id"] for e in index}) == len(index) > 0
    by_image: dict[int, list[tuple[str, ...]]] = {}
    for entry in index:
        by_image.setdefault(entry["source_image_id"], []).append(tuple(entry["removed"]))
    changed = 0
    for image_id in instances.getImgIds():
        anns = instances.loadAnns(instances.getAnnIds(imgIds=image_id))
        objects = [(names[a["category_id"]], a["bbox"]) for a in anns]
        assert sorted(by_image.get(image_id, [])) == plan_removals(objects, 96, 96)
    for entry in index:
        source = instances.loadImgs(entry["source_image_id"])[0]
        anns = instances.loadAnns(instances.getAnnIds(imgIds=source["id"]))
        objects = [(names[a["category_id"]], a["bbox"]) for a in anns]
        present = {category for category, _ in objects}
        removed, kept = set(entry["removed"]), set(entry["kept"])
        assert entry["removed"] == sorted(removed) and entry["kept"] == sorted(kept)
        assert not removed & kept and removed | kept == present and kept
        path = world / entry["file_name"]
        assert path.name.startswith(f"{source['id']:012d}_")
        original = np.asarray(Image.open(world / "test" / source["file_name"]))
        counterfactual = np.asarray(Image.open(path))
        outside = ~removal_mask(objects, removed, 96, 96)
        assert np.array_equal(original[outside], counterfactual[outside])
        changed += not np.array_equal(original, counterfactual)
    assert changed >= 0.9 * len(index)  # removals are visible (unless hidden behind others)


def test_same_seed_same_bytes_other_seed_differs(tmp_path: Path) -> None:
    config = _small_config(
        splits={"train": 6, "test": 6},
        layout={"noise_std": 2.0},
        attribute_bias=[{"class": "car", "colour": "red", "p": 0.9}],
        binding={"swap_items": 3, "counter_items": 3},
    )
    a = generate(tmp_path / "a", config, seed=11)
    b = generate(tmp_path / "b", config, seed=11)
    c = generate(tmp_path / "c", config, seed=12)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in files:
        if rel.suffix == ".json":
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
        else:
            assert np.array_equal(np.asarray(Image.open(a / rel)), np.asarray(Image.open(b / rel)))
    assert "binding/items.json" in {str(rel) for rel in files}
    for rel in ("annotations/instances_train.json", "annotations/captions_test.json",
                "binding/items.json"):  # fmt: skip
        assert (a / rel).read_bytes() != (c / rel).read_bytes()
    assert json.loads((c / "world.json").read_text())["seed"] == 12


def test_generate_refuses_a_non_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        generate(tmp_path, _small_config(splits={"train": 1, "test": 1}))


def test_defaults_and_yaml_validation(tmp_path: Path) -> None:
    config = load_config()
    assert set(REQUIRED_CLASSES) <= set(config.classes) and len(config.classes) >= 10
    assert dict(config.splits) == {"train": 4000, "val": 500, "test": 500, "gender_test": 200}
    assert config.gender_splits == ("gender_test",) and config.gender_classes == ("cup", "bicycle")
    assert config.image_size == 128
    assert (config.counterfactuals.alpha1, config.counterfactuals.alpha2) == (0.4, 0.8)
    pairs = {(p.a, p.b): p.p for p in config.cooccurrence}
    assert pairs == {("dog", "frisbee"): 0.9, ("horse", "person"): 0.9}

    path = tmp_path / "world.yaml"
    path.write_text("seed: 5\ncaptions:\n  omit_prob: 0.1\n")
    custom = load_config(path)
    assert custom.seed == 5 and custom.captions.omit_prob == 0.1
    assert custom.captions.neutral_splits == ("test",)  # merged over the defaults
    assert WorldConfig.from_dict(custom.to_dict()) == custom
    # Replacing the splits drops the default gender split it leaves out, and nothing else.
    assert _small_config().gender_splits == ()
    kept = _small_config(splits={"train": 4, "test": 2, "gender_test": 8})
    assert kept.gender_splits == ("gender_test",)
    assert WorldConfig.from_dict(kept.to_dict()) == kept

    cases = {
        "captions:\n  omit_prb: 0.1\n": "captions.omit_prb",
        "colour: red\n": "colour",
        "cooccurrence:\n  - {a: dog, b: frisbee, p: 0.9, q: 1}\n": "cooccurrence[0].q",
        "image_size: big\n": "image_size",
        "captions:\n  omit_prob: 1.5\n": "captions.omit_prob",
        "classes: [person, unicorn]\n": "classes",
        "biased_splits: [training]\n": "biased_splits",
        "counterfactuals:\n  alpha3: 0\n": "counterfactuals.alpha3",
        "gender_bias:\n  - {with: cup, gender: other, p: 0.8}\n": "gender_bias[0].gender",
        "female_share: 1.2\n": "female_share",
        "attribute_bias:\n  - {class: car, colour: pink, p: 0.9}\n": "attribute_bias[0].colour",
        "attribute_bias:\n  - {class: person, colour: pink, p: 1}\n": "attribute_bias[0].class",
        "attribute_bias:\n  - {class: car, colour: red, p: 2}\n": "attribute_bias[0].p",
        "attribute_bias:\n  - {class: car, colour: red, p: 1}\n  - {class: car, colour: blue, "
        "p: 1}\n": "attribute_bias[1].class",
        "binding:\n  counter_items: 5\n": "binding.counter_items",
        "binding:\n  swap_item: 5\n": "binding.swap_item",
        "splits: {train: 5, binding: 5}\n": "splits",
        "gender_splits: [gender_val]\n": "gender_splits",
        "biased_splits: [train, gender_test]\n": "gender_splits",
        "classes: [dog, cup]\ncooccurrence: []\n"
        "gender_bias: [{with: cup, gender: female, p: 1}]\n": "gender_splits",
    }
    for text, key in cases.items():
        path.write_text(text)
        with pytest.raises(ValueError, match=re.escape(key)) as info:
            load_config(path)
        assert str(path) in str(info.value)
    with pytest.raises(FileNotFoundError):
        load_config(tmp_path / "missing.yaml")


def test_the_binding_world_plants_a_colour_bias_and_writes_exact_binding_items(
    tmp_path: Path,
) -> None:
    """The packaged binding world's rules in a small world: in train, cars are red w.p. 0.9 and
    captions seldom name colours; the test split is unbiased; swap items swap two colours both
    classes have, counter items are two renders that differ only inside the object's box."""
    packaged = load_config("binding")
    assert [(a.category, a.colour, a.p) for a in packaged.attribute_bias] == [
        ("car", "red", 0.9), ("umbrella", "yellow", 0.9), ("cup", "white", 0.9)]  # fmt: skip
    assert packaged.captions.colour_prob == 0.1 and packaged.binding.counter_items > 0
    config = WorldConfig.from_dict({
        "image_size": 64,
        "splits": {"train": 500, "test": 300},
        "counterfactuals": {"splits": []},
        "attribute_bias": [{"class": "car", "colour": "red", "p": 0.9}],
        "captions": {"colour_prob": 0.1},
        "binding": {"swap_items": 12, "counter_items": 8},
    })  # fmt: skip
    root = generate(tmp_path / "world", config, seed=5)
    red = {}
    for split in ("train", "test"):
        colours = [
            o.colour
            for i in range(config.splits[split])
            for o in sample_scene(config, scene_rng(5, split, i), biased=split == "train").objects
            if o.category == "car"
        ]
        assert len(colours) >= 60
        red[split] = colours.count("red") / len(colours)
    assert abs(red["train"] - 0.9) < 0.08 and red["test"] < 0.35  # 1/6 expected
    captions = json.loads((root / "annotations" / "captions_train.json").read_text())
    named = [c["caption"] for c in captions["annotations"] if re.search(r"\bred car", c["caption"])]
    with_car = [c for c in captions["annotations"] if "car" in _mentions(c["caption"], ["car"])]
    assert 0 < len(named) < 0.2 * len(with_car)

    items = json.loads((root / "binding" / "items.json").read_text())
    assert [i["kind"] for i in items] == ["swap"] * 12 + ["counter"] * 8
    assert json.loads((root / "world.json").read_text())["counts"]["binding"] == {
        "swap_items": 12, "counter_items": 8}  # fmt: skip
    from xmr.toyworld.scene.classes import CLASSES

    for item in items[:12]:
        (a, colour_a), (b, colour_b) = item["objects"]
        assert a != b and colour_a != colour_b
        assert {colour_a, colour_b} <= set(CLASSES[a].palette) & set(CLASSES[b].palette)
        true, swapped = item["caption"], item["negative_caption"]
        assert true != swapped and sorted(_words(true)) == sorted(_words(swapped))
        assert Image.open(root / item["image"]).size == (64, 64)
    for item in items[12:]:
        assert item["class"] == "car" and item["stereotype"] == "red"
        assert item["counter"] in set(CLASSES["car"].palette) - {"red"}
        captions = item["captions"]
        assert captions["stereotype"].replace("red car", item["counter"] + " car") == captions[
            "counter"]  # fmt: skip
        stereotype, counter = (
            np.asarray(Image.open(root / item["images"][side]), dtype=np.int16)
            for side in ("stereotype", "counter")
        )
        changed = np.argwhere(np.any(stereotype != counter, axis=-1))
        assert len(changed), "the two renders must differ"
        # only inside a car-sized region: the car's box (a car spans at most ~62% of the width)
        height, width = np.ptp(changed, axis=0) + 1
        assert width <= 0.65 * 64 and height <= 0.4 * 64


@pytest.mark.parametrize("name", sorted(PACKAGED_WORLDS))
def test_every_packaged_world_loads_by_its_name(name: str) -> None:
    """``--config NAME``: the pretraining world, the ODmAP worlds and controls, the binding
    world, EI-CLIP's confounded shop."""
    from xmr.toyworld import load_shop_config
    from xmr.toyworld.modes import config_mode

    config = (load_shop_config if config_mode(name) == "shop" else load_config)(name)
    assert config.splits["train"] >= 1000
