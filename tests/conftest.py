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
