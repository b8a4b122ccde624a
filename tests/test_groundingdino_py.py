"""The groundingdino-py detector backend: the original IDEA code with a tiny random model.

The model tests need the optional ``groundingdino`` package (``GROUNDINGDINO_PY_INSTALL``) and
are skipped without it; the config, checkpoint, folder and install-error checks run anyway.

The tiny model: the released config's structure (text enhancer, fusion, two-stage) with 1
encoder and 2 decoder layers, 20 queries, a 1-layer BERT (hidden 32) saved beside the config and
named relatively as its ``text_encoder_type``. ``hidden_dim`` stays 256 because the package
hard-codes 256 for the text position embeddings. The smallest backbone the package can build is
Swin-T (28 M parameters), so the tests swap its builder for a Swin with one block per stage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from PIL import Image

from xmr.detection import (
    GROUNDINGDINO_PY_INSTALL,
    Detection,
    GroundingDinoDetector,
    check_detector,
    create_detector,
    groundingdino_py_files,
    require_groundingdino_py,
)
from xmr.detection.groundingdino_py import (
    GroundingDinoPyDetector,
    SubSentenceBert,
    build_model,
    read_checkpoint,
    read_config,
)
from xmr.toyworld.scene.classes import CLASSES

TOY = tuple(CLASSES)
IMAGE_SIDE = 128
TEXT_LENGTH = 64

_TINY_SETTINGS = {
    "batch_size": 1,
    "modelname": "groundingdino",
    "backbone": "swin_T_224_1k",
    "position_embedding": "sine",
    "pe_temperatureH": 20,
    "pe_temperatureW": 20,
    "return_interm_indices": [1, 2, 3],
    "backbone_freeze_keywords": None,
    "enc_layers": 1,
    "dec_layers": 2,
    "pre_norm": False,
    "dim_feedforward": 64,
    "hidden_dim": 256,
    "dropout": 0.0,
    "nheads": 8,
    "num_queries": 20,
    "query_dim": 4,
    "num_patterns": 0,
    "num_feature_levels": 4,
    "enc_n_points": 2,
    "dec_n_points": 2,
    "two_stage_type": "standard",
    "two_stage_bbox_embed_share": False,
    "two_stage_class_embed_share": False,
    "transformer_activation": "relu",
    "dec_pred_bbox_embed_share": True,
    "dn_box_noise_scale": 1.0,
    "dn_label_noise_ratio": 0.5,
    "dn_label_coef": 1.0,
    "dn_bbox_coef": 1.0,
    "embed_init_tgt": True,
    "dn_labelbook_size": 100,
    "max_text_len": 256,
    "text_encoder_type": "tiny-bert",
    "use_text_enhancer": True,
    "use_fusion_layer": True,
    "use_checkpoint": True,
    "use_transformer_ckpt": True,
    "use_text_cross_attention": True,
    "text_dropout": 0.0,
    "fusion_dropout": 0.0,
    "fusion_droppath": 0.1,
    "sub_sentence_present": True,
}


def _write_config(path: Path, settings: dict) -> Path:
    path.write_text("".join(f"{name} = {value!r}\n" for name, value in settings.items()))
    return path


def _save_tiny_bert(folder: Path) -> Path:
    """A 1-layer BERT and a word-level vocabulary of the ToyWorld class words."""
    from transformers import BertConfig, BertModel, BertTokenizer

    words = sorted({word for name in TOY for word in name.split()} | {"a", "the"})
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "?", ",", *words]
    tokenizer = BertTokenizer(
        vocab={token: i for i, token in enumerate(tokens)}, model_max_length=TEXT_LENGTH
    )
    config = BertConfig(
        vocab_size=len(tokens),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=TEXT_LENGTH,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def small_swin() -> Iterator[None]:
    """groundingdino builds a Swin with one block per stage (embed 16) instead of Swin-T."""
    pytest.importorskip("groundingdino.models", reason="groundingdino-py is not installed")
    from groundingdino.models.GroundingDINO.backbone import backbone
    from groundingdino.models.GroundingDINO.backbone.swin_transformer import SwinTransformer

    def build_small_swin(modelname: str, pretrain_img_size: int, **options) -> SwinTransformer:
        return SwinTransformer(
            pretrain_img_size=pretrain_img_size,
            embed_dim=16,
            depths=[1, 1, 1, 1],
            num_heads=[1, 1, 1, 1],
            window_size=4,
            **options,
        )

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backbone, "build_swin_transformer", build_small_swin)
        yield


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory: pytest.TempPathFactory, small_swin: None) -> Path:
    """``tiny.py`` + ``tiny.pth`` (weights of seed 1) + ``tiny-bert/``: a groundingdino-py
    model folder as ``--detector-model`` takes it."""
    folder = tmp_path_factory.mktemp("groundingdino-py")
    _save_tiny_bert(folder / "tiny-bert")
    config = _write_config(folder / "tiny.py", _TINY_SETTINGS)
    model = build_model(config, None, seed=1)
    torch.save({"model": model.state_dict()}, folder / "tiny.pth")
    return folder


@pytest.fixture(scope="module")
def image(coco_mini: Path) -> Image.Image:
    """A real COCO photo (640 x 427 px)."""
    return Image.open(sorted((coco_mini / "train2017").glob("*.jpg"))[0]).convert("RGB")


def _tiny_detector(folder: Path, checkpoint: Path | None, seed: int = 0) -> GroundingDinoPyDetector:
    return GroundingDinoPyDetector(
        TOY,
        folder / "tiny.py",
        checkpoint,
        device="cpu",
        box_threshold=0.01,
        image_size=IMAGE_SIDE,
        max_size=IMAGE_SIDE * 3 // 2,
        seed=seed,
    )


def _check_records(found: list[list[Detection]], images: list[Image.Image]) -> None:
    """The records of the hf backend: ``Detection(category, (x, y, w, h) px, score)``, in the
    image, best first."""
    assert len(found) == len(images)
    for detections, picture in zip(found, images, strict=True):
        assert detections, "the random tiny model keeps boxes at a low box threshold"
        assert [d.score for d in detections] == sorted((d.score for d in detections), reverse=True)
        for d in detections:
            assert type(d) is Detection
            assert d.category in TOY
            x, y, w, h = d.bbox
            assert w > 0 and h > 0
            assert x >= 0 and y >= 0
            assert x + w <= picture.width and y + h <= picture.height
            assert 0.01 < d.score <= 1


def test_detects_with_the_records_of_the_hf_backend(
    model_folder: Path, image: Image.Image, tmp_path: Path
) -> None:
    from tiny_grounding_dino import build_tiny_grounding_dino

    detector = _tiny_detector(model_folder, model_folder / "tiny.pth").load()
    assert detector.chunks == [TOY]
    small = image.resize((150, 200)).convert("L")  # another size and mode in the same batch
    found = detector.detect([image, small])
    _check_records(found, [image, small])
    # Boxes are in each image's own pixels, not in the resized or padded batch.
    assert max(d.bbox[0] + d.bbox[2] for d in found[0]) > IMAGE_SIDE * 3 // 2
    assert detector.detect([image, small]) == found  # deterministic
    assert detector.detect([]) == []

    hf_model = build_tiny_grounding_dino(tmp_path / "hf")
    hf = GroundingDinoDetector(TOY, str(hf_model), device="cpu", box_threshold=0.01)
    _check_records(hf.detect([image]), [image])


def test_the_checkpoint_sets_every_weight(model_folder: Path, image: Image.Image) -> None:
    from_checkpoint = _tiny_detector(model_folder, model_folder / "tiny.pth").detect([image])
    same_seed = _tiny_detector(model_folder, None, seed=1).detect([image])
    other_seed = _tiny_detector(model_folder, None, seed=2).detect([image])
    assert from_checkpoint == same_seed
    assert from_checkpoint != other_seed


def test_a_checkpoint_of_another_config_is_refused(model_folder: Path, tmp_path: Path) -> None:
    state = read_checkpoint(model_folder / "tiny.pth")
    lacking = tmp_path / "lacking.pth"
    torch.save(
        {"model": {k: v for k, v in state.items() if not k.startswith("bbox_embed")}}, lacking
    )
    with pytest.raises(ValueError, match=r"lacking\.pth.* lacks .* weights"):
        build_model(model_folder / "tiny.py", lacking)
    wider = _write_config(
        tmp_path / "wider.py",
        {
            **_TINY_SETTINGS,
            "dim_feedforward": 128,
            "text_encoder_type": str(model_folder / "tiny-bert"),
        },
    )
    with pytest.raises(
        ValueError, match=r"tiny\.pth.* does not fit config .*wider\.py.*size mismatch"
    ):
        build_model(wider, model_folder / "tiny.pth")


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_text_features_are_bert_features_per_phrase(
    model_folder: Path, small_swin: None, attention: str
) -> None:
    from groundingdino.models.GroundingDINO.bertwarper import (
        generate_masks_with_special_tokens_and_transfer_map,
    )
    from transformers import AutoTokenizer, BertModel

    folder = model_folder / "tiny-bert"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    bert = BertModel.from_pretrained(folder, attn_implementation=attention).eval()
    wrapper = SubSentenceBert(bert)
    assert set(wrapper.state_dict()) == set(bert.state_dict())  # checkpoint keys: bert.<same>

    tokenized = tokenizer(["cat . sports ball . dog ."], return_tensors="pt")
    specials = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]", ".", "?"])
    mask, positions, _ = generate_masks_with_special_tokens_and_transfer_map(
        tokenized, specials, tokenizer
    )
    with torch.inference_mode():
        features = wrapper(tokenized["input_ids"], mask, tokenized["token_type_ids"], positions)[
            "last_hidden_state"
        ]
        if attention == "sdpa":  # BertModel takes the boolean mask as is under SDPA
            direct = bert(
                tokenized["input_ids"],
                attention_mask=mask[:, None],
                token_type_ids=tokenized["token_type_ids"],
                position_ids=positions,
            ).last_hidden_state
            torch.testing.assert_close(features, direct, rtol=0, atol=1e-6)
        # Each phrase (its words and its ".") is encoded as if it were the whole text.
        ids = tokenized["input_ids"][0].tolist()
        for start, end in ((1, 3), (3, 6), (6, 8)):  # "cat .", "sports ball .", "dog ."
            alone = bert(torch.tensor([ids[start:end]])).last_hidden_state[0]
            torch.testing.assert_close(features[0, start:end], alone, rtol=0, atol=1e-5)


def test_the_released_configs_are_read_without_running_them() -> None:
    spec = pytest.importorskip("groundingdino").__spec__
    configs = Path(next(iter(spec.submodule_search_locations))) / "config"
    settings = read_config(configs / "GroundingDINO_SwinT_OGC.py")
    assert settings["backbone"] == "swin_T_224_1k"
    assert settings["text_encoder_type"] == "bert-base-uncased"
    assert read_config(configs / "GroundingDINO_SwinB_cfg.py")["backbone"] == "swin_B_384_22k"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("modelname = 'groundingdino'\nimport os\n", r"bad\.py:2: only 'NAME = literal'"),
        ("modelname = 'groundingdino'\nx = __import__('os').getcwd()\n", r"bad\.py:2: .*'x'"),
        ("modelname = 'groundingdino'\nx = y = 1\n", r"bad\.py:2"),
        ("modelname = 'groundingdino'\nif True:\n    x = 1\n", r"bad\.py:2"),
        ("modelname = 'groundingdino'\nx = (\n", r"bad\.py: not a Python config"),
        ("modelname = 'dino'\n", r"bad\.py: modelname must be 'groundingdino'"),
        ("modelname = 'groundingdino'\n_base_ = ['a.py']\n", r"bad\.py: _base_ .* not supported"),
    ],
)
def test_configs_other_than_literal_assignments_are_refused(
    tmp_path: Path, text: str, error: str
) -> None:
    config = tmp_path / "bad.py"
    config.write_text(text)
    with pytest.raises(ValueError, match=error):
        read_config(config)


def test_checkpoints_are_read_as_weights_only(tmp_path: Path) -> None:
    weights = {"module.head.weight": torch.ones(2, 2), "head.bias": torch.zeros(2)}
    torch.save(weights, tmp_path / "bare.pth")
    assert set(read_checkpoint(tmp_path / "bare.pth")) == {"head.weight", "head.bias"}
    # A training checkpoint carrying Python objects (argparse settings) is refused, not unpickled.
    torch.save({"model": weights, "args": argparse.Namespace(lr=1e-4)}, tmp_path / "args.pth")
    with pytest.raises(ValueError, match=r"args\.pth.* weights only.*argparse"):
        read_checkpoint(tmp_path / "args.pth")
    (tmp_path / "page.pth").write_text("<html>not found</html>")
    with pytest.raises(ValueError, match=r"page\.pth"):
        read_checkpoint(tmp_path / "page.pth")
    torch.save({"model": {"step": 3}}, tmp_path / "numbers.pth")
    with pytest.raises(ValueError, match=r"numbers\.pth.* not tensors"):
        read_checkpoint(tmp_path / "numbers.pth")


def test_model_folder_holds_one_config_and_one_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no-such-folder"):
        groundingdino_py_files(tmp_path / "no-such-folder")
    (tmp_path / "cfg.py").write_text("modelname = 'groundingdino'\n")
    with pytest.raises(FileNotFoundError, match=r"has no checkpoint \(\*\.pth\)"):
        groundingdino_py_files(tmp_path)
    (tmp_path / "weights.pth").write_bytes(b"")
    assert groundingdino_py_files(tmp_path) == (tmp_path / "cfg.py", tmp_path / "weights.pth")
    (tmp_path / "other.py").write_text("")
    with pytest.raises(ValueError, match=r"several config files \(cfg\.py, other\.py\)"):
        groundingdino_py_files(tmp_path)


def test_backends_are_picked_by_name(tmp_path: Path) -> None:
    hf = create_detector("hf", TOY, str(tmp_path), device="cpu", box_threshold=0.5)
    assert type(hf) is GroundingDinoDetector and hf.box_threshold == 0.5
    with pytest.raises(ValueError, match=r"--detector 'mmdet' is not one of hf, groundingdino-py"):
        check_detector("mmdet", str(tmp_path))


def test_the_groundingdino_py_backend_takes_a_model_folder(tmp_path: Path) -> None:
    pytest.importorskip("groundingdino", reason="groundingdino-py is not installed")
    with pytest.raises(ValueError, match="--detector-model FOLDER"):
        check_detector("groundingdino-py", "IDEA-Research/grounding-dino-tiny")
    (tmp_path / "cfg.py").write_text("modelname = 'groundingdino'\n")
    (tmp_path / "weights.pth").write_bytes(b"")
    detector = create_detector("groundingdino-py", TOY, str(tmp_path), text_threshold=0.3)
    assert type(detector) is GroundingDinoPyDetector and detector.text_threshold == 0.3
    assert detector.config_file == tmp_path / "cfg.py"
    assert detector.checkpoint == tmp_path / "weights.pth"


def test_a_missing_package_gives_the_install_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With ``groundingdino`` hidden (``None`` in ``sys.modules`` makes it unimportable)."""
    monkeypatch.setitem(sys.modules, "groundingdino", None)
    (tmp_path / "cfg.py").write_text("modelname = 'groundingdino'\n")
    (tmp_path / "weights.pth").write_bytes(b"")
    for attempt in (
        require_groundingdino_py,
        lambda: create_detector("groundingdino-py", TOY, str(tmp_path)),
        lambda: build_model(tmp_path / "cfg.py"),  # the import at build time
    ):
        with pytest.raises(ModuleNotFoundError) as failure:
            attempt()
        message = str(failure.value)
        assert "\n" not in message and "'groundingdino'" in message
        assert message.endswith(GROUNDINGDINO_PY_INSTALL)
