"""The manual cannot drift from the code: README's commands are run and parse, and
docs/commands.md is what the command lines say.

- Every command in README.md (its ``bash`` blocks and the jobs of its method table) is listed in
  :data:`COVERED` with the tests that run it, and every test named there exists. ``.ci/run``
  runs the whole suite, so a command covered here is run by CI.
- Every ``xmr`` command and job script in README parses against the current command line (a
  renamed flag or a value of the wrong type fails here).
- The cheap ones run here: each job's plan (``--dry-run``) and ``mlflow ui``.
- docs/commands.md equals ``python docs/make_commands.py``'s output, and docs/imports.md (the
  package import picture, no circle) ``python docs/make_import_graph.py``'s.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import typer
from ray_cluster import free_port
from readme_commands import readme_commands

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
CI = REPO / ".ci" / "run"
HERE = "tests/test_docs.py"

FULL_SUITE = (
    'pip install -e ".[test,groundingdino]" && pip install --no-deps groundingdino-py==0.4.0'
    " && ruff check . && python -m pytest"
)

COVERED: dict[str, tuple[str, ...]] = {
    # Install and tests: .ci/run runs these lines (the install with every extra xmr's tests need).
    "pip install -e .": (".ci/run",),
    'pip install -e ".[groundingdino]" && pip install --no-deps groundingdino-py==0.4.0': (
        ".ci/run",
        "tests/test_groundingdino_py.py::test_detects_with_the_records_of_the_hf_backend",
    ),
    FULL_SUITE: (".ci/run",),
    # A subset of the full suite; its marker is checked here.
    'python -m pytest -m "not slow"': (".ci/run", f"{HERE}::test_the_fast_tier_is_the_slow_marker"),
    # Quickstart: a laptop (at tiny size in the tests).
    "xmr demo": ("tests/test_demo.py::test_demo_runs_the_odmap_job_and_a_rerun_skips_every_step",),
    "xmr eval": ("tests/test_eval.py::test_eval_toyworld_logs_every_metric_and_artifact",),
    "xmr eval --pretrained toy": ("tests/test_eval.py::test_eval_scores_the_toy_clip_zero_shot",),
    "python ray_jobs/odmap.py --pretrained toy --converged": (
        "tests/test_toy_clip.py::test_every_paper_job_finetunes_the_toy_clip_to_convergence",
        f"{HERE}::test_readme_commands_parse_and_the_jobs_print_their_plans",
    ),
    # Quickstart: a cluster.
    "xmr cluster up --nodes 2": (
        "tests/test_cluster_command.py::test_up_runs_a_job_on_both_nodes_and_down_leaves_nothing",
    ),
    'eval "$(xmr cluster env)"': (
        "tests/test_cluster_command.py::test_up_runs_a_job_on_both_nodes_and_down_leaves_nothing",
        "tests/test_cluster_command.py::test_printed_lines_set_the_variables_in_a_shell",
    ),
    "ray job submit --working-dir . -- python ray_jobs/odmap.py --epochs 1 --limit 300": (
        "tests/test_two_nodes.py::test_the_odmap_job_runs_and_its_resubmission_skips_every_step",
        f"{HERE}::test_readme_commands_parse_and_the_jobs_print_their_plans",
    ),
    "xmr cluster down": (
        "tests/test_cluster_command.py::test_up_runs_a_job_on_both_nodes_and_down_leaves_nothing",
    ),
    # Needs AWS: the file passes Ray's cluster-launcher schema and xmr's conventions instead.
    "ray up cluster.yaml": (
        "tests/test_cluster_configs.py::test_launcher_config_passes_rays_schema",
    ),
    # Needs COCO in S3 and GPUs: the same job is submitted to a 2-node cluster on ToyWorld, and
    # these flags parse (test_readme_commands_parse).
    "ray job submit --address http://127.0.0.1:8265 --working-dir . -- python ray_jobs/odmap.py"
    " --dataset coco --data s3://YOUR_BUCKET/coco --storage s3://YOUR_BUCKET/xmr"
    " --gpus-per-worker 1 --workers 4 --fill sd": (
        "tests/test_two_nodes.py::test_the_odmap_job_runs_and_its_resubmission_skips_every_step",
        f"{HERE}::test_readme_commands_parse_and_the_jobs_print_their_plans",
    ),
    "mlflow ui --backend-store-uri sqlite:///mlflow.db": (
        f"{HERE}::test_mlflow_ui_serves_the_store",
    ),
    # The method table's jobs.
    "python ray_jobs/odmap.py": (
        "tests/test_demo.py::test_demo_runs_the_odmap_job_and_a_rerun_skips_every_step",
        f"{HERE}::test_readme_commands_parse_and_the_jobs_print_their_plans",
    ),
    "python ray_jobs/gender.py": (
        "tests/test_jobs.py::test_the_gender_job_sweeps_alpha_then_m_on_the_plain_model_and_draws_both_fronts",
        f"{HERE}::test_readme_commands_parse_and_the_jobs_print_their_plans",
    ),
    "python ray_jobs/eiclip.py": (
        "tests/test_jobs_papers.py::test_the_eiclip_job_trains_clip_and_eiclip_alike_and_compares_both_protocols",
        f"{HERE}::test_readme_commands_parse_and_the_jobs_print_their_plans",
    ),
    "python ray_jobs/biaug.py": (
        "tests/test_jobs_papers.py::test_the_biaug_job_builds_dprime_trains_step_matched_runs_scores_them_and_resumes",
        f"{HERE}::test_readme_commands_parse_and_the_jobs_print_their_plans",
    ),
}  # fmt: skip
"""Each command of README.md and the tests that run it (``.ci/run``: CI runs the line itself)."""


def _test_exists(runner: str) -> bool:
    if runner == ".ci/run":
        return CI.is_file()
    path, _, name = runner.partition("::")
    return re.search(rf"^def {re.escape(name)}\(", (REPO / path).read_text(), re.M) is not None


def test_every_readme_command_is_run_by_a_test() -> None:
    commands = readme_commands(README.read_text())
    assert commands, "no commands found in README.md"
    missing = [c for c in commands if c not in COVERED]
    assert not missing, f"README commands no test runs (add them to COVERED): {missing}"
    stale = sorted(set(COVERED) - set(commands))
    assert not stale, f"COVERED lists commands README no longer has: {stale}"
    unknown = [r for runners in COVERED.values() for r in runners if not _test_exists(r)]
    assert not unknown, f"COVERED names tests that do not exist: {unknown}"


def test_the_full_suite_command_is_what_ci_runs() -> None:
    assert FULL_SUITE in readme_commands(README.read_text())
    assert FULL_SUITE in CI.read_text().splitlines()


def test_the_fast_tier_is_the_slow_marker() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^markers = \[.*"slow:', pyproject, flags=re.M)


def test_readme_commands_parse_and_the_jobs_print_their_plans(tmp_path: Path) -> None:
    """Each xmr command and job of README and docs/, flags and values, as its command line
    reads them; each README job on ToyWorld with --dry-run: it checks its options and prints
    its plan, writing nothing (tests/readme_commands.py, in a fresh interpreter)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_TRACKING_URI": "sqlite:///mlflow.db"}
    env.pop("XMR_STORAGE", None)
    pages = [str(p) for p in sorted((REPO / "docs").rglob("*.md"))]
    ran = subprocess.run(
        [sys.executable, str(REPO / "tests" / "readme_commands.py"), str(README), *pages],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    results = json.loads(ran.stdout.strip().splitlines()[-1])
    assert len(results) >= 10
    for result in results:
        command = f"{Path(result['page']).name}: {shlex.join(result['argv'])}"
        assert result["error"] is None, f"{command}: {result['error']}"
        if "exit_code" in result:
            assert result["exit_code"] == 0, f"{command} --dry-run:\n{result['output']}"
            assert "to do" in result["output"], result["output"]
    dry_runs = [shlex.join(r["argv"]) for r in results if "exit_code" in r]
    # the method table's four, the cluster quickstart's and the toy CLIP's
    assert len(dry_runs) == 6, dry_runs
    assert not list(tmp_path.iterdir()), "a dry run wrote files"


def test_readme_prose_names_real_commands() -> None:
    """Each `xmr …` the README's text names (`xmr synth`, `xmr cluster up`) is a command."""
    from xmr.cli import app

    group = typer.main.get_command(app)
    for span in re.findall(r"`(xmr [a-z][a-z -]*)`", README.read_text()):
        command = group
        for word in span.split()[1:]:
            if not hasattr(command, "commands"):
                break
            assert word in command.commands, f"README names `{span}`: no such command"
            command = command.commands[word]


@pytest.mark.slow  # starts an MLflow server
def test_mlflow_ui_serves_the_store(tmp_path: Path) -> None:
    """README's `mlflow ui` line, on a free port of 127.0.0.1: the UI answers."""
    (line,) = [c for c in readme_commands(README.read_text()) if c.startswith("mlflow ui")]
    port = free_port()
    mlflow = Path(sys.executable).with_name("mlflow")
    argv = [str(mlflow), *shlex.split(line)[1:], "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1"]  # fmt: skip
    log = tmp_path / "mlflow-ui.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            argv, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert server.poll() is None, f"mlflow ui exited:\n{log.read_text()[-3000:]}"
                if time.monotonic() > deadline:
                    pytest.fail(f"mlflow ui did not answer in 300 s:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
        assert (tmp_path / "mlflow.db").is_file()
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and its workers: our own group
        server.wait(timeout=60)


def test_commands_md_is_what_the_command_lines_say() -> None:
    checked = subprocess.run(
        [sys.executable, "docs/make_commands.py", "--check"], cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_import_picture_is_the_code_s_and_has_no_circle() -> None:
    checked = subprocess.run(
        [sys.executable, "docs/make_import_graph.py", "--check"], cwd=REPO,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_readme_is_a_manual_not_a_notebook() -> None:
    assert len(README.read_text().splitlines()) <= 200


def test_links_between_the_docs_resolve() -> None:
    """Each relative link of README.md, docs/ and bench/README.md names a file that exists."""
    pages = [README, REPO / "bench" / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert not broken, "links to nothing:\n" + "\n".join(broken)
