"""xmr.benchmarks: the ARO and SugarCrepe readers on fixtures in their published layouts and the
ToyWorld binding test's reader on its own, the correctness rule (a tie is wrong), the
aggregation rules (excluded relations, >= 25 items per attribute pair, the SugarCrepe mean, the
binding sides pooled over both directions) and the four Order shuffles."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from xmr.benchmarks import (
    ARO_METRICS,
    BINDING_METRICS,
    EMPTY_CAPTION,
    EXCLUDED_RELATIONS,
    IMAGE_NOT_FOUND,
    IMAGE_OUTSIDE,
    MIN_ATTRIBUTE_PAIR_ITEMS,
    NO_SHUFFLE,
    SUGARCREPE_CATEGORIES,
    SUGARCREPE_MEAN_METRIC,
    UNREADABLE_IMAGE,
    ContrastItem,
    aro_subsets,
    category_metric,
    item_image,
    read_aro,
    read_binding,
    read_sugarcrepe,
    score_aro,
    score_binding,
    score_sugarcrepe,
    true_caption_wins,
)
from xmr.benchmarks.order import (
    ADJECTIVE_TAGS,
    NOUN_TAGS,
    PERTURBATIONS,
    caption_words,
    order_captions,
    shuffle_all_but_nouns_and_adjectives,
    shuffle_nouns_and_adjectives,
    shuffle_trigrams,
    shuffle_within_trigrams,
)
from xmr.data import DataError
from xmr.metrics import Direction, metric_direction


def _image(path: Path, size: tuple[int, int] = (8, 6), color=(200, 30, 30)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path)
    return path


def _write_json(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def _item(item_id: str = "x", captions: tuple[str, ...] = ("a", "b"), group: str = "g"):
    return ContrastItem(item_id, Path("/nowhere.png"), None, captions, group)


# --- the correctness rule -------------------------------------------------------------------


def test_the_true_caption_must_score_strictly_above_every_negative() -> None:
    scores = [
        np.array([0.9, 0.1]),  # right
        np.array([0.5, 0.5]),  # a tie: wrong
        np.array([0.5, 0.4, 0.5, 0.1, 0.2]),  # ties the third of five: wrong
        np.array([0.5, 0.4, 0.3, 0.1, 0.2]),  # right, K = 5
        np.array([0.2, 0.3, 0.1]),  # a negative above: wrong
        np.array([math.nan, 0.1]),  # NaN: wrong
        np.array([0.3, math.nan]),  # NaN: wrong
    ]
    assert true_caption_wins(scores).tolist() == [True, False, False, True, False, False, False]
    matrix = np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 1.0, 2.0]])  # one (N, K) array
    assert true_caption_wins(matrix).tolist() == [True, False, False]
    assert true_caption_wins([]).shape == (0,)


def test_an_item_needs_a_negative() -> None:
    with pytest.raises(ValueError, match="item 1: scores must be 1-D"):
        true_caption_wins([np.array([0.2, 0.1]), np.array([0.3])])
    with pytest.raises(ValueError, match="item 'x': needs a true caption and a negative"):
        _item(captions=("only",))


def test_an_item_image_is_cropped_to_its_box(tmp_path: Path) -> None:
    path = _image(tmp_path / "scene.png", size=(10, 8), color=(0, 0, 255))
    with Image.open(path) as image:
        pixels = image.load()
        pixels[6, 5] = (255, 0, 0)
        image.save(path)
    whole = ContrastItem("a", path, None, ("a", "b"), "g")
    boxed = ContrastItem("b", path, (6.0, 5.0, 3.0, 2.0), ("a", "b"), "g")
    assert item_image(whole).size == (10, 8)
    crop = item_image(boxed)
    assert crop.size == (3, 2) and crop.mode == "RGB"
    assert crop.getpixel((0, 0)) == (255, 0, 0) and crop.getpixel((1, 0)) == (0, 0, 255)


# --- SugarCrepe -----------------------------------------------------------------------------


def _sugarcrepe(root: Path, categories: dict[str, int]) -> Path:
    """``root`` in SugarCrepe's layout: ``<category>.json`` files and ``val2017/`` images."""
    for category, count in categories.items():
        items = {}
        for k in range(count):
            name = f"{category}_{k:02d}.jpg"
            _image(root / "val2017" / name)
            items[str(10 * k)] = {
                "filename": name,
                "caption": f"a red car {k}",
                "negative_caption": f"a blue car {k}",
            }
        _write_json(root / f"{category}.json", items)
    return root


def test_sugarcrepe_reads_the_files_present_and_names_the_missing(tmp_path: Path) -> None:
    root = _sugarcrepe(tmp_path / "sc", {"swap_att": 2, "add_obj": 4})
    data = read_sugarcrepe(root)
    assert [item.item_id for item in data.items] == [
        "add_obj/0",
        "add_obj/10",
        "add_obj/20",
        "add_obj/30",
        "swap_att/0",
        "swap_att/10",
    ]  # categories in the benchmark's order, items in file order
    first = data.items[0]
    assert (
        first.image == (root / "val2017" / "add_obj_00.jpg").resolve() and first.image.is_absolute()
    )
    assert first.captions == ("a red car 0", "a blue car 0") and first.box is None
    assert first.group == "add_obj"
    assert data.missing == (
        "add_att.json",
        "replace_att.json",
        "replace_obj.json",
        "replace_rel.json",
        "swap_obj.json",
    )
    assert data.skipped == ()


def test_sugarcrepe_accuracy_per_category_and_their_unweighted_mean(tmp_path: Path) -> None:
    data = read_sugarcrepe(_sugarcrepe(tmp_path / "sc", {"swap_att": 2, "add_obj": 4}))
    # add_obj: 3 of 4 right; swap_att: a tie and a right one -> 1 of 2.
    scores = [[0.9, 0.1], [0.9, 0.1], [0.9, 0.1], [0.1, 0.9], [0.4, 0.4], [0.8, 0.2]]
    result = score_sugarcrepe(data.items, true_caption_wins([np.array(s) for s in scores]))
    assert result.metrics == {
        "sugarcrepe/add_obj_acc": 0.75,
        "sugarcrepe/swap_att_acc": 0.5,
        "sugarcrepe/mean_acc": 0.625,  # not the pooled 4 / 6
    }
    assert result.groups["add_obj"].count == 4 and result.groups["swap_att"].excluded is None
    # Per-item values: each metric their mean; a category's are 0 outside it.
    right = true_caption_wins([np.array(s) for s in scores])
    values = result.item_values(data.items, right)
    assert {name: v.mean() for name, v in values.items()} == pytest.approx(result.metrics)
    assert values["sugarcrepe/swap_att_acc"].tolist() == [0, 0, 0, 0, 0, 3.0]  # 1 · 6 / 2


def test_sugarcrepe_images_folder_can_be_elsewhere(tmp_path: Path) -> None:
    root = _sugarcrepe(tmp_path / "sc", {"replace_rel": 1})
    (root / "val2017").rename(tmp_path / "coco-val")
    with pytest.raises(DataError, match=r"val2017: images folder not found"):
        read_sugarcrepe(root)
    data = read_sugarcrepe(root, images=tmp_path / "coco-val")
    assert data.items[0].image == (tmp_path / "coco-val" / "replace_rel_00.jpg").resolve()


def test_sugarcrepe_bad_input_is_named(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "val2017").mkdir(parents=True)
    with pytest.raises(DataError, match="no SugarCrepe file") as error:
        read_sugarcrepe(empty)
    assert all(f"{c}.json" in str(error.value) for c in SUGARCREPE_CATEGORIES)

    root = _sugarcrepe(tmp_path / "sc", {"add_att": 2})
    (root / "replace_obj.json").write_text('{"1": {"filename": ')
    with pytest.raises(DataError, match=r"replace_obj\.json: malformed JSON"):
        read_sugarcrepe(root)

    _write_json(root / "replace_obj.json", {"7": {"filename": "add_att_00.jpg", "caption": "c"}})
    with pytest.raises(
        DataError, match=r"replace_obj\.json: item '7': 'negative_caption' must be a non-empty"
    ):
        read_sugarcrepe(root)

    _write_json(
        root / "replace_obj.json",
        {"7": {"filename": "gone.jpg", "caption": "c", "negative_caption": "d"}},
    )
    with pytest.raises(DataError, match=r"item '7': image not found: .*val2017/gone\.jpg"):
        read_sugarcrepe(root)

    _write_json(root / "replace_obj.json", ["not", "an", "object"])
    with pytest.raises(DataError, match=r"replace_obj\.json: expected an object of items by id"):
        read_sugarcrepe(root)


# --- ARO: VG-Relation and VG-Attribution ----------------------------------------------------


def _vg_entry(image: str, index: int, **group: object) -> dict:
    return {
        "image_id": str(index),
        "image_path": image,
        "bbox_x": 1,
        "bbox_y": 2,
        "bbox_w": 4,
        "bbox_h": 3,
        "true_caption": f"the horse is eating the grass {index}",
        "false_caption": f"the grass is eating the horse {index}",
        **group,
    }


def _vg(root: Path, subset: str, groups: list[object]) -> Path:
    """``root`` in ARO's VG layout: the JSON list and ``images/``; one item per group value."""
    key, name = (
        ("relation_name", "visual_genome_relation.json")
        if subset == "vg-relation"
        else ("attributes", "visual_genome_attribution.json")
    )
    _image(root / "images" / "2315.jpg", size=(12, 10))
    _write_json(root / name, [_vg_entry("2315.jpg", i, **{key: g}) for i, g in enumerate(groups)])
    return root


def test_vg_relation_items_in_the_published_layout(tmp_path: Path) -> None:
    data = read_aro("vg-relation", _vg(tmp_path / "aro", "vg-relation", ["on", "next to"]))
    first = data.items[0]
    assert first.item_id == "vg-relation/0" and first.group == "on"
    assert first.image == (tmp_path / "aro" / "images" / "2315.jpg").resolve()
    assert first.box == (1.0, 2.0, 4.0, 3.0)
    assert first.captions == ("the horse is eating the grass 0", "the grass is eating the horse 0")
    assert item_image(first).size == (4, 3)
    assert data.items[1].group == "next to"


def test_vg_relation_macro_accuracy_leaves_out_the_excluded_relations(tmp_path: Path) -> None:
    assert "next to" in EXCLUDED_RELATIONS and "on" not in EXCLUDED_RELATIONS
    assert len(EXCLUDED_RELATIONS) == 157 == len(set(EXCLUDED_RELATIONS))
    relations = ["on", "on", "on", "on", "behind", "next to", "next to", "near"]
    data = read_aro("vg-relation", _vg(tmp_path / "aro", "vg-relation", relations))
    right = [True, True, True, False, True, False, False, False]
    result = score_aro("vg-relation", data.items, np.array(right))
    # on: 3/4, behind: 1/1 (one item still counts: no count threshold); next to, near: excluded.
    assert result.metrics == {"aro/vg_relation_acc": (0.75 + 1.0) / 2}
    assert result.groups["next to"].accuracy == 0.0 and result.groups["next to"].count == 2
    assert result.groups["next to"].excluded == "symmetric relation (the ARO authors' list)"
    assert result.groups["near"].excluded and result.groups["on"].excluded is None
    # Per-item values: an excluded relation's are 0; on's 3 right items 1/2 · 8/4 each.
    values = result.item_values(data.items, np.array(right))["aro/vg_relation_acc"]
    assert values.tolist() == pytest.approx([1.0, 1.0, 1.0, 0.0, 4.0, 0.0, 0.0, 0.0])
    assert values.mean() == pytest.approx(result.metrics["aro/vg_relation_acc"])


def test_a_tie_is_wrong_end_to_end(tmp_path: Path) -> None:
    data = read_aro("vg-relation", _vg(tmp_path / "aro", "vg-relation", ["on", "on"]))
    constant = true_caption_wins([np.array([0.3, 0.3]), np.array([0.7, 0.7])])
    assert score_aro("vg-relation", data.items, constant).metrics["aro/vg_relation_acc"] == 0.0


def test_vg_attribution_averages_pairs_with_at_least_25_items(tmp_path: Path) -> None:
    assert MIN_ATTRIBUTE_PAIR_ITEMS == 25
    pairs = [["white", "paved"]] * 25 + [["paved", "white"]] * 24 + [["red", "blue"]] * 30
    data = read_aro("vg-attribution", _vg(tmp_path / "aro", "vg-attribution", pairs))
    assert [item.group for item in data.items[23:27]] == [
        "white_paved",
        "white_paved",
        "paved_white",  # the pair's order is the key's order, as the authors key it
        "paved_white",
    ]
    right = np.array([k < 5 for k in range(25)] + [True] * 24 + [k < 15 for k in range(30)])
    result = score_aro("vg-attribution", data.items, right)
    assert result.metrics == {"aro/vg_attribution_acc": pytest.approx((5 / 25 + 15 / 30) / 2)}
    assert result.groups["paved_white"].accuracy == 1.0
    assert result.groups["paved_white"].excluded == "fewer than 25 items"
    assert result.groups["white_paved"].excluded is None
    values = result.item_values(data.items, right)["aro/vg_attribution_acc"]
    assert values.mean() == pytest.approx(result.metrics["aro/vg_attribution_acc"])
    assert not values[25:49].any()  # the pair under 25 items: left out


def test_vg_bad_input_is_named(tmp_path: Path) -> None:
    root = tmp_path / "aro"
    (root / "images").mkdir(parents=True)
    with pytest.raises(DataError, match=r"visual_genome_relation\.json: ARO vg-relation file not"):
        read_aro("vg-relation", root)

    _vg(root, "vg-relation", ["on", "on"])
    entries = json.loads((root / "visual_genome_relation.json").read_text())
    entries[1]["bbox_w"] = "wide"
    _write_json(root / "visual_genome_relation.json", entries)
    with pytest.raises(DataError, match=r"relation\.json: item 1: bbox_x, bbox_y, bbox_w, bbox_h"):
        read_aro("vg-relation", root)

    entries[1]["bbox_w"] = 4
    entries[1]["image_path"] = "missing.jpg"
    _write_json(root / "visual_genome_relation.json", entries)
    with pytest.raises(DataError, match=r"item 1: image not found: .*images/missing\.jpg"):
        read_aro("vg-relation", root)

    _vg(root, "vg-attribution", [["red"]])
    with pytest.raises(DataError, match=r"item 0: 'attributes' must be a list of two strings"):
        read_aro("vg-attribution", root)


def test_the_subset_choice() -> None:
    assert aro_subsets("all") == ("vg-relation", "vg-attribution", "coco-order", "flickr-order")
    assert aro_subsets("coco-order") == ("coco-order",)
    with pytest.raises(ValueError, match="ARO subset 'vg': expected one of vg-relation"):
        aro_subsets("vg")
    with pytest.raises(ValueError, match="ARO subset 'all'"):
        read_aro("all", Path("."))


# --- the four shuffles (no tagger: words and tags given) ------------------------------------

TAGGED = [
    ("a", "DT"), ("small", "JJ"), ("brown", "JJ"), ("dog", "NN"), ("runs", "VBZ"),
    ("across", "IN"), ("the", "DT"), ("green", "JJ"), ("park", "NN"), ("with", "IN"),
    ("a", "DT"), ("red", "JJ"), ("ball", "NN"),
]  # fmt: skip
WORDS = [word for word, _ in TAGGED]
TAGS = [tag for _, tag in TAGGED]
NOUN_OR_ADJECTIVE = [tag in NOUN_TAGS | ADJECTIVE_TAGS for tag in TAGS]


@pytest.mark.parametrize("shuffle", PERTURBATIONS, ids=lambda f: f.__name__)
def test_every_shuffle_keeps_the_words_changes_their_order_and_is_seeded(shuffle) -> None:
    for seed in range(20):
        shuffled = shuffle(WORDS, TAGS, np.random.default_rng(seed))
        assert Counter(shuffled) == Counter(WORDS) and shuffled != WORDS
        assert shuffled == shuffle(WORDS, TAGS, np.random.default_rng(seed))
    draws = {tuple(shuffle(WORDS, TAGS, np.random.default_rng(s))) for s in range(20)}
    assert len(draws) > 1


def test_the_noun_and_adjective_shuffle_moves_only_nouns_and_adjectives() -> None:
    for seed in range(20):
        shuffled = shuffle_nouns_and_adjectives(WORDS, TAGS, np.random.default_rng(seed))
        for position, tag in enumerate(TAGS):
            if tag in NOUN_TAGS:
                assert shuffled[position] in {"dog", "park", "ball"}
            elif tag in ADJECTIVE_TAGS:
                assert shuffled[position] in {"small", "brown", "green", "red"}
            else:
                assert shuffled[position] == WORDS[position]


def test_the_other_shuffle_keeps_nouns_and_adjectives_in_place() -> None:
    for seed in range(20):
        shuffled = shuffle_all_but_nouns_and_adjectives(WORDS, TAGS, np.random.default_rng(seed))
        kept = [w for w, fixed in zip(shuffled, NOUN_OR_ADJECTIVE, strict=True) if fixed]
        assert kept == [w for w, fixed in zip(WORDS, NOUN_OR_ADJECTIVE, strict=True) if fixed]


def test_the_trigram_shuffles() -> None:
    trigrams = [WORDS[i : i + 3] for i in range(0, len(WORDS), 3)]  # 4 trigrams and 1 word
    for seed in range(20):
        within = shuffle_within_trigrams(WORDS, TAGS, np.random.default_rng(seed))
        for start in range(0, len(WORDS), 3):
            assert Counter(within[start : start + 3]) == Counter(WORDS[start : start + 3])
        moved = shuffle_trigrams(WORDS, TAGS, np.random.default_rng(seed))
        pieces, position = [], 0
        while position < len(moved):  # read the output back as whole trigrams
            piece = next(t for t in trigrams if moved[position : position + len(t)] == t)
            pieces.append(piece)
            position += len(piece)
        assert sorted(map(tuple, pieces)) == sorted(map(tuple, trigrams))


def test_a_shuffle_that_cannot_change_the_words_returns_none() -> None:
    rng = np.random.default_rng(0)
    words, tags = ["a", "dog"], ["DT", "NN"]
    assert all(shuffle(words, tags, rng) is None for shuffle in PERTURBATIONS[:1])
    assert shuffle_trigrams(words, tags, rng) is None  # one trigram
    assert shuffle_within_trigrams(words, tags, rng) == ["dog", "a"]
    assert shuffle_all_but_nouns_and_adjectives(words, tags, rng) is None  # one other word
    same = ["dog", "dog", "dog", "dog", "dog", "dog"]  # two trigrams, but equal ones
    assert shuffle_trigrams(same, ["NN"] * 6, rng) is None
    assert shuffle_within_trigrams(same, ["NN"] * 6, rng) is None
    assert all(shuffle([], [], rng) is None for shuffle in PERTURBATIONS)


# --- COCO-Order and Flickr-Order (the tagger) -----------------------------------------------

COCO_CAPTIONS = [
    "A man riding a wave on top of a surfboard.",
    "Two small dogs are playing with a red ball in the green park.",
]


def _karpathy(root: Path, name: str, prefix: str) -> Path:
    """``root`` in BLIP's Karpathy test layout: a list of ``{"image", "caption": [...]}``."""
    entries = [
        {"image": f"{prefix}/img_1.jpg", "caption": COCO_CAPTIONS, "image_id": "1"},
        {"image": f"{prefix}/img_2.jpg", "caption": ["Surfing.", "A dog."], "image_id": "2"},
    ]
    for entry in entries:
        _image(root / entry["image"])
    _write_json(root / name, entries)
    return root


def test_caption_words_are_normalised_like_blip(nltk_tagger: None) -> None:
    words, tags = caption_words('A man\'s "old" hat (red): on the TABLE; by a dog!')
    assert words == ["a", "man", "'s", "old", "hat", "red", "on", "the", "table", "by", "a", "dog"]
    assert len(tags) == len(words) and tags[1] == "NN"
    assert caption_words("one two three four five", max_words=3)[0] == ["one", "two", "three"]
    assert caption_words("...") == ([], [])


def test_order_items_from_karpathy_test_captions(nltk_tagger: None, tmp_path: Path) -> None:
    root = _karpathy(tmp_path / "coco", "coco_karpathy_test.json", "val2014")
    data = read_aro("coco-order", root, seed=3)
    # every caption of every image is an item, but "Surfing." (one word) cannot be shuffled
    assert [item.item_id for item in data.items] == [
        "val2014/img_1.jpg#0",
        "val2014/img_1.jpg#1",
        "val2014/img_2.jpg#1",
    ]
    assert data.items[2].captions == ("a dog", "dog a")  # only the shuffle within trigrams
    assert [(skip.item, skip.reason) for skip in data.skipped] == [
        ("val2014/img_2.jpg#0", NO_SHUFFLE)
    ]  # skipped by the benchmark's rule, named by the id its item would have had
    assert data.skipped[0].detail == (
        f"{root.resolve() / 'coco_karpathy_test.json'}: entry 1: caption 'Surfing.': no "
        "shuffle can change its word order"
    )
    item = data.items[1]
    assert item.group == "coco-order" and item.box is None
    assert item.image == (root / "val2014" / "img_1.jpg").resolve()
    true = "two small dogs are playing with a red ball in the green park"
    assert item.captions[0] == true and len(item.captions) == 5
    assert all(Counter(c.split()) == Counter(true.split()) for c in item.captions)
    assert all(c != true for c in item.captions[1:])
    # the same seed gives the same items; another seed other shuffles
    assert read_aro("coco-order", root, seed=3).items == data.items
    assert read_aro("coco-order", root, seed=4).items != data.items


def test_flickr_order_and_a_caption_only_some_shuffles_can_change(
    nltk_tagger: None, tmp_path: Path
) -> None:
    root = _karpathy(tmp_path / "flickr", "flickr30k_test.json", "flickr30k-images")
    data = read_aro("flickr-order", root, seed=0)
    assert {item.group for item in data.items} == {"flickr-order"}
    # "a man riding a wave on top of a surfboard": nouns man / wave / top / surfboard, no
    # adjective: all four shuffles apply.
    assert len(data.items[0].captions) == 5
    # "a black cat": one noun, one adjective, one other word, one trigram: only the shuffle
    # within trigrams applies.
    texts = order_captions("A black cat", np.random.default_rng(0))
    assert (
        texts[0] == "a black cat"
        and len(texts) == 2
        and sorted(texts[1].split()) == sorted(texts[0].split())
    )
    result = score_aro("flickr-order", data.items, np.array([True, False, False]))
    assert result.metrics == {"aro/flickr_order_acc": pytest.approx(1 / 3)}


def test_order_bad_input_is_named(tmp_path: Path) -> None:
    root = tmp_path / "coco"
    _write_json(root / "coco_karpathy_test.json", [{"image": "val2014/a.jpg", "caption": "x"}])
    with pytest.raises(DataError, match=r"test\.json: entry 0: 'caption' must be a list"):
        read_aro("coco-order", root)
    _write_json(root / "coco_karpathy_test.json", [{"image": "val2014/a.jpg", "caption": ["x"]}])
    with pytest.raises(DataError, match=r"entry 0: image not found: .*val2014/a\.jpg"):
        read_aro("coco-order", root)


# --- metric names ---------------------------------------------------------------------------


def test_every_benchmark_metric_is_higher_is_better() -> None:
    names = [
        *ARO_METRICS.values(),
        *(category_metric(c) for c in SUGARCREPE_CATEGORIES),
        SUGARCREPE_MEAN_METRIC,
    ]
    assert names[:4] == [
        "aro/vg_relation_acc",
        "aro/vg_attribution_acc",
        "aro/coco_order_acc",
        "aro/flickr_order_acc",
    ]
    assert "sugarcrepe/replace_rel_acc" in names and names[-1] == "sugarcrepe/mean_acc"
    assert BINDING_METRICS == ("binding/swap_acc", "binding/counter_acc", "binding/stereotype_acc")
    names += BINDING_METRICS
    assert all(metric_direction(name) is Direction.HIGHER for name in names)


# --- the ToyWorld binding test -----------------------------------------------------------------


def _binding(root: Path) -> Path:
    """A world folder with a binding test of one swap item and two counter items."""
    items = [{"id": "swap/0", "kind": "swap", "image": "binding/swap_00000.png",
              "caption": "A red car and a blue cup.",
              "negative_caption": "A blue car and a red cup.",
              "objects": [["car", "red"], ["cup", "blue"]]}]  # fmt: skip
    for i, counter in enumerate(("blue", "black")):
        images = {side: f"binding/counter_{i:05d}_{side}.png" for side in ("stereotype", "counter")}
        for side, colour in (("stereotype", (200, 30, 30)), ("counter", (30, 30, 200))):
            _image(root / images[side], color=colour)
        items.append({"id": f"counter/{i}", "kind": "counter", "class": "car",
                      "stereotype": "red", "counter": counter, "images": images,
                      "captions": {"stereotype": "A red car.",
                                   "counter": f"A {counter} car."}})  # fmt: skip
    _image(root / "binding" / "swap_00000.png")
    return _write_json(root / "binding" / "items.json", items).parent.parent


def test_binding_items_score_both_ways_and_pool_each_side(tmp_path: Path) -> None:
    data = read_binding(_binding(tmp_path / "world"))
    assert [i.group for i in data.items] == ["swap", "stereotype/i2t", "counter/i2t"] * 1 + [
        "stereotype/i2t", "counter/i2t"]  # fmt: skip
    assert [i.group for i in data.caption_items] == ["stereotype/t2i", "counter/t2i"] * 2
    counter_i2t = data.items[2]
    assert counter_i2t.image.name == "counter_00000_counter.png"
    assert counter_i2t.captions == ("A blue car.", "A red car.")
    stereotype_t2i = data.caption_items[0]
    assert stereotype_t2i.caption == "A red car."
    assert [p.name for p in stereotype_t2i.images] == [
        "counter_00000_stereotype.png", "counter_00000_counter.png"]  # fmt: skip
    assert all(p.is_absolute() for item in data.caption_items for p in item.images)
    # A model that answers "red" to every car: stereotype always right, counter always wrong;
    # the swap item's scores tie, which is wrong.
    items_right = true_caption_wins(np.array([[0.5, 0.5], [0.9, 0.1], [0.2, 0.8], [0.9, 0.1],
                                              [0.2, 0.8]]))  # fmt: skip
    captions_right = true_caption_wins(np.array([[0.9, 0.1], [0.3, 0.7]] * 2))
    score = score_binding(data.items, items_right, data.caption_items, captions_right)
    assert score.metrics == {"binding/swap_acc": 0.0, "binding/stereotype_acc": 1.0,
                             "binding/counter_acc": 0.0}  # fmt: skip
    assert list(score.groups) == ["swap", "stereotype/i2t", "stereotype/t2i", "counter/i2t",
                                  "counter/t2i"]  # fmt: skip
    assert score.groups["counter/t2i"].count == 2
    # Half right on the counter side: one direction of each item.
    mixed = score_binding(data.items, np.array([True, True, True, True, False]),
                          data.caption_items, np.array([True, False, True, True]))  # fmt: skip
    assert mixed.metrics["binding/counter_acc"] == pytest.approx(2 / 4)
    assert mixed.metrics["binding/stereotype_acc"] == 1.0
    both = [*data.items, *data.caption_items]
    verdicts = np.array([True, True, True, True, False, True, False, True, True])
    values = mixed.item_values(both, verdicts)
    assert {name: v.mean() for name, v in values.items()} == pytest.approx(mixed.metrics)


def test_binding_bad_input_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"no binding test.*--config binding"):
        read_binding(tmp_path)
    root = _binding(tmp_path / "world")
    items = json.loads((root / "binding" / "items.json").read_text())
    for change, message in (
        ({"kind": "odd"}, "item 1: 'kind' must be 'swap' or 'counter'"),
        ({"captions": {"stereotype": "A red car."}}, "item 1: captions: 'counter' must be"),
        ({"images": "x.png"}, "item 1: 'images' must be an object"),
    ):
        _write_json(root / "binding" / "items.json", [items[0], {**items[1], **change}])
        with pytest.raises(DataError, match=message) as info:
            read_binding(root)
        assert "items.json" in str(info.value)


# --- `xmr eval --benchmark`: the readers, the encoding stage and the scoring together --------


@pytest.mark.slow
def test_xmr_eval_scores_sugarcrepe_on_ray_with_json_and_mlflow(local_ray, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from xmr.cli import app

    root = _sugarcrepe(tmp_path / "sugarcrepe", {"add_att": 3, "swap_obj": 2})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = CliRunner().invoke(app, [
        "eval", "--benchmark", "sugarcrepe", "--data", str(root), "--model", "clip",
        "--arch", "xmr-tiny", "--batch-size", "4", "--output", str(tmp_path / "out.json"),
        "--tracking-uri", uri,
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "not found, not scored: add_obj.json" in result.output
    report = json.loads((tmp_path / "out.json").read_text())
    metrics = report["metrics"]
    assert set(metrics) == {"sugarcrepe/add_att_acc", "sugarcrepe/swap_obj_acc",
                            "sugarcrepe/mean_acc"}  # fmt: skip
    assert metrics["sugarcrepe/mean_acc"] == pytest.approx(
        (metrics["sugarcrepe/add_att_acc"] + metrics["sugarcrepe/swap_obj_acc"]) / 2
    )
    assert report["counts"] == {"items": 5, "scored": 5, "unreadable": 0, "skipped": 0}
    assert report["groups"]["sugarcrepe"]["add_att"]["count"] == 3
    assert len(report["missing"]) == 5 and report["config"]["benchmark.name"] == "sugarcrepe"

    import mlflow

    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs(
        [client.get_experiment_by_name("xmr/eval/sugarcrepe").experiment_id]
    )
    assert run.data.metrics["sugarcrepe/mean_acc"] == metrics["sugarcrepe/mean_acc"]
    assert run.data.metrics["data/scored"] == 5 and run.data.tags["xmr.benchmark"] == "sugarcrepe"


def test_aro_scores_each_subset_present_and_names_the_rest(nltk_tagger, tmp_path: Path) -> None:
    """In this process with a model in memory (no Ray): VG-Relation, VG-Attribution and
    COCO-Order from one folder, Flickr-Order named as missing, an unreadable image named and
    left out of the scores; the scores are the cosine similarities of the encoded pairs."""
    from xmr.eval.benchmark import read_benchmark, run_benchmark
    from xmr.eval.config import eval_config
    from xmr.eval.encode import local_encoder
    from xmr.models import create_model

    root = tmp_path / "aro"
    _vg(root, "vg-relation", ["on", "eating", "on"])
    attribution = root / "visual_genome_attribution.json"
    _write_json(attribution, [_vg_entry("broken.jpg", i, attributes=["white", "paved"])
                              for i in range(2)])  # fmt: skip
    (root / "images" / "broken.jpg").write_bytes(b"not a jpeg")
    _karpathy(root, "coco_karpathy_test.json", "val2014")
    config = eval_config(data=root, batch_size=4)
    model = create_model("clip", arch="xmr-tiny", seed=0)
    result = run_benchmark(config, "aro", encoder=local_encoder(model))
    assert set(result.metrics) == {"aro/vg_relation_acc", "aro/coco_order_acc"}
    assert result.missing == ("flickr30k_test.json",)
    # every row is scored or skipped: 3 + 2 VG items, 4 COCO captions of which one ("Surfing.")
    # no shuffle can change; the two VG-Attribution items' image does not decode
    assert result.counts == {"items": 9, "scored": 6, "unreadable": 2, "skipped": 3}
    assert result.skip_counts() == {UNREADABLE_IMAGE: 2, NO_SHUFFLE: 1}
    assert sum("broken.jpg" in skip.detail for skip in result.skipped) == 2
    # The relation accuracy, recomputed from the model's own similarities.
    items = read_benchmark("aro", root, subset="vg-relation")["vg-relation"].items
    right = []
    for item in items:
        image = model.encode_images(model.preprocess(item_image(item)).unsqueeze(0))
        texts = model.encode_texts(list(item.captions))
        scores = (texts @ image.T).squeeze(1).detach().numpy()
        right.append(bool(scores[0] > scores[1]))
    by_relation = {"on": np.mean([right[0], right[2]]), "eating": float(right[1])}
    assert result.metrics["aro/vg_relation_acc"] == pytest.approx(
        np.mean(list(by_relation.values())), abs=1e-6
    )
    # Each subset scored is a query set of its items, resampled within its relations.
    assert list(result.intervals) == list(result.metrics)
    assert set(result.per_query) == {"vg-relation", "coco-order"}
    relations = result.per_query["vg-relation"]
    assert relations.strata == ["on", "eating", "on"]
    assert relations.keys[1] == f"vg-relation/1:{items[1].captions[0]}"


def test_toyworld_binding_scores_a_generated_world_with_json_and_mlflow(tmp_path: Path) -> None:
    """In this process with a model in memory: a generated binding world, scored both ways; the
    caption -> image verdicts recomputed from the model's own similarities; the intervals and
    per-decision values; the JSON report, the table and the MLflow run that `xmr eval
    --benchmark toyworld-binding` writes (the CLI's tail), which `xmr compare` pairs."""
    import mlflow
    from rich.console import Console

    from xmr.eval import report
    from xmr.eval.benchmark import run_benchmark
    from xmr.eval.config import eval_config
    from xmr.eval.encode import local_encoder
    from xmr.models import create_model
    from xmr.toyworld import WorldConfig, generate

    world = WorldConfig.from_dict({
        "image_size": 64, "splits": {"test": 1}, "biased_splits": [],
        "attribute_bias": [{"class": "car", "colour": "red", "p": 0.9}],
        "binding": {"swap_items": 4, "counter_items": 3},
    })  # fmt: skip
    root = generate(tmp_path / "world", world, seed=1)
    config = eval_config(data=root, batch_size=8)
    model = create_model("clip", arch="xmr-tiny", seed=0)
    result = run_benchmark(config, "toyworld-binding", encoder=local_encoder(model))
    assert result.subsets == ("binding",)
    assert set(result.metrics) == set(BINDING_METRICS)
    assert result.counts == {"items": 4 + 3 * 4, "scored": 16, "unreadable": 0, "skipped": 0}
    groups = result.groups["binding"]
    assert {name: g.count for name, g in groups.items()} == {
        "swap": 4,
        "stereotype/i2t": 3,
        "stereotype/t2i": 3,
        "counter/i2t": 3,
        "counter/t2i": 3,
    }
    # caption -> image, recomputed: does each caption pick its own render?
    data = read_binding(root)
    right = []
    for item in data.caption_items:
        images = torch.stack([model.preprocess(Image.open(p).convert("RGB")) for p in item.images])
        with torch.no_grad():
            scores = model.encode_images(images) @ model.encode_texts([item.caption]).T
        right.append(bool(scores[0, 0] > scores[1, 0]))
    counter = [r for item, r in zip(data.caption_items, right, strict=True)
               if item.group == "counter/t2i"]  # fmt: skip
    assert groups["counter/t2i"].accuracy == pytest.approx(np.mean(counter))

    # Intervals over the decisions, resampled within the groups; the per-decision values.
    assert list(result.intervals) == list(result.metrics)
    for name, interval in result.intervals.items():
        assert interval.value == result.metrics[name]
        assert 0.0 <= interval.low <= interval.value <= interval.high <= 1.0
    decisions = result.per_query["binding"]
    assert decisions.keys[0] == f"{data.items[0].item_id}:{data.items[0].captions[0]}"
    assert (
        decisions.keys[-1] == f"{data.caption_items[-1].item_id}:{data.caption_items[-1].caption}"
    )
    assert Counter(decisions.strata) == {name: g.count for name, g in groups.items()}
    for name, values in decisions.values.items():
        assert values.mean() == pytest.approx(result.metrics[name])

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    written = json.loads(report.write_json(result, config, tmp_path / "out.json").read_text())
    assert written["metrics"] == result.metrics
    assert written["intervals"] == {name: i.to_json() for name, i in result.intervals.items()}
    assert written["config"]["benchmark.name"] == "toyworld-binding"
    assert written["groups"]["binding"]["counter/t2i"]["count"] == 3
    run_id = report.log_benchmark_to_mlflow(result, config, tracking_uri=uri, run_name="a")
    run = mlflow.MlflowClient(uri).get_run(run_id)
    experiment = mlflow.MlflowClient(uri).get_experiment(run.info.experiment_id)
    assert experiment.name == "xmr/eval/toyworld-binding"
    assert run.data.metrics["binding/counter_acc"] == pytest.approx(
        result.metrics["binding/counter_acc"]
    )
    assert run.data.metrics["binding/counter_acc_ci_high"] == pytest.approx(
        result.intervals["binding/counter_acc"].high
    )
    shown = Console(width=120, record=True)
    report.print_benchmark(result, config, shown)
    interval = result.intervals["binding/swap_acc"]
    assert f"[{100 * interval.low:.1f}, {100 * interval.high:.1f}]" in shown.export_text()

    # `xmr compare A B` reads the logged decisions back, groups and all, and pairs them (here
    # a run with a second log of itself: every difference 0).
    from xmr.compare.paired import paired_comparison

    report.log_benchmark_to_mlflow(result, config, tracking_uri=uri, run_name="b")
    frame = paired_comparison("a", "b", tracking_uri=uri).frame.set_index("metric")
    assert set(frame.index) == set(BINDING_METRICS)
    assert frame["first"].to_dict() == pytest.approx(result.metrics)
    assert (frame[["difference", "ci_low", "ci_high"]] == 0).all(axis=None)
    # `xmr train` scores the same test at the end of training, as test/binding/*, with the
    # same intervals and per-item values under those names (its per_query.parquet)
    from xmr.train.config import resolve_config
    from xmr.train.evaluation import run_binding

    train_config = resolve_config("clip", data=root, storage=tmp_path, seed=0)
    metrics, items = run_binding(model, train_config, root)
    assert metrics == pytest.approx(
        {f"test/{name}": value for name, value in result.metrics.items()}
        | {f"test/{name}": value for name, value in result.interval_metrics().items()}
    )
    assert list(items) == ["binding"] and items["binding"].keys == result.per_query["binding"].keys
    for name, values in result.per_query["binding"].values.items():
        assert items["binding"].values[f"test/{name}"] == pytest.approx(values)


# --- bad rows: skipped per item, named and counted; --strict stops at the first -------------


def _bad_sugarcrepe(root: Path) -> Path:
    """SugarCrepe with 3 + 2 items, one image missing (``add_att/10``) and one empty caption
    (``swap_obj/0``)."""
    _sugarcrepe(root, {"add_att": 3, "swap_obj": 2})
    (root / "val2017" / "add_att_01.jpg").unlink()
    items = json.loads((root / "swap_obj.json").read_text())
    items["0"]["negative_caption"] = "  "
    _write_json(root / "swap_obj.json", items)
    return root


def test_sugarcrepe_bad_rows_are_skipped_each_with_its_reason(tmp_path: Path) -> None:
    """A missing image, an empty caption, image names that leave the images folder (``../``,
    an absolute path, both naming real files): each is one skipped item, by the id it would
    have had, with its reason and a line naming its file and item; every row is an item or a
    skip. A link inside the folder is the user's own and is followed."""
    root = _bad_sugarcrepe(tmp_path / "sc")
    secret = _image(tmp_path / "secret.jpg")
    _image(tmp_path / "elsewhere" / "linked.jpg")
    (root / "val2017" / "link.jpg").symlink_to(tmp_path / "elsewhere" / "linked.jpg")
    _write_json(root / "replace_rel.json", {
        "1": {"filename": "../../secret.jpg", "caption": "c", "negative_caption": "d"},
        "2": {"filename": str(secret), "caption": "c", "negative_caption": "d"},
        "3": {"filename": "link.jpg", "caption": "c", "negative_caption": "d"},
        "4": {"filename": "sub/../add_att_00.jpg", "caption": "c", "negative_caption": "d"},
        "5": {"filename": "", "caption": "c", "negative_caption": "d"},
    })  # fmt: skip
    data = read_sugarcrepe(root, strict=False)
    assert [item.item_id for item in data.items] == [
        "add_att/0", "add_att/20", "replace_rel/3", "swap_obj/10"
    ]  # fmt: skip
    assert [(skip.item, skip.reason) for skip in data.skipped] == [
        ("add_att/10", IMAGE_NOT_FOUND),
        ("replace_rel/1", IMAGE_OUTSIDE),
        ("replace_rel/2", IMAGE_OUTSIDE),
        ("replace_rel/4", IMAGE_OUTSIDE),  # a '..' is refused even when it climbs back in
        ("replace_rel/5", IMAGE_NOT_FOUND),
        ("swap_obj/0", EMPTY_CAPTION),
    ]
    assert len(data.items) + len(data.skipped) == 3 + 2 + 5
    details = {skip.item: skip.detail for skip in data.skipped}
    sc = root.resolve()
    assert details["add_att/10"] == (
        f"{sc / 'add_att.json'}: item '10': image not found: {sc / 'val2017' / 'add_att_01.jpg'}"
    )
    assert details["replace_rel/1"].startswith(
        f"{sc / 'replace_rel.json'}: item '1': image '../../secret.jpg' refused: an image name "
        f"is a path inside the images folder {sc / 'val2017'}"
    )
    assert f"image {str(secret)!r} refused" in details["replace_rel/2"]
    assert details["swap_obj/0"] == (
        f"{sc / 'swap_obj.json'}: item '0': 'negative_caption' must be a non-empty string, got '  '"
    )
    assert data.items[2].image == sc / "val2017" / "link.jpg"
    # strict (the readers' default): the first bad row, in the order read, is the error
    with pytest.raises(DataError, match=r"add_att\.json: item '10': image not found: ") as error:
        read_sugarcrepe(root)
    assert "\n" not in str(error.value)


def test_aro_bad_rows_are_skipped_each_with_its_reason(nltk_tagger: None, tmp_path: Path) -> None:
    """VG: a missing image, a '../' name, an empty caption; Order: every caption of an entry
    whose image is missing, and an empty caption. A malformed entry still stops the reading."""
    root = _vg(tmp_path / "aro", "vg-relation", ["on"] * 5)
    _image(tmp_path / "secret.jpg")
    entries = json.loads((root / "visual_genome_relation.json").read_text())
    entries[1]["image_path"] = "gone.jpg"
    entries[2]["image_path"] = "../../secret.jpg"
    entries[3]["true_caption"] = ""
    entries[4]["false_caption"] = None
    _write_json(root / "visual_genome_relation.json", entries)
    data = read_aro("vg-relation", root, strict=False)
    assert [item.item_id for item in data.items] == ["vg-relation/0"]
    assert [(skip.item, skip.reason) for skip in data.skipped] == [
        ("vg-relation/1", IMAGE_NOT_FOUND),
        ("vg-relation/2", IMAGE_OUTSIDE),
        ("vg-relation/3", EMPTY_CAPTION),
        ("vg-relation/4", EMPTY_CAPTION),
    ]
    assert data.skipped[2].detail.startswith(
        f"{root.resolve() / 'visual_genome_relation.json'}: item 3: 'true_caption' must be a "
        "non-empty string"
    )
    with pytest.raises(DataError, match=r"relation\.json: item 1: image not found: .*gone\.jpg"):
        read_aro("vg-relation", root)
    entries[0]["bbox_w"] = "wide"  # malformed, not a bad row: stops the reading either way
    _write_json(root / "visual_genome_relation.json", entries)
    with pytest.raises(DataError, match=r"item 0: bbox_x, bbox_y, bbox_w, bbox_h"):
        read_aro("vg-relation", root, strict=False)

    karpathy = _karpathy(tmp_path / "coco", "coco_karpathy_test.json", "val2014")
    entries = json.loads((karpathy / "coco_karpathy_test.json").read_text())
    entries[0]["caption"][1] = " "
    entries.append({"image": "val2014/gone.jpg", "caption": ["A dog.", "A cat on a mat."]})
    entries.append({"image": "../secret.jpg", "caption": ["A dog on a mat."]})
    _write_json(karpathy / "coco_karpathy_test.json", entries)
    order = read_aro("coco-order", karpathy, strict=False)
    assert [item.item_id for item in order.items] == ["val2014/img_1.jpg#0", "val2014/img_2.jpg#1"]
    assert [(skip.item, skip.reason) for skip in order.skipped] == [
        ("val2014/img_1.jpg#1", EMPTY_CAPTION),
        ("val2014/img_2.jpg#0", NO_SHUFFLE),
        ("val2014/gone.jpg#0", IMAGE_NOT_FOUND),
        ("val2014/gone.jpg#1", IMAGE_NOT_FOUND),
        ("../secret.jpg#0", IMAGE_OUTSIDE),
    ]
    # strict: the empty caption stops it; the Order rule's skip never does
    with pytest.raises(DataError, match=r"test\.json: entry 0: caption 1 is empty"):
        read_aro("coco-order", karpathy)


def test_sugarcrepe_with_a_missing_image_and_an_empty_caption_is_scored_with_2_skipped(
    tmp_path: Path,
) -> None:
    """The acceptance test of `xmr eval --benchmark sugarcrepe` (in this process with a model
    in memory; the CLI's tail: table and JSON): the rest is scored, ``skipped: 2`` with each
    reason counted and each item named, in the table and in the JSON."""
    from rich.console import Console

    from xmr.eval import report
    from xmr.eval.benchmark import run_benchmark
    from xmr.eval.config import eval_config
    from xmr.eval.encode import local_encoder
    from xmr.models import create_model

    root = _bad_sugarcrepe(tmp_path / "sc")
    config = eval_config(data=root, batch_size=4, bootstrap=50)
    result = run_benchmark(
        config, "sugarcrepe", encoder=local_encoder(create_model("clip", arch="xmr-tiny"))
    )
    assert result.counts == {"items": 5, "scored": 3, "unreadable": 0, "skipped": 2}
    assert set(result.metrics) == {
        "sugarcrepe/add_att_acc", "sugarcrepe/swap_obj_acc", "sugarcrepe/mean_acc"
    }  # fmt: skip
    groups = result.groups["sugarcrepe"]
    assert (groups["add_att"].count, groups["swap_obj"].count) == (2, 1)
    assert result.per_query["sugarcrepe"].keys == [
        "add_att/0:a red car 0", "add_att/20:a red car 2", "swap_obj/10:a red car 1"
    ]  # fmt: skip

    shown = Console(width=100, record=True)
    report.print_benchmark(result, config, shown)
    text = shown.export_text()
    assert "skipped: 2 (image not found: 1, empty caption: 1)" in text
    assert "items=5, scored=3, unreadable=0, skipped=2" in text
    assert f"{root.resolve() / 'add_att.json'}: item '10': image not found: " in text
    assert f"{root.resolve() / 'swap_obj.json'}: item '0': 'negative_caption' must be" in text

    written = json.loads(report.write_json(result, config, tmp_path / "out.json").read_text())
    assert written["skipped_by_reason"] == {IMAGE_NOT_FOUND: 1, EMPTY_CAPTION: 1}
    assert [(s["item"], s["reason"]) for s in written["skipped"]] == [
        ("add_att/10", IMAGE_NOT_FOUND),
        ("swap_obj/0", EMPTY_CAPTION),
    ]
    assert all(s["detail"].startswith(str(root.resolve())) for s in written["skipped"])


def test_an_unreadable_image_is_skipped_from_the_encoding_stage_or_with_strict_stops(
    nltk_tagger: None, tmp_path: Path
) -> None:
    """Bytes that do not decode are found by the encoding stage, as that row's error: its items
    (here an ARO box and a SugarCrepe item) are skipped and the rest of the batch scored; with
    strict the first is one line naming the image and the item."""
    from xmr.eval.benchmark import run_benchmark
    from xmr.eval.config import eval_config
    from xmr.eval.encode import local_encoder
    from xmr.models import create_model

    model = create_model("clip", arch="xmr-tiny")
    aro = _vg(tmp_path / "aro", "vg-relation", ["on", "on", "on"])
    (aro / "images" / "broken.jpg").write_bytes(b"not a jpeg")
    _image(tmp_path / "secret.jpg")
    entries = json.loads((aro / "visual_genome_relation.json").read_text())
    entries[1]["image_path"] = "broken.jpg"
    entries[2]["image_path"] = "../../secret.jpg"
    _write_json(aro / "visual_genome_relation.json", entries)
    config = eval_config(data=aro, batch_size=8, bootstrap=0)
    result = run_benchmark(config, "aro", encoder=local_encoder(model))
    assert result.counts == {"items": 3, "scored": 1, "unreadable": 1, "skipped": 2}
    assert result.skip_counts() == {IMAGE_OUTSIDE: 1, UNREADABLE_IMAGE: 1}
    assert result.groups["vg-relation"]["on"].count == 1
    broken = next(skip for skip in result.skipped if skip.reason == UNREADABLE_IMAGE)
    assert broken.item == "vg-relation/1"
    assert broken.detail.startswith("item 'vg-relation/1': DataError: ")
    assert f"{aro.resolve() / 'images' / 'broken.jpg'}: cannot decode image" in broken.detail

    sugarcrepe = _sugarcrepe(tmp_path / "sc", {"add_att": 3})
    (sugarcrepe / "val2017" / "add_att_02.jpg").write_bytes(b"\xff\xd8 truncated")
    config = eval_config(data=sugarcrepe, batch_size=8, bootstrap=0)
    result = run_benchmark(config, "sugarcrepe", encoder=local_encoder(model))
    assert result.counts == {"items": 3, "scored": 2, "unreadable": 1, "skipped": 1}
    assert [(s.item, s.reason) for s in result.skipped] == [("add_att/20", UNREADABLE_IMAGE)]
    with pytest.raises(DataError) as error:
        run_benchmark(config, "sugarcrepe", encoder=local_encoder(model), strict=True)
    message = str(error.value)
    assert "\n" not in message and message.startswith("item 'add_att/20': DataError: ")
    assert "val2017/add_att_02.jpg: cannot decode image" in message


def test_strict_stops_at_the_first_bad_row_in_one_line_before_ray(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`xmr eval --benchmark sugarcrepe --strict`: a missing image is one `error:` line naming
    the file and the item, exit 2, decided in the driver before Ray is started; without a
    benchmark --strict is refused."""
    from typer.testing import CliRunner

    import xmr.pipeline.ray_executor
    from xmr.cli import app

    def no_ray(*args: object, **kwargs: object) -> None:
        raise AssertionError("Ray was started")

    monkeypatch.setattr(xmr.pipeline.ray_executor, "init_ray", no_ray)
    root = _bad_sugarcrepe(tmp_path / "sc")
    args = ["eval", "--benchmark", "sugarcrepe", "--data", str(root), "--model", "clip",
            "--arch", "xmr-tiny", "--strict"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    sc = root.resolve()
    assert lines[0] == (
        f"error: {sc / 'add_att.json'}: item '10': image not found: "
        f"{sc / 'val2017' / 'add_att_01.jpg'}"
    )
    # the same path escape, refused before Ray as well
    (sc / "val2017" / "add_att_01.jpg").symlink_to(sc / "val2017" / "add_att_00.jpg")
    items = json.loads((root / "swap_obj.json").read_text())
    items["0"] = {"filename": "../../etc/passwd", "caption": "c", "negative_caption": "d"}
    _write_json(root / "swap_obj.json", items)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "item '0': image '../../etc/passwd' refused" in result.output

    result = CliRunner().invoke(app, ["eval", "--strict"])
    assert result.exit_code == 2 and "--strict applies to --benchmark" in result.output

    # not strict, but nothing left to score: one line, the skips summed up, before Ray
    gone = _sugarcrepe(tmp_path / "gone", {"add_obj": 2})
    for image in (gone / "val2017").iterdir():
        image.unlink()
    result = CliRunner().invoke(app, [*args[:4], str(gone), *args[5:-1]])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "no sugarcrepe item to score; skipped 2 (image not found: 2), e.g. " in result.output
