"""Where pretrained models come from (:mod:`xmr.pretrained`): a Hub id or a local folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from xmr.pretrained import local_model_dir, resolve_device


def test_a_hub_id_is_not_a_folder_and_a_folder_is(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert local_model_dir("Salesforce/blip-image-captioning-base") is None
    (tmp_path / "weights").mkdir()
    assert local_model_dir("./weights") == Path("./weights")
    assert local_model_dir(str(tmp_path / "weights")) == tmp_path / "weights"


@pytest.mark.parametrize(
    ("name", "problem"), [("./missing", "does not exist"), ("./file", "is not a directory")]
)
def test_a_path_that_is_no_folder_is_named(
    tmp_path: Path, monkeypatch, name: str, problem: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileNotFoundError, match=f"model folder '{name}' {problem}"):
        local_model_dir(name)


def test_auto_is_the_gpu_when_torch_sees_one() -> None:
    import torch

    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == "cpu"
