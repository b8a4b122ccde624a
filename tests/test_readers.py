"""Dataset readers (COCO on coco-mini, the Flickr30k fixture, ToyWorld) and bad-input handling."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from PIL import Image, ImageFile

from xmr.data import (
    DATASETS,
    Caption,
    Counterfactual,
    DataError,
    DataIssue,
    EntityPhrase,
    ImageRecord,
    ObjectAnnotation,
    load_image,
    read_coco,
    read_counterfactuals,
    read_dataset,
    read_flickr30k,
    read_toyworld,
)
from xmr.data.coco import clip_box
from xmr.data.flickr30k import parse_entity_sentence
from xmr.data.images import image_size

FLICKR = Path(__file__).parent / "fixtures" / "flickr30k"


def _raises_or_skips_one(read: Callable[..., list], match: str) -> list:
    """``read()`` raises a :class:`DataError` matching ``match``; ``read(issues=[])`` skips
    exactly one item instead and returns what it kept."""
    with pytest.raises(DataError, match=match):
        read()
    issues: list[DataIssue] = []
    kept = read(issues=issues)
    assert len(issues) == 1
    return kept


# --------------------------------------------------------------------------- COCO (real data)


@pytest.fixture(scope="module")
def coco_records(coco_mini: Path) -> list[ImageRecord]:
    return read_coco(coco_mini, "train")


def test_read_coco_matches_the_raw_json(coco_mini: Path, coco_records: list[ImageRecord]) -> None:
    ann_dir = coco_mini / "annotations"
    instances = json.loads((ann_dir / "instances_train2017.json").read_text())
    captions = json.loads((ann_dir / "captions_train2017.json").read_text())
    images = {im["id"]: im for im in captions["images"]}
    names = {c["id"]: c["name"] for c in instances["categories"]}
    texts, boxes = defaultdict(list), defaultdict(list)
    for ann in captions["annotations"]:
        texts[ann["image_id"]].append((ann["id"], ann["caption"].strip()))
    for ann in instances["annotations"]:
        boxes[ann["image_id"]].append((names[ann["category_id"]], tuple(ann["bbox"])))

    assert [r.image_id for r in coco_records] == sorted(images)
    assert len(coco_records) == 80
    for record in coco_records:
        image = images[record.image_id]
        assert record.path == coco_mini / "train2017" / image["file_name"]
        assert record.path.is_file()
        assert (record.width, record.height, record.split) == (
            image["width"],
            image["height"],
            "train",
        )
        assert [(c.id, c.text) for c in record.captions] == texts[record.image_id]
        assert [(o.category, o.bbox) for o in record.objects] == boxes[record.image_id]
        for x, y, w, h in (o.bbox for o in record.objects):
            assert x >= 0 and y >= 0 and w > 0 and h > 0
            assert x + w <= record.width and y + h <= record.height
    assert sum(len(r.captions) for r in coco_records) == len(captions["annotations"])
    assert "person" in {c for r in coco_records for c in r.categories}


def test_read_coco_year_given_or_detected(coco_mini: Path, coco_records: list[ImageRecord]) -> None:
    assert read_coco(coco_mini, "train", year=2017) == coco_records
    assert read_dataset("coco", coco_mini, "train") == coco_records


def test_coco_year_detection_errors(tmp_path: Path) -> None:
    ann = tmp_path / "annotations"
    ann.mkdir()
    (ann / "instances_val2014.json").write_text("{}")
    with pytest.raises(DataError, match=r"found none .*instances_val2014\.json"):
        read_coco(tmp_path, "train")
    (ann / "instances_val.json").write_text("{}")
    with pytest.raises(DataError, match=r"instances_val\.json', 'instances_val2014\.json'"):
        read_coco(tmp_path, "val")


# --------------------------------------------------------------------------- image decoding


def test_load_image_decodes_rgb(coco_records: list[ImageRecord]) -> None:
    image = load_image(coco_records[0].path)
    assert image.mode == "RGB"
    assert image.size == (coco_records[0].width, coco_records[0].height)
    assert image_size(coco_records[0].path) == image.size


def test_load_image_rejects_bad_files(tmp_path: Path, coco_records: list[ImageRecord]) -> None:
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False
    garbage = tmp_path / "garbage.jpg"
    garbage.write_bytes(b"\xff\xd8\xff\xe0 definitely not a jpeg" * 10)
    truncated = tmp_path / "truncated.jpg"
    data = coco_records[0].path.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    missing = tmp_path / "missing.jpg"
    for path in (garbage, truncated, missing):
        with pytest.raises(DataError, match=path.name):
            load_image(path)


# --------------------------------------------------------------------------- bad COCO input


def _draw(path: Path, size: tuple[int, int], colour: tuple[int, int, int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.new("RGB", size, (235, 235, 235))
    image.paste(colour, (size[0] // 4, size[1] // 4, size[0] // 2, size[1] // 2))
    image.save(path)


def _write_world(root: Path, split: str, world: dict) -> None:
    """Write ``world`` ({"images", "captions", "objects", "categories"}) in COCO layout."""
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    images = world["images"]
    for image in images:
        _draw(root / split / image["file_name"], (image["width"], image["height"]), (200, 40, 40))
    instances = {
        "images": images,
        "annotations": world["objects"],
        "categories": world["categories"],
    }
    captions = {"images": images, "annotations": world["captions"]}
    (root / "annotations" / f"instances_{split}.json").write_text(json.dumps(instances))
    (root / "annotations" / f"captions_{split}.json").write_text(json.dumps(captions))


def _small_world() -> dict:
    """Three 64x48 images, two captions each, a person (with gender) and a dog on image 1."""
    return {
        "images": [
            {"id": i, "file_name": f"{i:04d}.png", "width": 64, "height": 48} for i in (3, 1, 2)
        ],
        "captions": [
            {"id": 198 + 2 * i + k, "image_id": i, "caption": f" Scene {i}, caption {k}. "}
            for i in (1, 2, 3)
            for k in (0, 1)
        ],
        "objects": [
            {"id": 101, "image_id": 1, "category_id": 1, "bbox": [2, 3, 20, 40], "iscrowd": 0,
             "attributes": {"gender": "female"}},
            {"id": 102, "image_id": 1, "category_id": 18, "bbox": [30, 20, 25, 20], "iscrowd": 0},
            {"id": 103, "image_id": 2, "category_id": 18, "bbox": [-0.5, 10, 65.3, 38.9],
             "iscrowd": 1},
        ],
        "categories": [{"id": 1, "name": "person"}, {"id": 18, "name": "dog"}],
    }  # fmt: skip


def test_small_world_reads_clean(tmp_path: Path) -> None:
    _write_world(tmp_path, "train", _small_world())
    issues: list[DataIssue] = []
    records = read_coco(tmp_path, "train", issues=issues)
    assert issues == []
    assert [r.image_id for r in records] == [1, 2, 3]
    one, two, three = records
    assert one.captions == (
        Caption(200, "Scene 1, caption 0."),
        Caption(201, "Scene 1, caption 1."),
    )
    assert one.objects == (
        ObjectAnnotation("person", (2.0, 3.0, 20.0, 40.0), {"gender": "female"}),
        ObjectAnnotation("dog", (30.0, 20.0, 25.0, 20.0)),
    )
    # within the 1-px tolerance: clipped to the 64x48 image; crowd boxes are kept
    assert two.objects == (ObjectAnnotation("dog", (0.0, 10.0, 64.0, 38.0)),)
    assert three.objects == ()
    assert read_coco(tmp_path, "train", year="") == records


def _set(root: Path, kind: str, index: int, key: str, value: object) -> None:
    """Set ``annotations[index][key]`` of the written ``{kind}_train.json``."""
    path = root / "annotations" / f"{kind}_train.json"
    data = json.loads(path.read_text())
    data["annotations"][index][key] = value
    path.write_text(json.dumps(data))


BAD_COCO = {
    # case: (mutation, what the error names, records' (image id, #captions, #objects) when skipped)
    "missing image": (
        lambda root: (root / "train" / "0002.png").unlink(),
        ["image 2", "0002.png"],
        [(1, 2, 2), (3, 2, 0)],
    ),
    "box outside": (  # reaches x=66 in a 64-px wide image
        lambda root: _set(root, "instances", 1, "bbox", [50, 20, 16, 20]),
        ["image 1, annotation 102", "outside"],
        [(1, 2, 1), (2, 2, 1), (3, 2, 0)],
    ),
    "zero width box": (
        lambda root: _set(root, "instances", 1, "bbox", [30, 20, 0, 20]),
        ["image 1, annotation 102", "size"],
        [(1, 2, 1), (2, 2, 1), (3, 2, 0)],
    ),
    "unknown category": (
        lambda root: _set(root, "instances", 1, "category_id", 99),
        ["image 1, annotation 102", "99"],
        [(1, 2, 1), (2, 2, 1), (3, 2, 0)],
    ),
    "empty caption": (
        lambda root: _set(root, "captions", 1, "caption", "   "),
        ["image 1, caption 201", "no words"],
        [(1, 1, 2), (2, 2, 1), (3, 2, 0)],
    ),
    "punctuation caption": (
        lambda root: _set(root, "captions", 1, "caption", " ... !"),
        ["image 1, caption 201", "no words"],
        [(1, 1, 2), (2, 2, 1), (3, 2, 0)],
    ),
}


@pytest.mark.parametrize("case", BAD_COCO)
def test_bad_coco_item_raises_or_is_skipped(tmp_path: Path, case: str) -> None:
    mutate, named, kept = BAD_COCO[case]
    _write_world(tmp_path, "train", _small_world())
    mutate(tmp_path)

    with pytest.raises(DataError) as raised:
        read_coco(tmp_path, "train")
    for text in named:
        assert text in str(raised.value)

    issues: list[DataIssue] = []
    records = read_coco(tmp_path, "train", issues=issues)
    assert [(r.image_id, len(r.captions), len(r.objects)) for r in records] == kept
    assert len(issues) == 1
    assert all(text in f"{issues[0].item}: {issues[0].reason}" for text in named)


def test_image_without_captions_is_skipped(tmp_path: Path) -> None:
    world = _small_world()
    for caption in world["captions"][4:]:  # both captions of image 3
        caption["caption"] = "."
    _write_world(tmp_path, "train", world)
    issues: list[DataIssue] = []
    records = read_coco(tmp_path, "train", issues=issues)
    assert [r.image_id for r in records] == [1, 2]
    assert [i.item.rsplit(": ", 1)[1] for i in issues] == [
        "image 3, caption 204",
        "image 3, caption 205",
        "image 3",
    ]
    assert "no usable caption" in issues[2].reason


def test_missing_or_malformed_annotation_file_always_raises(tmp_path: Path) -> None:
    _write_world(tmp_path, "train", _small_world())
    captions = tmp_path / "annotations" / "captions_train.json"
    captions.write_text('{"images": [')
    with pytest.raises(DataError, match=r"captions_train\.json: malformed COCO annotation file"):
        read_coco(tmp_path, "train", issues=[])
    captions.unlink()
    with pytest.raises(DataError, match=r"captions_train\.json: annotation file not found"):
        read_coco(tmp_path, "train", issues=[])


@pytest.mark.parametrize(
    ("bbox", "clipped"),
    [
        ((0.1, 0.2, 10.3, 5.7), (0.1, 0.2, 10.3, 5.7)),
        ((-1.0, -0.5, 11.0, 5.5), (0.0, 0.0, 10.0, 5.0)),
        ((95.0, 45.0, 6.0, 5.9), (95.0, 45.0, 5.0, 5.0)),
    ],
)
def test_clip_box_within_tolerance(bbox: tuple, clipped: tuple) -> None:
    assert clip_box(bbox, 100, 50) == clipped


@pytest.mark.parametrize(
    "bbox", [(-1.5, 0, 10, 10), (95, 0, 6.5, 10), (0, 0, 0, 10), (0, 0, 10, -1), (0, 0, 1), "abcd"]
)
def test_clip_box_rejects(bbox: tuple) -> None:
    with pytest.raises(ValueError, match="bbox"):
        clip_box(bbox, 100, 50)


# --------------------------------------------------------------------------- Flickr30k


def _flickr_expected() -> dict[str, list[ImageRecord]]:
    images = FLICKR / "flickr30k-images"
    p = EntityPhrase
    man, hat = p("A man", ("people",), "11"), p("a red hat", ("clothing",), "12")
    leash = p("a dog 's leash", ("bodyparts", "other"), "13")
    person, dog, park = (
        p("The person", ("people", "other"), "11"),
        p("a dog", ("animals",), "14"),
        p("the park", ("scene",), "15"),
    )
    someone, pet = p("Someone", ("notvisual",), "0"), p("a pet", ("animals",), "14")
    girl, ball, friend = (
        p("A girl", ("people",), "21"),
        p("a ball", ("other",), "22"),
        p("her friend", ("people",), "23"),
    )
    child, toy = p("A child", ("people",), "21"), p("a toy", ("other",), "22")
    balloon, wall = p("A blue balloon", ("other",), "41"), p("a white wall", ("scene",), "42")
    shape = p("A round blue shape", ("other",), "41")
    r1001 = ImageRecord(
        1001,
        images / "1001.jpg",
        64,
        48,
        (
            Caption(0, "A man in a red hat holds a dog 's leash .", (man, hat, leash)),
            Caption(1, "The person walks a dog in the park .", (person, dog, park)),
            Caption(2, "Someone enjoys a pet .", (someone, pet)),
        ),
        (
            # xmin=4 ymin=3 xmax=30 ymax=49 (1-based inclusive), 1 px past the bottom: clipped
            ObjectAnnotation("people", (3.0, 2.0, 27.0, 46.0), {"entity_id": "11"}),
            # one <object> naming entities 13 and 14
            ObjectAnnotation("bodyparts", (32.0, 18.0, 32.0, 28.0), {"entity_id": "13"}),
            ObjectAnnotation("animals", (32.0, 18.0, 32.0, 28.0), {"entity_id": "14"}),
            ObjectAnnotation("clothing", (6.0, 0.0, 15.0, 10.0), {"entity_id": "12"}),
        ),
        "train",
    )
    r1002 = ImageRecord(
        1002,
        images / "1002.jpg",
        48,
        64,
        (
            Caption(3, "A girl throws a ball to her friend .", (girl, ball, friend)),
            Caption(4, "A child plays with a toy .", (child, toy)),
        ),
        (
            ObjectAnnotation("people", (10.0, 8.0, 21.0, 53.0), {"entity_id": "21"}),
            ObjectAnnotation("other", (30.0, 40.0, 15.0, 15.0), {"entity_id": "22"}),
        ),
        "train",
    )
    r1003 = ImageRecord(
        1003,
        images / "1003.jpg",
        40,
        30,
        (Caption(5, "A yellow box on a dark table."), Caption(6, "A square sign.")),
        (),
        "val",
    )
    r1004 = ImageRecord(
        1004,
        images / "1004.jpg",
        32,
        32,
        (
            Caption(7, "A blue balloon against a white wall .", (balloon, wall)),
            Caption(8, "A round blue shape .", (shape,)),
        ),
        (),
        "test",
    )
    return {"train": [r1001, r1002], "val": [r1003], "test": [r1004]}


@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_flickr30k_fixture_parsed_exactly(split: str) -> None:
    issues: list[DataIssue] = []
    assert read_flickr30k(FLICKR, split, issues=issues) == _flickr_expected()[split]
    assert issues == []
    assert read_dataset("flickr30k", FLICKR, split) == _flickr_expected()[split]


def test_flickr30k_unknown_split() -> None:
    with pytest.raises(ValueError, match="restval"):
        read_flickr30k(FLICKR, "restval")


def test_parse_entity_sentence() -> None:
    text, phrases = parse_entity_sentence(
        "[/EN#5/people/other Two  men] and [/EN#0/notvisual it] ."
    )
    assert text == "Two men and it ."
    assert phrases == (
        EntityPhrase("Two men", ("people", "other"), "5"),
        EntityPhrase("it", ("notvisual",), "0"),
    )
    with pytest.raises(ValueError, match="malformed"):
        parse_entity_sentence("[/EN#5/people Two men and it .")


@pytest.fixture
def flickr_copy(tmp_path: Path) -> Path:
    root = tmp_path / "flickr30k"
    shutil.copytree(FLICKR, root)
    return root


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_flickr30k_bad_box(flickr_copy: Path) -> None:
    _edit(flickr_copy / "Annotations" / "1002.xml", "<xmax>45</xmax>", "<xmax>50</xmax>")
    records = _raises_or_skips_one(
        partial(read_flickr30k, flickr_copy, "train"),
        r"1002\.xml: image 1002, entity 22: bbox .* outside",
    )
    assert [o.attributes["entity_id"] for o in records[1].objects] == ["21"]


def test_flickr30k_caption_with_no_words(flickr_copy: Path) -> None:
    _edit(flickr_copy / "Sentences" / "1004.txt", "[/EN#41/other A round blue shape] .", "- .")
    [record] = _raises_or_skips_one(
        partial(read_flickr30k, flickr_copy, "test"),
        r"1004\.txt: image 1004, caption 8: caption has no words",
    )
    assert [c.id for c in record.captions] == [7]


def test_flickr30k_malformed_sentence_line(flickr_copy: Path) -> None:
    _edit(
        flickr_copy / "Sentences" / "1002.txt", "[/EN#21/people A child]", "[/EN#21/people A child"
    )
    records = _raises_or_skips_one(
        partial(read_flickr30k, flickr_copy, "train"), r"1002\.txt:2: image 1002"
    )
    assert [c.id for c in records[1].captions] == [3]
    assert len(records[1].objects) == 2


def test_flickr30k_sentence_count_mismatch_falls_back(flickr_copy: Path) -> None:
    _edit(flickr_copy / "Sentences" / "1004.txt", "[/EN#41/other A round blue shape] .\n", "")
    [record] = _raises_or_skips_one(
        partial(read_flickr30k, flickr_copy, "test"), r"1004\.txt: image 1004: 1 captions but"
    )
    assert record.caption_texts == ("A blue balloon against a white wall.", "A round blue shape.")
    assert all(c.phrases == () for c in record.captions)


def test_flickr30k_missing_image(flickr_copy: Path) -> None:
    (flickr_copy / "flickr30k-images" / "1001.jpg").unlink()
    records = _raises_or_skips_one(
        partial(read_flickr30k, flickr_copy, "train"),
        r"images\[0\]: image 1001: image file .*1001\.jpg",
    )
    assert [r.image_id for r in records] == [1002]


def test_flickr30k_missing_or_malformed_split_file(flickr_copy: Path) -> None:
    karpathy = flickr_copy / "dataset_flickr30k.json"
    karpathy.write_text("{")
    with pytest.raises(DataError, match=r"dataset_flickr30k\.json: malformed JSON"):
        read_flickr30k(flickr_copy, "train", issues=[])
    karpathy.unlink()
    with pytest.raises(DataError, match=r"dataset_flickr30k\.json: file not found"):
        read_flickr30k(flickr_copy, "train", issues=[])


# --------------------------------------------------------------------------- ToyWorld


def _toyworld(root: Path) -> None:
    """A two-image ToyWorld split with counterfactual renders of image 1."""
    world = _small_world()
    world["images"] = world["images"][1:]  # images 1 and 2
    world["captions"] = world["captions"][:4]
    _write_world(root, "test", world)
    index = [
        {"id": 11, "file_name": "counterfactuals/test/000001_dog.png", "source_image_id": 1,
         "removed": ["dog"], "kept": ["person"]},
        {"id": 10, "file_name": "counterfactuals/test/000001_person.png", "source_image_id": 1,
         "removed": ["person"], "kept": ["dog"]},
    ]  # fmt: skip
    for entry in index:
        _draw(root / entry["file_name"], (64, 48), (40, 40, 200))
    (root / "counterfactuals" / "index_test.json").write_text(json.dumps(index))


def test_read_toyworld(tmp_path: Path) -> None:
    _toyworld(tmp_path)
    records = read_toyworld(tmp_path, "test")
    assert read_dataset("toyworld", tmp_path, "test") == records
    assert [(r.image_id, r.path, r.split) for r in records] == [
        (1, tmp_path / "test" / "0001.png", "test"),
        (2, tmp_path / "test" / "0002.png", "test"),
    ]
    assert [dict(o.attributes) for o in records[0].objects] == [{"gender": "female"}, {}]
    assert records[0].categories == {"person", "dog"}


def test_read_counterfactuals(tmp_path: Path) -> None:
    _toyworld(tmp_path)
    cf_dir = tmp_path / "counterfactuals" / "test"
    person, dog = frozenset({"person"}), frozenset({"dog"})
    assert read_counterfactuals(tmp_path, "test") == [
        Counterfactual(10, cf_dir / "000001_person.png", 1, removed=person, kept=dog),
        Counterfactual(11, cf_dir / "000001_dog.png", 1, removed=dog, kept=person),
    ]

    (cf_dir / "000001_dog.png").unlink()
    kept = _raises_or_skips_one(
        partial(read_counterfactuals, tmp_path, "test"),
        r"index_test\.json: counterfactual 11: .*000001_dog\.png",
    )
    assert [c.id for c in kept] == [10]
    with pytest.raises(DataError, match=r"index_val\.json: file not found"):
        read_counterfactuals(tmp_path, "val")


def test_read_dataset_unknown_name(tmp_path: Path) -> None:
    assert DATASETS == ("toyworld", "coco", "flickr30k", "fashiongen")
    with pytest.raises(ValueError, match="toyworld, coco, flickr30k, fashiongen"):
        read_dataset("imagenet", tmp_path, "train")
