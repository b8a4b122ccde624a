"""Outputs where the user expects them (issue 29, item 5), without Ray.

``ray job submit --working-dir .`` runs a command in Ray's copy of the working dir
(``<ray temp>/session_*/runtime_resources/working_dir_files/_ray_pkg_<hash>/``), which the next
submission replaces and only one node has: an output there (a flag, a relative default, the
default sqlite store) is refused, naming the flag, before anything is written. ``XMR_STORAGE``
roots the default output folders; ``--name`` stays one folder; a job's ``--data`` is checked
by ``--dry-run``; the variables xmr reads are forwarded to a job's workers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from xmr.cli import DemoOptions, app
from xmr.jobs.biaug import BiAugJobOptions, biaug_job
from xmr.jobs.cli import job_app
from xmr.jobs.eiclip import EiClipJobOptions, eiclip_job
from xmr.jobs.gender import GenderJobOptions, gender_job
from xmr.jobs.odmap import ODmAPJobOptions, odmap_job
from xmr.jobs.options import JobOptions
from xmr.storage import ObjectPath, ray_package_copy
from xmr.synth.__main__ import app as synth_app
from xmr.synth.config import load_configs
from xmr.train.options import TrainOptions
from xmr.tune.options import TuneOptions

JOBS = {
    "odmap": (odmap_job, ODmAPJobOptions),
    "gender": (gender_job, GenderJobOptions),
    "biaug": (biaug_job, BiAugJobOptions),
    "eiclip": (eiclip_job, EiClipJobOptions),
}
runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_cluster_settings(monkeypatch) -> None:
    for name in ("XMR_STORAGE", "MLFLOW_TRACKING_URI", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def package_copy(tmp_path: Path, monkeypatch) -> Path:
    """A job's working directory as Ray unpacks ``--working-dir``, made the working directory."""
    copy = tmp_path / "ray/session_1/runtime_resources/working_dir_files/_ray_pkg_5a1f"
    copy.mkdir(parents=True)
    monkeypatch.chdir(copy)
    return copy


def _job(kind: str, *args: str):
    build, options = JOBS[kind]
    return runner.invoke(job_app(build, options, f"The {kind} job."), list(args))


def _refused(result, *parts: str) -> str:
    """The one error line of a refused command, which holds each of ``parts``."""
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and all(part in line for part in parts), line
    return line


def test_a_path_is_in_a_package_copy_only_below_ray_s_working_dir_files() -> None:
    copy = Path("/tmp/ray/session_2/runtime_resources/working_dir_files/_ray_pkg_ab")
    assert ray_package_copy(copy / "xmr-jobs" / "job") == copy
    assert ray_package_copy(copy) == copy
    assert ray_package_copy(Path("/data/_ray_pkg_ab/xmr-jobs")) is None
    assert ray_package_copy(Path("/tmp/ray/session_2/runtime_resources/pip/_ray_pkg_ab")) is None
    assert (
        ray_package_copy(ObjectPath("s3://b/runtime_resources/working_dir_files/_ray_pkg_a"))
        is None
    )


def test_a_job_s_default_storage_in_the_package_copy_is_refused(package_copy: Path) -> None:
    line = _refused(_job("odmap", "--dry-run"), "the default --storage", "XMR_STORAGE")
    assert str(package_copy / "xmr-jobs") in line
    assert not list(package_copy.iterdir())


@pytest.mark.parametrize(
    ("args", "named", "fix"),
    [
        (["--storage", "jobs"], "--storage", "set XMR_STORAGE"),
        (
            ["--storage", "{shared}", "--tracking-uri", "sqlite:///mlflow.db"],
            "--tracking-uri",
            "set MLFLOW_TRACKING_URI",
        ),
        (["--storage", "{shared}"], "the default --tracking-uri", "set MLFLOW_TRACKING_URI"),
    ],
)
def test_a_job_s_outputs_in_the_package_copy_are_refused_naming_the_flag(
    package_copy: Path, tmp_path: Path, args: list[str], named: str, fix: str
) -> None:
    shared = str(tmp_path / "shared")
    args = [arg.replace("{shared}", shared) for arg in args]
    _refused(_job("odmap", "--dry-run", *args), f"error: {named} {package_copy}", fix)
    assert not list(package_copy.iterdir()) and not Path(shared).exists()


def test_a_relative_mlflow_tracking_uri_in_the_package_copy_is_refused(
    package_copy: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")
    storage = str(tmp_path / "shared")
    _refused(_job("odmap", "--dry-run", "--storage", storage), "error: MLFLOW_TRACKING_URI")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    planned = _job("odmap", "--dry-run", "--storage", storage)
    assert planned.exit_code == 0, planned.output
    assert not list(package_copy.iterdir())


@pytest.mark.parametrize(
    ("command", "named"),
    [
        (["train"], "the default --storage"),
        (["tune", "--space", "fair_alpha"], "the default --storage"),
        (["demo"], "the default --workdir"),
        (["synth", "--no-mlflow"], "--out"),
        (["data", "toyworld", "--out", "world"], "--out"),
        (["eval", "--output", "metrics.json"], "--output"),
        (["compare", "--sweep", "s", "--csv", "sweep.csv"], "--csv"),
    ],
)
def test_every_command_refuses_an_output_in_the_package_copy(
    package_copy: Path, tmp_path: Path, monkeypatch, command: list[str], named: str
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    _refused(runner.invoke(app, command), f"error: {named} {package_copy}")
    assert not list(package_copy.iterdir()) and not (tmp_path / "mlflow.db").exists()


def test_the_default_tracking_store_in_the_package_copy_is_refused_unless_unused(
    package_copy: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("XMR_STORAGE", str(tmp_path / "shared"))
    _refused(runner.invoke(app, ["train"]), "error: the default --tracking-uri")
    _refused(runner.invoke(synth_app, ["--limit", "1"]), "error: the default --tracking-uri")
    assert not list(package_copy.iterdir())


def test_xmr_storage_roots_every_default_output_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert JobOptions().storage == tmp_path / "xmr-jobs"  # without it: the working directory
    shared = tmp_path / "shared"
    monkeypatch.setenv("XMR_STORAGE", str(shared))
    assert JobOptions().storage == shared / "xmr-jobs"
    assert TrainOptions().storage == shared / "xmr-runs"
    assert TuneOptions(space="fair_alpha").storage == shared / "xmr-tune"
    assert DemoOptions().workdir == shared / "xmr-demo"
    _, runtime = load_configs(None, {"split": "val"})
    assert runtime.out == shared / "xmr-synth" / "toyworld-val"
    assert runtime.run_name == "toyworld-val"  # the MLflow run is named after it, not at random
    assert JobOptions(storage="jobs").storage == tmp_path / "jobs"  # a flag given wins
    monkeypatch.setenv("XMR_STORAGE", "s3://bucket/xmr")
    assert TrainOptions().storage == ObjectPath("s3://bucket/xmr/xmr-runs")
    assert DemoOptions().workdir == ObjectPath("s3://bucket/xmr/xmr-demo")
    assert not list(tmp_path.iterdir())


def test_a_job_in_the_package_copy_plans_under_xmr_storage(
    package_copy: Path, tmp_path: Path, monkeypatch
) -> None:
    shared = tmp_path / "shared"
    monkeypatch.setenv("XMR_STORAGE", str(shared))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{shared}/mlflow.db")
    planned = _job("odmap", "--dry-run", "--name", "small")
    assert planned.exit_code == 0, planned.output
    assert f"job small in {shared / 'xmr-jobs' / 'small'}" in planned.stdout
    _, runtime = load_configs(None, {})  # python -m xmr.synth without --out
    assert runtime.out == shared / "xmr-synth" / "toyworld-train"
    assert not list(package_copy.iterdir()) and not shared.exists()


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".", "", "x y", "/abs"])
def test_a_name_that_is_not_one_folder_is_refused_by_every_command(name: str) -> None:
    for options in (JobOptions, TrainOptions):
        with pytest.raises(ValueError, match=r"^--name .* must be one folder name"):
            options(name=name)
    with pytest.raises(ValueError, match=r"^--name .* must be one folder name"):
        TuneOptions(space="fair_alpha", name=name)


def test_a_name_of_values_is_one_folder() -> None:
    assert TrainOptions(name="fair_alpha=0.4,seed=1").name == "fair_alpha=0.4,seed=1"
    assert JobOptions(name="odmap-coco-1a2b3c4d").name == "odmap-coco-1a2b3c4d"


def test_a_job_refuses_a_name_outside_storage_naming_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _refused(_job("odmap", "--dry-run", "--name", "../../x"), "error: --name '../../x'")
    _refused(runner.invoke(app, ["train", "--name", "../x"]), "error: --name '../x'")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("kind", sorted(JOBS))
@pytest.mark.parametrize("dry_run", [True, False])
def test_a_job_checks_its_data_before_writing_anything(
    tmp_path: Path, monkeypatch, kind: str, dry_run: bool
) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["--data", str(tmp_path / "missing"), *(["--dry-run"] if dry_run else [])]
    line = _refused(_job(kind, *args), f"error: --data {tmp_path / 'missing'} ")
    # biaug's options look for the world's binding test first, and say it is missing
    assert line.endswith("is not a folder") or "has no binding test" in line
    assert not list(tmp_path.iterdir())  # no xmr-jobs/, job.json or mlflow.db


def test_the_demo_checks_its_data_before_writing_anything(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    _refused(runner.invoke(app, ["demo", "--data", "missing"]), "is not a folder")
    assert not list(tmp_path.iterdir())


def test_the_variables_xmr_reads_are_forwarded_without_secrets(tmp_path: Path, monkeypatch) -> None:
    from xmr.job_env import forwarded_env

    monkeypatch.chdir(tmp_path)
    environ = {
        "NLTK_DATA": "nltk",
        "MLFLOW_TRACKING_URI": "sqlite:///runs.db",
        "XMR_STORAGE": "shared",
        "XMR_CACHE_DIR": "/cache",
        "XMR_REF": "abc123",
        "XMR_API_KEY": "secret",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "id",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_SESSION_TOKEN": "secret",
        "HOME": "/root",
    }
    assert forwarded_env(environ) == {
        "NLTK_DATA": str(tmp_path / "nltk"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'runs.db'}",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_REGION": "eu-west-1",
        "XMR_CACHE_DIR": "/cache",
        "XMR_REF": "abc123",
        "XMR_STORAGE": str(tmp_path / "shared"),
    }
    assert forwarded_env({"XMR_STORAGE": "s3://bucket/xmr/"}) == {"XMR_STORAGE": "s3://bucket/xmr"}


def test_xmr_job_env_prints_a_runtime_env_for_ray_job_submit(monkeypatch) -> None:
    monkeypatch.setenv("XMR_STORAGE", "s3://bucket/xmr")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    printed = runner.invoke(app, ["job-env"])
    assert printed.exit_code == 0, printed.output
    env_vars = json.loads(printed.stdout)["env_vars"]
    assert env_vars["XMR_STORAGE"] == "s3://bucket/xmr" and "AWS_SECRET_ACCESS_KEY" not in env_vars


def test_a_job_s_driver_forwards_only_what_the_job_does_not_set(monkeypatch) -> None:
    """Ray refuses a ``ray.init(runtime_env=...)`` in a job's driver that sets an env var the
    job's runtime env (``ray job submit --runtime-env-json``) sets too."""
    from ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR

    from xmr.pipeline.ray_executor import worker_env_vars, worker_runtime_env

    monkeypatch.setenv("NLTK_DATA", "/nltk")
    monkeypatch.setenv("XMR_STORAGE", "/shared")
    monkeypatch.delenv(RAY_JOB_CONFIG_JSON_ENV_VAR, raising=False)
    assert {"NLTK_DATA", "XMR_STORAGE"} <= set(worker_env_vars())
    job = {"runtime_env": {"env_vars": {"NLTK_DATA": "/nltk"}, "working_dir": "gcs://x.zip"}}
    monkeypatch.setenv(RAY_JOB_CONFIG_JSON_ENV_VAR, json.dumps(job))
    forwarded = worker_runtime_env()
    assert forwarded is not None and "NLTK_DATA" not in forwarded["env_vars"]
    assert forwarded["env_vars"]["XMR_STORAGE"] == "/shared"
