"""Storage paths: local folders and object stores (``s3://`` on a loopback S3 server)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from xmr.options import option, resolve_paths
from xmr.storage import (
    ObjectPath,
    StoragePath,
    check_bucket,
    is_uri,
    storage_path,
    write_atomic,
)


@dataclass(frozen=True)
class _Options:
    out: StoragePath | None = option(None, "Where outputs go.")
    data: Path | None = option(None, "A local folder.")

    def __post_init__(self) -> None:
        resolve_paths(self)


def test_a_uri_is_kept_and_a_local_path_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    options = _Options(out="s3://bucket/runs/", data="world")
    assert options.out == ObjectPath("s3://bucket/runs") and str(options.out) == "s3://bucket/runs"
    assert options.data == tmp_path / "world"
    assert _Options(out="runs").out == tmp_path / "runs"
    assert is_uri("gs://b/k") and not is_uri("file:///tmp/x") and not is_uri("runs")
    assert storage_path("file:///tmp/x") == Path("/tmp/x")


def test_a_uri_where_only_a_local_path_is_read_names_the_flag():
    with pytest.raises(ValueError, match=r"^--data takes a local or shared-filesystem path"):
        _Options(data="s3://bucket/world")


def test_object_path_names_like_a_path():
    path = ObjectPath("s3://bucket/a/b/part-00001.parquet")
    assert (path.name, path.stem, path.suffix) == ("part-00001.parquet", "part-00001", ".parquet")
    assert path.parent == ObjectPath("s3://bucket/a/b")
    assert path.with_name("x.json") == ObjectPath("s3://bucket/a/b/x.json")
    assert ObjectPath("s3://bucket") / "a" / "b" == ObjectPath("s3://bucket/a/b")
    with pytest.raises(ValueError, match="not a URI"):
        ObjectPath("s3://")


def test_object_path_writes_reads_lists_and_moves(s3_bucket):
    root = storage_path(f"{s3_bucket}/folder")
    assert not root.exists() and not root.is_dir() and list(root.iterdir()) == []
    (root / "a.json").write_text('{"x": 1}')
    with (root / "b.bin").open("wb") as f:
        f.write(b"\x00\x01")
    with (root / "c.txt").open("w") as f:
        f.write("words")
    pq.write_table(pa.table({"k": [1, 2]}), str(root / "sub" / "t.parquet"))
    assert root.is_dir() and (root / "a.json").is_file() and not (root / "a.json").is_dir()
    assert [p.name for p in root.iterdir()] == ["a.json", "b.bin", "c.txt", "sub"]
    assert [p.name for p in root.glob("*.txt")] == ["c.txt"]
    assert (root / "a.json").read_text() == '{"x": 1}' and (root / "b.bin").read_bytes() == b"\0\1"
    with (root / "c.txt").open("r") as f:
        assert f.read() == "words"
    assert pq.read_table(str(root / "sub" / "t.parquet"))["k"].to_pylist() == [1, 2]
    (root / "c.txt").replace(root / "d.txt")
    assert not (root / "c.txt").exists() and (root / "d.txt").read_text() == "words"
    (root / "d.txt").unlink()
    (root / "d.txt").unlink(missing_ok=True)
    assert not (root / "d.txt").exists()


def test_an_atomic_write_leaves_the_whole_file_or_the_old_one(s3_bucket, tmp_path, monkeypatch):
    """Locally through a temporary file renamed into place (none left behind, also when the
    write fails); in a bucket as one upload."""
    local = tmp_path / "records" / "step.json"
    write_atomic(local, "{}\n")
    write_atomic(local, b"[1]\n")
    assert local.read_text() == "[1]\n" and [p.name for p in local.parent.iterdir()] == [local.name]

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch, pytest.raises(OSError, match="No space"):
        patch.setattr("os.fsync", disk_full)
        write_atomic(local, "[2]\n")
    assert local.read_text() == "[1]\n" and [p.name for p in local.parent.iterdir()] == [local.name]

    remote = storage_path(f"{s3_bucket}/records/step.json")
    write_atomic(remote, "ü\n")
    assert remote.read_text() == "ü\n"


def test_a_missing_bucket_is_refused_with_the_flag_named(s3_bucket):
    check_bucket(storage_path(f"{s3_bucket}/runs"), "--storage")  # there: nothing to say
    check_bucket(Path("runs"), "--storage")  # local: nothing to check
    with pytest.raises(ValueError, match=r"^--storage s3://xmr-nope/runs: bucket s3://xmr-nope "):
        check_bucket(storage_path("s3://xmr-nope/runs"), "--storage")


def test_an_unreachable_store_is_one_line_with_the_flag_named(monkeypatch):
    from ray_cluster import free_port

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing there
    for name, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=r"^--out s3://xmr-unreachable/x: cannot reach the obj"):
        check_bucket(storage_path("s3://xmr-unreachable/x"), "--out")
