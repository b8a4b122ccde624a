"""Shared test fixtures: the real-data fixtures in ``../shared`` (skipped cleanly when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
NLTK_DATA = SHARED / "nltk_data"

# NLTK cannot download here: point it at the shared tagger before anything imports nltk.
if NLTK_DATA.is_dir():
    os.environ["NLTK_DATA"] = str(NLTK_DATA)


@pytest.fixture(scope="session")
def coco_mini() -> Path:
    """80 real COCO train2017 images with instances and captions (COCO layout)."""
    root = SHARED / "data" / "coco-mini"
    if not (root / "annotations" / "instances_train2017.json").is_file():
        pytest.skip("../shared/data/coco-mini is not available")
    return root


@pytest.fixture(scope="session")
def nltk_tagger() -> None:
    """Skip when the offline English POS tagger is not available."""
    if not (NLTK_DATA / "taggers").is_dir():
        pytest.skip("../shared/nltk_data is not available")


@pytest.fixture(scope="session")
def local_ray(s3):
    """A real local Ray (2 CPUs) shared by the tests that need one; shut down at the end. Its
    workers reach the session's S3 server (as a cluster's nodes reach their object store)."""
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # Workers must import stage classes defined in test modules.
    pythonpath = os.pathsep.join(filter(None, [str(REPO / "tests"), os.environ.get("PYTHONPATH")]))
    env = {"PYTHONPATH": pythonpath, "NLTK_DATA": str(NLTK_DATA), **s3.env}
    ray.init(
        num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env}
    )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def small_toyworld(tmp_path_factory) -> Path:
    """A ToyWorld with 120 train images (seed 3): big enough for every removal-plan branch."""
    from xmr.toyworld import generate

    config = tmp_path_factory.mktemp("world-config") / "world.yaml"
    config.write_text("splits: {train: 120, val: 4, test: 4}\n")
    return generate(tmp_path_factory.mktemp("small-toyworld") / "w", config, seed=3)


@pytest.fixture(scope="session")
def s3():
    """An S3-compatible server on 127.0.0.1 (moto), for the whole session; its ``env``
    (endpoint and test credentials) goes to the commands that should reach it."""
    from s3_server import s3_server

    with s3_server() as server:
        yield server


@pytest.fixture
def s3_bucket(s3, monkeypatch) -> str:
    """A new empty bucket (``s3://xmr-…``), with this process's environment pointed at the
    server."""
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    return s3.new_bucket()
