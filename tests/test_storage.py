"""Storage paths: local folders and object stores (``s3://`` on a loopback S3 server)."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from xmr.fields import option, resolve_paths
from xmr.storage import (
    ObjectPath,
    StoragePath,
    check_bucket,
    check_reachable,
    connect_timeout,
    is_uri,
    storage_path,
    store_endpoint,
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


# --- failing fast on a store that cannot be reached -------------------------------------------
SLACK_S = 4
"""How much longer than its timeout a refusal may take on a busy machine: a bound that says
"fails fast rather than hangs" (pyarrow's own retries took 20 s or more), not a timing."""


def _point_s3_at(monkeypatch, endpoint: str, timeout: str = "1") -> None:
    """This process's ``s3://`` at ``endpoint``, with test credentials and ``timeout`` s."""
    for name, value in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "x",
                        "AWS_SECRET_ACCESS_KEY": "y", "AWS_DEFAULT_REGION": "us-east-1",
                        "XMR_STORAGE_CONNECT_TIMEOUT": timeout}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)


def _new_bucket() -> str:
    """A bucket name no earlier test opened (a reachable one is cached per process)."""
    return f"s3://xmr-{uuid.uuid4().hex[:12]}"


@contextmanager
def _silent_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a socket that listens and never answers: the kernel
    accepts the connection, nothing reads the request or replies."""
    with socket.create_server(("127.0.0.1", 0), backlog=8) as server:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


def _refusal(target: StoragePath, flag: str) -> tuple[str, float]:
    """``check_bucket``'s refusal of ``target`` and the seconds it took."""
    started = time.monotonic()
    with pytest.raises(ValueError) as refused:
        check_bucket(target, flag)
    return str(refused.value), time.monotonic() - started


def test_a_closed_port_is_refused_at_once_naming_the_endpoint(monkeypatch):
    from ray_cluster import free_port

    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    _point_s3_at(monkeypatch, endpoint)
    bucket = _new_bucket()
    message, took = _refusal(storage_path(f"{bucket}/runs"), "--storage")
    assert message == (
        f"--storage {bucket}/runs: cannot reach the object store ({endpoint}: connection "
        f"refused; endpoint from AWS_ENDPOINT_URL={endpoint}; AWS_ENDPOINT_URL / "
        "AWS_ENDPOINT_URL_S3 (an S3-compatible server) or AWS_REGION / AWS_DEFAULT_REGION "
        "(AWS) set it; XMR_STORAGE_CONNECT_TIMEOUT=1 s is the wait, 0 no check)"
    )
    assert took < 1 + SLACK_S, took
    # http(s)://: the URI's own host and port
    message, took = _refusal(storage_path(f"{endpoint}/data"), "--data")
    assert message.startswith(f"--data {endpoint}/data: cannot reach the object store (")
    assert f"{endpoint}: connection refused; endpoint from the URI;" in message
    assert took < 1 + SLACK_S, took


def test_an_endpoint_that_never_answers_is_refused_after_the_timeout(monkeypatch):
    with _silent_endpoint() as endpoint:
        _point_s3_at(monkeypatch, endpoint, timeout="1")
        bucket = _new_bucket()
        message, took = _refusal(storage_path(f"{bucket}/x"), "--out")
    assert message.startswith(f"--out {bucket}/x: cannot reach the object store ({endpoint}: ")
    assert "no answer within 1 s; endpoint from AWS_ENDPOINT_URL=" in message
    assert "\n" not in message
    assert took < 1 + SLACK_S, took


def test_a_command_refuses_an_unreachable_store_before_ray_starts(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    import xmr.pipeline.ray_executor
    from xmr.cli import app

    def no_ray(*args: object, **kwargs: object) -> None:
        raise AssertionError("Ray was started")

    monkeypatch.setattr(xmr.pipeline.ray_executor, "init_ray", no_ray)
    with _silent_endpoint() as endpoint:
        _point_s3_at(monkeypatch, endpoint, timeout="1")
        bucket = _new_bucket()
        result = CliRunner().invoke(app, ["synth", "--out", f"{bucket}/d"])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith(f"error: --out {bucket}/d: cannot reach the object store ("), lines
    assert "no answer within 1 s" in lines[0]


def test_the_wait_is_set_by_a_variable_and_zero_turns_the_check_off(monkeypatch):
    from ray_cluster import free_port

    assert connect_timeout({}) == 5.0 and connect_timeout({"XMR_STORAGE_CONNECT_TIMEOUT": "2"}) == 2
    for bad in ("soon", "-1", "nan", "inf"):
        with pytest.raises(ValueError, match=r"^XMR_STORAGE_CONNECT_TIMEOUT must be a number"):
            connect_timeout({"XMR_STORAGE_CONNECT_TIMEOUT": bad})
    _point_s3_at(monkeypatch, f"http://127.0.0.1:{free_port()}", timeout="0")
    check_reachable("s3", _new_bucket().removeprefix("s3://"))  # not asked: nothing to say


def test_the_endpoint_is_where_pyarrow_sends_requests():
    assert store_endpoint("s3", "b", {"AWS_ENDPOINT_URL": "http://h:1",
                                      "AWS_ENDPOINT_URL_S3": "https://s3.h"}) == (
        "https", "s3.h", 443, "AWS_ENDPOINT_URL_S3=https://s3.h")  # fmt: skip
    assert store_endpoint("s3", "b?endpoint_override=h:9000&scheme=http", {})[:3] == (
        "http", "h", 9000)  # fmt: skip
    assert store_endpoint("s3", "b", {})[1:3] == ("s3.amazonaws.com", 443)
    assert store_endpoint("s3", "b", {"AWS_REGION": "cn-north-1"})[1] == (
        "s3.cn-north-1.amazonaws.com.cn")  # fmt: skip
    assert store_endpoint("http", "h", {})[:3] == ("http", "h", 80)
    assert store_endpoint("gs", "b", {}) is None  # not checked


def test_a_reachable_store_passes_the_check(s3_bucket, monkeypatch):
    monkeypatch.setenv("XMR_STORAGE_CONNECT_TIMEOUT", "1")
    check_reachable("s3", s3_bucket.removeprefix("s3://"))
    check_bucket(storage_path(f"{s3_bucket}/runs"), "--storage")
    (storage_path(f"{s3_bucket}/runs") / "a.txt").write_text("here")
    assert (storage_path(f"{s3_bucket}/runs") / "a.txt").read_text() == "here"
