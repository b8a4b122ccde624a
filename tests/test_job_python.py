"""A job's Python (issue 47): ``xmr cluster up`` gives its nodes xmr's interpreter, and a job
script started by another one says so in one line, exit 2, before any work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xmr.cluster import ClusterState, _node_env

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ray_jobs"))
from _xmr_python import interpreter_problem as _interpreter_problem

REPO = Path(__file__).resolve().parents[1]
JOBS = sorted(p.name for p in (REPO / "ray_jobs").glob("[!_]*.py"))


def _run(python: str, job: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, str(REPO / "ray_jobs" / job), "--help"],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=300,
    )  # fmt: skip


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XMR_PYTHON")}
    return {**env, **extra}


@pytest.mark.parametrize("job", JOBS)
def test_every_job_script_checks_its_python_before_importing_xmr(job: str) -> None:
    lines = (REPO / "ray_jobs" / job).read_text().splitlines()
    check = lines.index("require_xmr_python()")
    imports = [i for i, line in enumerate(lines) if line.startswith(("from xmr.", "import xmr"))]
    assert imports and check < min(imports)


def test_a_job_under_a_python_without_xmr_says_so_in_one_line(tmp_path: Path) -> None:
    base = getattr(sys, "_base_executable", "")
    if sys.prefix == sys.base_prefix or not base:
        pytest.skip("needs a virtual environment, whose base Python has no xmr")
    out = _run(base, "gender.py", _clean_env(), tmp_path)
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"error: {base} cannot import xmr: run it with the Python xmr is")


def test_a_job_under_another_python_than_the_clusters_says_which(tmp_path: Path) -> None:
    other = "/opt/another-venv/bin/python"
    out = _run(sys.executable, "odmap.py", _clean_env(XMR_PYTHON=other), tmp_path)
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert line == (
        f"error: this job runs under {sys.executable} (prefix {sys.prefix}), not {other}: "
        f"run the job as `{other} ray_jobs/...`"
    )
    here = str(Path(sys.executable).parent / "python3")  # another name, the same environment
    assert _interpreter_problem(sys.executable, sys.prefix, here) is None


def test_cluster_nodes_get_this_interpreter_first_on_path(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # a shell whose venv is not activated
    env = _node_env(ClusterState(folder=str(tmp_path), temp_dir="/tmp/x"), "token")
    assert env["PATH"].split(os.pathsep)[:2] == [str(Path(sys.executable).parent), "/usr/bin"]
    assert env["XMR_PYTHON"] == sys.executable
