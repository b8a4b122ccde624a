"""`python -m xmr.synth` as users run it: killed mid-way and rerun, and a worker killed mid-build.

Through `ray job submit` on a running cluster: tests/test_two_nodes.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import NLTK_DATA

from xmr.data.synthetic import read_manifest, read_synthetic
from xmr.synth.config import load_configs
from xmr.synth.methods import synthesize
from xmr.synth.runner import ray_executor

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update({"NLTK_DATA": str(NLTK_DATA), "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1"})
    return env


def _rows(out: Path) -> list[tuple]:
    return [(p.key, p.image, p.caption) for p in read_synthetic(out)]


def _synth_args(world: Path, out: Path) -> list[str]:
    return [
        "--data", str(world), "--out", str(out), "--rows-per-shard", "4", "--batch-size", "4",
        "--caption", "prompt", "--fill", "ns", "--no-progress", "--no-mlflow", "--num-cpus", "2",
    ]  # fmt: skip


OPTIONS = {"rows_per_shard": 4, "batch_size": 4, "caption": "prompt", "fill": "ns",
           "progress": False, "log_mlflow": False}  # fmt: skip


@pytest.fixture(scope="module")
def reference(small_toyworld, local_ray, tmp_path_factory) -> Path:
    """The uninterrupted build of the options both tests use, in this process's Ray."""
    out = tmp_path_factory.mktemp("reference") / "out"
    _synthesize(small_toyworld, out)
    return out


def _synthesize(world: Path, out: Path):
    config, runtime = load_configs(None, {**OPTIONS, "data": world, "out": out})
    return synthesize(config, runtime, executor=ray_executor(runtime))


# The driver SIGKILLs its local Ray and then itself right after committing its third shard: the
# crash of a kill from outside, at a point the test chooses rather than one a race chooses.
_CRASH_AFTER_THIRD_SHARD = """
import os, runpy, signal, sys
import psutil
import xmr.synth.runner as runner

commit, committed = runner.commit_shard, []

def commit_then_crash(*args, **kwargs):
    commit(*args, **kwargs)
    committed.append(args[1])
    if len(committed) == 3:
        for child in psutil.Process().children(recursive=True):
            child.kill()
        os.kill(os.getpid(), signal.SIGKILL)

runner.commit_shard = commit_then_crash
sys.argv = ["xmr.synth", *sys.argv[1:]]
runpy.run_module("xmr.synth", run_name="__main__")
"""


def test_killed_build_resumes_to_the_uninterrupted_output(
    small_toyworld, local_ray, reference, tmp_path
) -> None:
    """``python -m xmr.synth`` killed (driver and its Ray) after its third shard; the same
    build again (here, in this process's Ray) commits only the missing shards."""
    total = read_manifest(reference)["counts"]["shards"]

    out = tmp_path / "out"
    crashed = subprocess.run(
        [sys.executable, "-c", _CRASH_AFTER_THIRD_SHARD, *_synth_args(small_toyworld, out)],
        env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600,
    )  # fmt: skip
    assert crashed.returncode == -signal.SIGKILL
    committed = len(list((out / "data").glob("part-*.parquet")))
    assert committed == 3 < total
    assert not (out / "manifest.json").exists()

    _synthesize(small_toyworld, out)
    manifest = read_manifest(out)
    assert manifest["counts"]["shards_resumed"] == committed
    assert manifest["planned"] == manifest["written"] + manifest["errors"]
    assert _rows(out) == _rows(reference)
    assert not list(out.rglob("*.tmp"))


def test_a_worker_killed_mid_build_costs_nothing(
    small_toyworld, local_ray, reference, tmp_path
) -> None:
    """Ray retries the task of a worker that dies; the output is still complete and exact."""
    import threading

    out = tmp_path / "out"
    killed: list[int] = []

    def kill_one_fill_worker() -> None:
        deadline = time.monotonic() + 120
        while not killed and time.monotonic() < deadline:
            # a worker of this session's Ray (under this process) while it runs a fill task
            for p in psutil.Process().children(recursive=True):
                try:
                    title = " ".join(p.cmdline())
                except psutil.Error:
                    continue
                if title.startswith("ray::MapBatches") and "_run_task" in title:
                    p.kill()
                    killed.append(p.pid)
                    break
            time.sleep(0.01)

    killer = threading.Thread(target=kill_one_fill_worker)
    killer.start()
    result = _synthesize(small_toyworld, out)
    killer.join()
    assert killed, "no fill worker was found running"
    assert result.manifest["planned"] == result.manifest["written"] + result.manifest["errors"]
    assert _rows(out) == _rows(reference)
