"""``xmr synth --data s3://… --out s3://…``: D′ built from a world in an object store (a loopback
S3 server) and written there, read back from there with the D′ reader, and a rerun that reuses
the finished build."""

from __future__ import annotations

import os
import subprocess
import sys

import mlflow
import pyarrow.fs as pafs
import pytest
from conftest import NLTK_DATA

from xmr.data.errors import DataError
from xmr.data.synthetic import read_manifest, read_synthetic, read_synthetic_errors
from xmr.llm import ChatRequest, LLMSpec, ResponseCache, cache_key
from xmr.storage import ObjectPath
from xmr.synth.output import (
    PLAN_ERRORS,
    check_out_dir,
    commit_shard,
    count_written,
    error_table,
    finished_shards,
    merge_errors,
    write_table_atomic,
)


def test_shards_commit_and_resume_in_an_object_store(s3_bucket) -> None:
    out = ObjectPath(f"{s3_bucket}/dprime")
    check_out_dir(out)  # a new folder
    shards = [["a", "b"], ["c"]]
    failed = {"key": "b", "stage": "fill", "error_type": "DataError", "message": "unreadable"}
    commit_shard(out, 0, [{"key": "a"}], [failed])
    assert finished_shards(out, shards) == {0}
    check_out_dir(out)  # a build's own folder
    commit_shard(out, 1, [{"key": "c"}], [])
    write_table_atomic(error_table([]), out / PLAN_ERRORS)
    assert finished_shards(out, shards) == {0, 1}
    assert count_written(out, 2) == 2
    assert merge_errors(out, [], 2)["key"].to_pylist() == ["b"]
    with pytest.raises(DataError, match="is beyond this plan's 1 shards"):
        finished_shards(out, shards[:1])
    (out.parent / "foreign.txt").write_text("not ours")
    with pytest.raises(DataError, match=r"^--out s3://.* is not empty"):
        check_out_dir(out.parent)
    with pytest.raises(ValueError, match=r"^--out s3://xmr-missing-bucket/x: bucket .* not exist"):
        check_out_dir(ObjectPath("s3://xmr-missing-bucket/x"))


def test_llm_answers_are_cached_in_an_object_store(s3_bucket) -> None:
    spec = LLMSpec(model="m", cache_dir=f"{s3_bucket}/dprime/llm_cache")
    assert spec.cache_dir == ObjectPath(f"{s3_bucket}/dprime/llm_cache")
    key = cache_key("openai", "m", ChatRequest(messages=[["user", "a question"]], max_tokens=8))
    writer = ResponseCache(spec.cache_dir)
    assert writer.get(key) is None
    writer.put(key, "an answer\n")
    assert ResponseCache(f"{s3_bucket}/dprime/llm_cache").get(key) == "an answer\n"
    assert writer.path(key).parent.parent.parent == spec.cache_dir


@pytest.mark.slow
def test_synth_writes_dprime_to_s3_reads_it_back_and_reuses_it(
    small_toyworld, s3, monkeypatch, tmp_path
) -> None:
    bucket = s3.new_bucket()
    out = f"{bucket}/dprime"
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    world = ObjectPath(f"{bucket}/world")  # the input in the bucket too: read by Ray Data actors
    pafs.copy_files(str(small_toyworld), world.path, destination_filesystem=world.filesystem)
    env = {**os.environ, **s3.env, "RAY_AUTH_MODE": "disabled", "NLTK_DATA": str(NLTK_DATA)}
    env.pop("RAY_ADDRESS", None)
    command = [
        sys.executable, "-m", "xmr.cli", "synth", "--data", str(world), "--out", out,
        "--limit", "12", "--rows-per-shard", "4", "--batch-size", "4", "--fill", "ns",
        "--no-progress", "--num-cpus", "2",
    ]  # fmt: skip
    first = subprocess.run(
        [*command, "--no-mlflow"], env=env, capture_output=True, text=True, timeout=300
    )
    assert first.returncode in (0, 1), first.stderr[-3000:]

    manifest = read_manifest(out)
    pairs = read_synthetic(out)
    errors = read_synthetic_errors(out)
    assert len(pairs) == manifest["written"] > 0
    assert manifest["planned"] == len(pairs) + errors.num_rows
    assert all(min(pair.decode().size) > 0 for pair in pairs)
    assert (ObjectPath(out) / "samples.png").is_file()

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    again = subprocess.run(
        [*command, "--tracking-uri", uri], env=env, capture_output=True, text=True, timeout=300
    )
    assert again.returncode in (0, 1), again.stderr[-3000:]
    rerun = read_manifest(out)
    assert rerun["counts"]["rows_this_run"] == 0
    assert rerun["counts"]["shards_resumed"] == rerun["counts"]["shards"] > 0
    assert [p.key for p in read_synthetic(out)] == [p.key for p in pairs]
    mlflow.set_tracking_uri(uri)
    (run,) = mlflow.search_runs(experiment_names=["xmr/synth/toyworld"], output_format="list")
    assert run.data.params["synth.out"] == out
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"manifest.json", "samples.png"} <= artifacts
