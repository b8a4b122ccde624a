"""The model registry and the ``clip`` family on the built-in ``xmr-tiny`` (random init, CPU)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from xmr.models import (
    CheckpointError,
    ModelSpec,
    RetrievalModel,
    create_model,
    list_archs,
    list_models,
    save_checkpoint,
)

TEXTS = ["a dog catching a red frisbee on the grass", "two people riding horses on a beach"]


class Payload:
    """An arbitrary object: pickling it into a checkpoint must make the file unloadable."""

    def __init__(self) -> None:
        self.command = "rm -rf /"


def _images() -> list[Image.Image]:
    rng = np.random.default_rng(0)
    return [
        Image.fromarray(rng.integers(0, 256, (80, 100, 3), dtype=np.uint8)),
        Image.fromarray(rng.integers(0, 256, (64, 64), dtype=np.uint8), mode="L"),
        Image.fromarray(rng.integers(0, 256, (128, 96, 4), dtype=np.uint8), mode="RGBA"),
    ]


@pytest.fixture(scope="module")
def tiny() -> RetrievalModel:
    return create_model("clip", arch="xmr-tiny", pretrained="none", seed=0)


@pytest.fixture(scope="module")
def pixels(tiny: RetrievalModel) -> torch.Tensor:
    return torch.stack([tiny.preprocess(image) for image in _images()])


def test_families_and_archs() -> None:
    assert list_models() == ["blip", "clip", "eiclip", "vsepp"]
    archs = list_archs("clip")
    assert {"xmr-tiny", "RN50", "ViT-B-32"} <= set(archs)
    assert archs == sorted(archs)


def test_clip_archs_are_open_clips_registry() -> None:
    """The arch check reads the config files as open_clip's registry does."""
    from xmr.models.clip import registered_open_clip

    assert list_archs("clip") == sorted(registered_open_clip().list_models())
    assert list_archs("eiclip") == list_archs("clip")


def test_checking_a_spec_imports_no_model_library() -> None:
    """A command checks its model (and a Ray driver prepares its work) without the seconds of
    importing open_clip, torchvision and transformers: only the workers that build it do."""
    check = (
        "import sys\n"
        "from xmr.models import ModelSpec, check_spec, needs_corpus\n"
        "for family, arch in [('clip', 'ViT-B-32'), ('eiclip', 'ViT-B-32'),\n"
        "                     ('blip', 'blip-itm-base-coco')]:\n"
        "    check_spec(ModelSpec(family, arch))\n"
        "    needs_corpus(ModelSpec(family, arch))\n"
        "heavy = ('open_clip', 'torchvision', 'transformers')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stderr[-2000:]


def test_xmr_tiny_shapes_and_unit_norm(tiny: RetrievalModel, pixels: torch.Tensor) -> None:
    assert tiny.name == "clip/xmr-tiny"
    assert (tiny.embed_dim, tiny.image_size) == (128, 64)
    assert pixels.shape == (3, 3, 64, 64) and pixels.dtype == torch.float32
    images = tiny.encode_images(pixels)
    texts = tiny.encode_texts(TEXTS)
    for features, n in ((images, 3), (texts, 2)):
        assert features.shape == (n, 128) and features.dtype == torch.float32
        assert not features.requires_grad
        torch.testing.assert_close(features.norm(dim=-1), torch.ones(n))
    assert tiny.device == torch.device("cpu")


def test_text_context_length_comes_from_the_config(tiny: RetrievalModel) -> None:
    import open_clip

    assert open_clip.get_tokenizer("xmr-tiny").context_length == 32
    long = " ".join(["dog"] * 100)  # longer than the context: truncated, not an error
    assert tiny.encode_texts([long]).shape == (1, 128)


def test_same_seed_same_model(tiny: RetrievalModel, pixels: torch.Tensor) -> None:
    rng_before = torch.get_rng_state()
    again = create_model(ModelSpec("clip", "xmr-tiny"), seed=0)
    other = create_model(ModelSpec("clip", "xmr-tiny"), seed=1)
    assert torch.equal(torch.get_rng_state(), rng_before)  # the caller's RNG is untouched
    torch.testing.assert_close(again.encode_images(pixels), tiny.encode_images(pixels))
    torch.testing.assert_close(again.encode_texts(TEXTS), tiny.encode_texts(TEXTS))
    assert not torch.allclose(other.encode_texts(TEXTS), tiny.encode_texts(TEXTS))


def test_encoding_uses_eval_mode_and_restores_the_flag(tiny: RetrievalModel) -> None:
    tiny.module.train()
    try:
        tiny.encode_texts(TEXTS)
        assert tiny.module.training
    finally:
        tiny.module.eval()


def test_checkpoint_round_trip(tmp_path: Path, pixels: torch.Tensor) -> None:
    trained = create_model("clip", arch="xmr-tiny", seed=7)
    path = save_checkpoint(tmp_path / "ckpt" / "model.pt", trained, {"epoch": 3})
    saved = torch.load(path, map_location="cpu", weights_only=True)
    assert saved["spec"] == {
        "family": "clip",
        "arch": "xmr-tiny",
        "pretrained": None,
        "checkpoint": None,
    }
    assert saved["epoch"] == 3
    assert [p.name for p in path.parent.iterdir()] == ["model.pt"]  # no temporary left over

    loaded = create_model("clip", arch="xmr-tiny", checkpoint=path, seed=0)
    torch.testing.assert_close(loaded.encode_images(pixels), trained.encode_images(pixels))
    torch.testing.assert_close(loaded.encode_texts(TEXTS), trained.encode_texts(TEXTS))

    raw = tmp_path / "raw.pt"  # a bare state dict loads too
    torch.save(trained.state_dict(), raw)
    fresh = create_model(ModelSpec("clip", "xmr-tiny", "none", raw), seed=0)
    torch.testing.assert_close(fresh.encode_texts(TEXTS), trained.encode_texts(TEXTS))


def test_save_checkpoint_rejects_reserved_extra_keys(tmp_path: Path, tiny: RetrievalModel) -> None:
    with pytest.raises(ValueError, match="spec"):
        save_checkpoint(tmp_path / "x.pt", tiny, {"spec": "mine"})


def test_checkpoint_with_wrong_keys_names_the_file(tmp_path: Path, tiny: RetrievalModel) -> None:
    state = dict(tiny.state_dict())
    state["visual.extra_head.weight"] = state.pop("logit_scale")
    path = tmp_path / "wrong-keys.pt"
    torch.save({"model": state}, path)
    with pytest.raises(CheckpointError, match=r"wrong-keys\.pt") as info:
        tiny.load_checkpoint(path)
    assert "logit_scale" in str(info.value) and "visual.extra_head.weight" in str(info.value)


def test_checkpoint_with_wrong_shapes_names_the_file(tmp_path: Path, tiny: RetrievalModel) -> None:
    state = dict(tiny.state_dict())
    state["text_projection"] = torch.zeros(3, 3)
    path = tmp_path / "wrong-shapes.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match=r"wrong-shapes\.pt.*text_projection"):
        tiny.load_checkpoint(path)


def test_checkpoint_with_arbitrary_objects_is_refused(tmp_path: Path, tiny: RetrievalModel) -> None:
    path = tmp_path / "payload.pt"
    torch.save({"model": tiny.state_dict(), "payload": Payload()}, path)
    with pytest.raises(CheckpointError, match=r"payload\.pt.*weights_only=True"):
        tiny.load_checkpoint(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [([1, 2, 3], "no state dict"), ({"model": {"a": 1}}, "no state dict")],
)
def test_checkpoint_without_a_state_dict_is_refused(
    tmp_path: Path, tiny: RetrievalModel, content: object, message: str
) -> None:
    path = tmp_path / "odd.pt"
    torch.save(content, path)
    with pytest.raises(CheckpointError, match=message):
        tiny.load_checkpoint(path)


def test_corrupt_and_missing_checkpoints(tmp_path: Path, tiny: RetrievalModel) -> None:
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match=r"corrupt\.pt"):
        tiny.load_checkpoint(corrupt)
    with pytest.raises(FileNotFoundError):
        tiny.load_checkpoint(tmp_path / "absent.pt")


def test_unknown_family_arch_and_tag() -> None:
    with pytest.raises(ValueError, match=r"unknown model family 'sigclip'.*\['blip', 'clip'"):
        create_model("sigclip", arch="x")
    with pytest.raises(ValueError, match=r"unknown model family"):
        list_archs("sigclip")
    with pytest.raises(ValueError, match=r"unknown clip arch 'xmr-tin'.*did you mean xmr-tiny"):
        create_model("clip", arch="xmr-tin")
    with pytest.raises(ValueError, match="arch is required"):
        create_model("clip")
    with pytest.raises(ValueError, match=r"its tags are \['toy'\].*--pretrained none"):
        create_model("clip", arch="xmr-tiny", pretrained="openai")
    with pytest.raises(ValueError, match=r"its tags are.*openai"):
        create_model("clip", arch="RN50", pretrained="no-such-tag")
    with pytest.raises(ValueError, match="either a ModelSpec"):
        create_model(ModelSpec("clip", "xmr-tiny"), arch="RN50")


def test_unreachable_pretrained_weights_say_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    # The hub's own offline switch (HF_HUB_OFFLINE=1): the download fails at once instead of
    # retrying for a minute; without a network it fails the same way, only slower.
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(RuntimeError, match=r"could not be fetched.*--pretrained none.*checkpoint"):
        create_model("clip", arch="RN50", pretrained="openai")


def test_model_spec_params_and_normalisation() -> None:
    spec = ModelSpec("clip", "xmr-tiny", "none", "runs/a.pt")
    absolute = Path("runs/a.pt").resolve()  # the driver's folder: Ray workers run elsewhere
    assert spec.pretrained is None and spec.checkpoint == absolute
    assert spec.params() == {
        "model.family": "clip",
        "model.arch": "xmr-tiny",
        "model.pretrained": "none",
        "model.checkpoint": str(absolute),
    }
    assert ModelSpec("clip", "RN50", "openai").params()["model.pretrained"] == "openai"
    assert ModelSpec("clip", "RN50").params()["model.checkpoint"] == "none"
