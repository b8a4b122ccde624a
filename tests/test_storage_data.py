"""Datasets read from an object store (``--data s3://bucket/coco``) on a loopback S3 server:
the same records, issues and pixels as from the local folder, image paths aside."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.fs as pafs
import pytest

from xmr.benchmarks.binding import read_binding
from xmr.biaug.oracle import ToyWorldOracle
from xmr.data import DataIssue, ImageRecord, dataset_splits, read_counterfactuals, read_dataset
from xmr.data.images import image_size, load_image
from xmr.jobs.odmap import ODmAPJobOptions
from xmr.storage import ObjectPath

FLICKR = Path(__file__).parent / "fixtures" / "flickr30k"


def _upload(local: Path, uri: str) -> ObjectPath:
    """Copy the folder ``local`` to ``uri`` (pyarrow's threaded copy); the folder's path."""
    target = ObjectPath(uri)
    pafs.copy_files(str(local), target.path, destination_filesystem=target.filesystem)
    return target


def _as_local(records: list, remote: ObjectPath, local: Path, field: str = "path") -> list:
    """``records`` with each object path (``field``) turned into its path under ``local``."""
    prefix = f"{remote}/"
    out = []
    for record in records:
        path = getattr(record, field)
        assert isinstance(path, ObjectPath) and str(path).startswith(prefix)
        out.append(replace(record, **{field: local / str(path).removeprefix(prefix)}))
    return out


def _localised(issues: list[DataIssue], remote: ObjectPath, local: Path) -> list[DataIssue]:
    return [
        DataIssue(*(str(text).replace(str(remote), str(local)) for text in issue[:2]), issue[2])
        for issue in issues
    ]


def _same_pixels(remote: ObjectPath, local: Path) -> None:
    expected = np.asarray(load_image(local))
    assert np.array_equal(np.asarray(load_image(remote)), expected)
    assert np.array_equal(np.asarray(load_image(str(remote))), expected)  # a Ray Data row's path
    assert image_size(remote) == image_size(local)


def test_a_toyworld_in_s3_reads_as_it_does_locally(s3_bucket, tmp_path):
    from xmr.toyworld import generate

    config = tmp_path / "world.yaml"
    config.write_text(
        "splits: {train: 2, val: 4, test: 2}\nbinding: {swap_items: 1, counter_items: 0}\n"
    )
    local = generate(tmp_path / "world", config, seed=3)
    (local / "val" / "000000000005.png").unlink()  # missing on both sides
    remote = _upload(local, f"{s3_bucket}/toyworld")

    assert dataset_splits("toyworld", remote) == dataset_splits("toyworld", local)
    missing = {}
    for split in ("val", "test"):
        local_issues: list[DataIssue] = []
        remote_issues: list[DataIssue] = []
        records = read_dataset("toyworld", remote, split, issues=remote_issues)
        assert _as_local(records, remote, local) == read_dataset(
            "toyworld", local, split, issues=local_issues
        )
        assert _localised(remote_issues, remote, local) == local_issues
        missing[split] = [issue.image_id for issue in remote_issues]
    assert missing == {"val": [5], "test": []}

    record = records[0]
    assert ImageRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == record
    _same_pixels(record.path, local / "test" / record.path.name)
    counterfactuals = read_counterfactuals(f"{remote}", "test")  # a URI string works too
    assert _as_local(counterfactuals, remote, local) == read_counterfactuals(local, "test")
    assert ToyWorldOracle(remote).config == ToyWorldOracle(local).config
    binding = read_binding(remote).items
    assert _as_local(binding, remote, local, "image") == list(read_binding(local).items)
    _same_pixels(binding[0].image, local / "binding" / binding[0].image.name)


def test_coco_and_flickr30k_in_s3_read_as_they_do_locally(s3_bucket, tmp_path, request):
    remote = _upload(FLICKR, f"{s3_bucket}/flickr30k")
    for split in ("train", "val", "test"):
        records = read_dataset("flickr30k", remote, split)
        assert _as_local(records, remote, FLICKR) == read_dataset("flickr30k", FLICKR, split)
    _same_pixels(remote / "flickr30k-images" / "1003.jpg", FLICKR / "flickr30k-images/1003.jpg")

    coco_mini = request.getfixturevalue("coco_mini")  # skips here when absent
    local = _coco_sample(coco_mini, tmp_path / "coco", images=4)
    remote = _upload(local, f"{s3_bucket}/coco")
    local_issues: list[DataIssue] = []
    remote_issues: list[DataIssue] = []
    records = read_dataset("coco", remote, "train", issues=remote_issues)
    assert _as_local(records, remote, local) == read_dataset(
        "coco", local, "train", issues=local_issues
    )
    assert len(records) == 3 and len(local_issues) == 1  # the image left out of the folder
    assert _localised(remote_issues, remote, local) == local_issues
    assert "is missing" in local_issues[0].reason
    _same_pixels(records[0].path, local / "train2017" / records[0].path.name)


def _coco_sample(coco_mini: Path, out: Path, images: int) -> Path:
    """The first ``images`` images of coco-mini in COCO layout at ``out``, the last one's file
    left out."""
    kept: list[dict] = []
    for kind in ("instances", "captions"):
        data = json.loads((coco_mini / "annotations" / f"{kind}_train2017.json").read_text())
        kept = sorted(data["images"], key=lambda image: image["id"])[:images]
        ids = {image["id"] for image in kept}
        data["images"] = kept
        data["annotations"] = [a for a in data["annotations"] if a["image_id"] in ids]
        (out / "annotations").mkdir(parents=True, exist_ok=True)
        (out / "annotations" / f"{kind}_train2017.json").write_text(json.dumps(data))
    (out / "train2017").mkdir()
    for image in kept[:-1]:
        name = image["file_name"]
        shutil.copyfile(coco_mini / "train2017" / name, out / "train2017" / name)
    return out


def test_fashiongen_from_an_object_store_is_refused_naming_data():
    message = r"^--data s3://bucket/fg: Fashion-Gen's HDF5 files are read from a local"
    with pytest.raises(ValueError, match=message):
        read_dataset("fashiongen", "s3://bucket/fg", "train")
    with pytest.raises(ValueError, match=message):
        ODmAPJobOptions(dataset="fashiongen", data="s3://bucket/fg")
    assert ODmAPJobOptions(dataset="coco", data="s3://bucket/coco/").data == ObjectPath(
        "s3://bucket/coco"
    )
