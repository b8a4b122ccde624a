"""Fashion-Gen reader on a tiny file in the real layout: records, entities, HDF5 image paths."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from fashiongen_fixture import write_fashiongen

from xmr.data import DataError, DataIssue, ImageRecord, dataset_splits, read_dataset
from xmr.data.fashiongen import decode_text, read_fashiongen, read_product_ids
from xmr.data.images import image_size, load_image


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, list[dict[str, str]]]:
    """A Fashion-Gen root with both files, and the raw strings of the train file's rows."""
    root = tmp_path_factory.mktemp("fashiongen")
    raw = write_fashiongen(root / "fashiongen_256_256_train.h5", 12, seed=0)
    write_fashiongen(root / "fashiongen_256_256_validation.h5", 5, seed=1)
    return root, raw


@pytest.fixture(scope="module")
def root(written) -> Path:
    return written[0]


def test_records_captions_and_entities(written) -> None:
    root, raw = written
    assert "Comme des Garçons" in {fields["input_brand"] for fields in raw}  # a latin-1 byte
    records = read_dataset("fashiongen", root, "train")
    assert [r.image_id for r in records] == list(range(1, 13))
    train_file = root / "fashiongen_256_256_train.h5"
    for row, (record, fields) in enumerate(zip(records, raw, strict=True)):
        assert str(record.path) == f"{train_file}::{row}"
        assert (record.width, record.height, record.split) == (256, 256, "train")
        assert record.objects == ()
        noun = fields["input_name"].split(" ", 1)[1].lower()
        assert record.caption_texts[0].startswith(f"Long sleeve {noun} in ")
        assert record.caption_texts[0].endswith(". Logo appliqué at chest. Tonal stitching & trim.")
        assert record.captions[0].id == record.image_id
        assert record.entities == {
            "brand": fields["input_brand"].lower(),
            "category": fields["input_category"].lower(),
            "subcategory": fields["input_subcategory"].lower(),
            "season": fields["input_season"].lower(),
            "composition": fields["input_composition"].lower(),
            "gender": fields["input_gender"].lower(),
        }
        assert ImageRecord.from_dict(record.to_dict()) == record
    older = {k: v for k, v in records[0].to_dict().items() if k != "entities"}
    assert ImageRecord.from_dict(older).entities == {}  # dicts from before entities existed


def test_images_load_from_row_paths(root: Path) -> None:
    records = read_fashiongen(root, "train")
    with h5py.File(root / "fashiongen_256_256_train.h5", "r") as file:
        pixels = file["input_image"][:]
    for row in (0, 7, 11):
        image = load_image(records[row].path)
        assert image.mode == "RGB" and image.size == (256, 256)
        np.testing.assert_array_equal(np.asarray(image), pixels[row])
        assert image_size(records[row].path) == (256, 256)


def test_val_alias_splits_and_product_ids(root: Path) -> None:
    val = read_dataset("fashiongen", root, "val")
    assert [r.image_id for r in val] == list(range(1_000_001, 1_000_006))
    assert {r.split for r in val} == {"val"}
    assert str(val[0].path).endswith("fashiongen_256_256_validation.h5::0")
    assert dataset_splits("fashiongen", root) == ["train", "validation"]
    with pytest.raises(ValueError, match=r"no split 'test'.*validation"):
        read_fashiongen(root, "test")
    products = read_product_ids(root, "train")
    assert sorted(products) == list(range(1, 13))
    records = read_fashiongen(root, "train")
    by_product: dict[int, set[str]] = {}
    for record in records:
        by_product.setdefault(products[record.image_id], set()).add(record.caption_texts[0])
    assert len(by_product) < len(records)  # products have several views...
    assert all(len(texts) == 1 for texts in by_product.values())  # ...sharing the description


def test_bad_rows_are_reported_with_row_numbers(tmp_path: Path) -> None:
    path = tmp_path / "fashiongen_256_256_train.h5"
    write_fashiongen(path, 12, seed=2, image_rows=10, empty_rows=(3,))
    issues: list[DataIssue] = []
    records = read_fashiongen(tmp_path, "train", issues=issues)
    assert [r.image_id for r in records] == [1, 2, 3, 5, 6, 7, 8, 9, 10]
    assert [i.item for i in issues] == [f"{path}: row {r}" for r in (3, 10, 11)]
    assert [i.image_id for i in issues] == [4, 11, 12]
    assert "has no words" in issues[0].reason and "only 10 rows" in issues[1].reason
    with pytest.raises(DataError, match=r"train\.h5: row 3: description"):
        read_fashiongen(tmp_path, "train")


def test_missing_file_and_bad_rows_raise_naming_them(tmp_path: Path, root: Path) -> None:
    with pytest.raises(DataError, match=r"fashiongen_256_256_validation\.h5: Fashion-Gen file not"):
        read_fashiongen(tmp_path, "validation")
    missing = tmp_path / "gone.h5"
    for call in (load_image, image_size):
        with pytest.raises(DataError, match=r"gone\.h5: HDF5 file not found"):
            call(f"{missing}::0")
    train = root / "fashiongen_256_256_train.h5"
    for row in ("12", "x", "-1", ""):
        with pytest.raises(DataError, match=rf"train\.h5: row '{row}' is not an image row"):
            load_image(f"{train}::{row}")
    with h5py.File(tmp_path / "fashiongen_256_256_train.h5", "w") as file:
        file.create_dataset("input_image", data=np.zeros((1, 4, 4, 3), np.uint8))
    with pytest.raises(DataError, match=r"train\.h5: no 'input_description' dataset"):
        read_fashiongen(tmp_path, "train")


def test_decoding_and_fixture_determinism(tmp_path: Path) -> None:
    assert decode_text(b"caf\xc3\xa9") == "café"  # valid UTF-8
    assert decode_text(np.bytes_(b"caf\xe9")) == "café"  # latin-1 fallback
    write_fashiongen(tmp_path / "a.h5", 6, seed=3)
    write_fashiongen(tmp_path / "b.h5", 6, seed=3)
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "b.h5").read_bytes()
