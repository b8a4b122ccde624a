"""GroundingDINO detection: prompts, label -> class mapping, chunking, and a tiny real model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from tiny_grounding_dino import TEXT_LENGTH, build_tiny_grounding_dino
from transformers import AutoProcessor

from xmr.detection import (
    DEFAULT_DETECTOR,
    Detection,
    GroundingDinoDetector,
    chunk_classes,
    grounding_prompt,
    match_class,
)
from xmr.text.class_words import COCO_CLASSES
from xmr.toyworld.scene.classes import CLASSES

TOY = tuple(CLASSES)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_grounding_dino(tmp_path_factory.mktemp("grounding_dino"))


@pytest.fixture(scope="module")
def images() -> list[Image.Image]:
    """Two noise images of different sizes and modes: 128 x 128 RGB and 200 x 150 greyscale."""
    rng = np.random.default_rng(0)
    return [
        Image.fromarray(rng.integers(0, 256, (128, 128, 3), dtype=np.uint8)),
        Image.fromarray(rng.integers(0, 256, (150, 200), dtype=np.uint8)),  # mode "L"
    ]


def _check_detections(
    found: list[list[Detection]], images: list[Image.Image], classes: tuple[str, ...]
) -> None:
    assert len(found) == len(images)
    for image, detections in zip(images, found, strict=True):
        assert detections, "the random tiny model keeps boxes at a low box threshold"
        assert [d.score for d in detections] == sorted((d.score for d in detections), reverse=True)
        for d in detections:
            x, y, w, h = d.bbox
            assert d.category in classes
            assert w > 0 and h > 0
            assert x >= 0 and x + w <= image.width and y >= 0 and y + h <= image.height
            assert 0.01 < d.score <= 1


def test_prompt_format() -> None:
    assert grounding_prompt(["cat", "dog"]) == "cat . dog ."
    assert grounding_prompt(["Sports  Ball", "Dining Table"]) == "sports ball . dining table ."
    assert DEFAULT_DETECTOR == "IDEA-Research/grounding-dino-tiny"


@pytest.mark.parametrize(
    "classes", [[], "cat", ["cat", "Cat"], ["cat", ""], ["st. bernard"], ["why?"], ["-"]]
)
def test_bad_class_lists_are_refused(classes: list[str] | str) -> None:
    with pytest.raises(ValueError):
        grounding_prompt(classes)
    with pytest.raises(ValueError):
        GroundingDinoDetector(classes)


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("dog", "dog"),  # exact
        ("Sports Ball.", "sports ball"),  # case and punctuation ignored
        ("a dog", "dog"),  # contains one class
        ("dog cat", "dog"),  # merged: equal length, first in the label
        ("cat dog", "cat"),
        ("cat. sports ball.", "sports ball"),  # merged: the longest name
        ("hot dog", "hot dog"),  # exact beats the contained "dog"
        ("a hot dog", "hot dog"),  # longest contained
        ("ball", "sports ball"),  # partial phrase of exactly one class
        ("table", None),  # partial phrase of two classes: ambiguous
        ("carrot", None),  # "car" is a word, not a substring match
        ("zebra", None),  # unknown
        ("", None),
        (". .", None),
    ],
)
def test_label_to_class(label: str, expected: str | None) -> None:
    classes = ["dog", "cat", "sports ball", "hot dog", "dining table", "coffee table", "car"]
    assert match_class(label, classes) == expected


def test_chunks_fit_the_limit_and_keep_order() -> None:
    def count(prompt: str) -> int:
        return len(prompt.split()) + 2

    classes = ["cat", "dog", "sports ball", "horse", "dining table"]
    chunks = chunk_classes(classes, count, 9)  # "cat . dog . sports ball ." is 7 words + 2
    assert chunks == [("cat", "dog", "sports ball"), ("horse", "dining table")]
    assert all(count(grounding_prompt(chunk)) <= 9 for chunk in chunks)
    assert chunk_classes(classes, count, 100) == [tuple(classes)]
    with pytest.raises(ValueError, match="sports ball"):
        chunk_classes(classes, count, 4)  # "cat ." fits, "sports ball ." does not


@pytest.mark.parametrize("name", ["box_threshold", "text_threshold"])
@pytest.mark.parametrize("value", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_thresholds_must_be_in_the_open_unit_interval(name: str, value: float) -> None:
    with pytest.raises(ValueError, match=name):
        GroundingDinoDetector(TOY, **{name: value})


def test_missing_model_directory_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    detector = GroundingDinoDetector(TOY, str(missing))  # construction reads nothing
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        detector.load()
    a_file = tmp_path / "a-file"
    a_file.write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"a-file.* is not a directory"):
        GroundingDinoDetector(TOY, str(a_file)).load()


def test_directory_without_a_checkpoint_is_named(tmp_path: Path) -> None:
    empty = tmp_path / "empty-dir"
    empty.mkdir()
    with pytest.raises(RuntimeError, match="empty-dir"):
        GroundingDinoDetector(TOY, str(empty), device="cpu").load()


def test_tiny_model_detects_a_batch_of_different_sizes(
    tiny_dir: Path, images: list[Image.Image]
) -> None:
    detector = GroundingDinoDetector(TOY, str(tiny_dir), device="cpu", box_threshold=0.01).load()
    assert detector.chunks == [TOY]  # the 12 ToyWorld classes fit one prompt
    found = detector.detect(images)
    _check_detections(found, images, TOY)
    # Boxes are in the original 200 x 150 pixels, not the processor's 170 x 128 resize.
    assert max(d.bbox[0] + d.bbox[2] for d in found[1]) > 170
    assert detector.detect(images) == found  # deterministic
    assert detector.detect([]) == []


def test_default_thresholds_load_on_first_detect(tiny_dir: Path, images: list[Image.Image]) -> None:
    detector = GroundingDinoDetector(["dog", "frisbee", "person"], str(tiny_dir), device="cpu")
    found = detector.detect(images[:1])
    assert len(found) == 1
    assert all(d.score > 0.35 and d.category in {"dog", "frisbee", "person"} for d in found[0])


def test_many_classes_are_split_into_prompts_that_fit(
    tiny_dir: Path, images: list[Image.Image]
) -> None:
    detector = GroundingDinoDetector(COCO_CLASSES, str(tiny_dir), box_threshold=0.01).load()
    tokenizer = AutoProcessor.from_pretrained(tiny_dir).tokenizer
    assert len(detector.chunks) > 1
    assert [name for chunk in detector.chunks for name in chunk] == list(COCO_CLASSES)
    assert all(
        len(tokenizer(grounding_prompt(chunk)).input_ids) <= TEXT_LENGTH
        for chunk in detector.chunks
    )
    found = detector.detect(images)
    _check_detections(found, images, COCO_CLASSES)
    # Every chunk contributes: each prompt's boxes are kept, each labelled from its own chunk.
    categories = {d.category for detections in found for d in detections}
    assert all(categories & set(chunk) for chunk in detector.chunks)
