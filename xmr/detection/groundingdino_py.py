"""GroundingDINO from the original IDEA code (``groundingdino-py``), for the released checkpoints.

Users with ``groundingdino_swint_ogc.pth`` and its config ``GroundingDINO_SwinT_OGC.py`` detect
with them here; :class:`GroundingDinoPyDetector` returns the same records as the transformers
backend (:class:`~xmr.detection.grounding_dino.GroundingDinoDetector`, whose prompts, class
chunks, thresholds and phrase -> class mapping it reuses). Install: see
:data:`~xmr.detection.groundingdino_install.GROUNDINGDINO_PY_INSTALL`; ``groundingdino`` is
imported only when a model is built, so xmr imports without it.

Three things differ from the package's own ``load_model``:

- the config file is read, never run: only top-level ``NAME = literal`` lines are accepted
  (the released configs are nothing else), parsed with :func:`ast.literal_eval`;
- the checkpoint is read with ``torch.load(weights_only=True)`` (tensors only, no unpickling of
  arbitrary objects); a file that needs more is refused;
- the text encoder wrapper is replaced (:class:`SubSentenceBert`, see there): the package's
  ``BertModelWarper`` calls ``BertModel`` internals that transformers 5 removed.

Gradient checkpointing (``use_checkpoint``, ``use_transformer_ckpt``) is switched off: it only
trades memory for recomputation in training and changes no weight.
"""

from __future__ import annotations

import ast
import contextlib
import io
import logging
import pickle
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch
from PIL import Image

from xmr.detection.grounding_dino import (
    Detection,
    GroundingDinoDetector,
    box_detection,
    chunk_classes,
    grounding_prompt,
)
from xmr.detection.groundingdino_install import GROUNDINGDINO_PY_INSTALL

if TYPE_CHECKING:
    from transformers import BertModel

logger = logging.getLogger(__name__)

# The released models' preprocessing: shortest side 800 px, longest at most 1333, ImageNet
# normalisation.
IMAGE_SIZE = 800
MAX_IMAGE_SIZE = 1333
_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)

# Settings switched off at build: gradient checkpointing only matters in training.
_INFERENCE_SETTINGS = {"use_checkpoint": False, "use_transformer_ckpt": False}


class SubSentenceBert(torch.nn.Module):
    """The text encoder groundingdino calls, working with transformers 5.

    groundingdino-py wraps ``BertModel`` in ``BertModelWarper``, a copy of transformers 4's
    ``BertModel.forward`` that uses ``get_extended_attention_mask``, ``invert_attention_mask``
    and ``get_head_mask``; transformers 5 removed them, so building the model fails. This module
    is put in its place while the model is built (:func:`build_model`). It registers the same
    sub-modules (``embeddings``, ``encoder``, ``pooler``), so a checkpoint's ``bert.*`` keys load
    unchanged, and calls ``BertModel`` itself, with the mask turned into the additive
    ``(batch, 1, tokens, tokens)`` float mask the original built: 0 where a token may attend,
    the dtype's minimum where not. ``BertModel`` passes a 4-D mask through to its attention as
    is, which adds it to the scores (eager) or takes it as an additive bias (SDPA).
    """

    def __init__(self, bert_model: BertModel) -> None:
        super().__init__()
        self.config = bert_model.config
        self.embeddings = bert_model.embeddings
        self.encoder = bert_model.encoder
        self.pooler = bert_model.pooler
        # Held in a tuple so it is not registered a second time (its modules are the ones above).
        self._bert = (bert_model,)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> Any:
        """BERT features of ``input_ids`` ``(batch, tokens)``.

        ``attention_mask`` is groundingdino's sub-sentence mask ``(batch, tokens, tokens)``
        (True: the row token attends to the column token; each phrase sees only itself) or a
        padding mask ``(batch, tokens)``; ``position_ids`` ``(batch, tokens)`` restart at 0 in
        each phrase. Returns ``BertModel``'s output (``["last_hidden_state"]``:
        ``(batch, tokens, hidden)``).
        """
        dtype = self.embeddings.word_embeddings.weight.dtype
        allowed = (
            attention_mask[:, None] if attention_mask.dim() == 3 else attention_mask[:, None, None]
        )
        additive = (1.0 - allowed.to(dtype)) * torch.finfo(dtype).min
        return self._bert[0](
            input_ids=input_ids,
            attention_mask=additive,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
        )


def read_config(config_file: str | Path) -> dict[str, Any]:
    """The settings of an IDEA GroundingDINO config file, read without running it.

    The file must consist of top-level ``NAME = literal`` assignments (numbers, strings, lists,
    ``None``, booleans), as the released ``GroundingDINO_SwinT_OGC.py`` does. Raises
    ``FileNotFoundError`` for a missing file and ``ValueError`` naming the file (and line) of
    anything else: imports, calls, ``_base_`` inheritance, syntax errors, a ``modelname`` other
    than ``groundingdino``.
    """
    path = Path(config_file)
    if not path.is_file():
        raise FileNotFoundError(f"groundingdino-py config file {str(path)!r} does not exist")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a Python config file: {exc}") from exc
    settings: dict[str, Any] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if not (
            isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(target, ast.Name)
        ):
            raise ValueError(
                f"{path}:{node.lineno}: only 'NAME = literal' lines are read (the config is "
                "never run)"
            )
        try:
            settings[target.id] = ast.literal_eval(node.value)
        except ValueError as exc:
            raise ValueError(
                f"{path}:{node.lineno}: the value of {target.id!r} is not a literal (the "
                "config is never run)"
            ) from exc
    if "_base_" in settings:
        raise ValueError(f"{path}: _base_ (config inheritance) is not supported; merge the files")
    if settings.get("modelname") != "groundingdino":
        raise ValueError(
            f"{path}: modelname must be 'groundingdino', got {settings.get('modelname')!r}"
        )
    return settings


def read_checkpoint(checkpoint: str | Path) -> dict[str, torch.Tensor]:
    """The model weights of an IDEA checkpoint, read with ``torch.load(weights_only=True)``.

    Accepts ``{"model": state_dict, ...}`` (the released files) or a bare state dict; strips a
    ``module.`` prefix (checkpoints saved from ``DistributedDataParallel``). Raises
    ``FileNotFoundError`` for a missing file and ``ValueError`` naming the file when it is not a
    weights-only PyTorch file or holds no tensors.
    """
    path = Path(checkpoint)
    if not path.is_file():
        raise FileNotFoundError(f"groundingdino-py checkpoint {str(path)!r} does not exist")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError) as exc:
        lines = str(exc).splitlines() or [type(exc).__name__]
        reason = next((line for line in lines if "WeightsUnpickler error" in line), lines[0])
        raise ValueError(
            f"checkpoint {str(path)!r} could not be read as weights only (it is never "
            f"unpickled): {reason.strip()}"
        ) from exc
    state = data.get("model", data) if isinstance(data, dict) else None
    if not isinstance(state, dict) or not state:
        raise ValueError(
            f"checkpoint {str(path)!r} holds no state dict (expected {{'model': ...}})"
        )
    tensors = {key: value for key, value in state.items() if isinstance(value, torch.Tensor)}
    if len(tensors) != len(state):
        raise ValueError(
            f"checkpoint {str(path)!r}: its state dict holds values that are not tensors"
        )
    return {key.removeprefix("module."): value for key, value in tensors.items()}


def _import_groundingdino() -> ModuleType:
    """``groundingdino.models.GroundingDINO.groundingdino``, or a one-line install error."""
    try:
        import groundingdino.models.GroundingDINO.groundingdino as module
    except ImportError as exc:  # the package or a module its code imports is missing
        missing = (exc.name or "groundingdino").partition(".")[0]
        raise ModuleNotFoundError(
            f"--detector groundingdino-py could not import {missing!r}; install the backend "
            f"with: {GROUNDINGDINO_PY_INSTALL}",
            name=missing,
        ) from exc
    return module


@contextlib.contextmanager
def _sub_sentence_bert(module: ModuleType) -> Iterator[None]:
    """Build groundingdino models with :class:`SubSentenceBert` as their text encoder wrapper."""
    original = module.BertModelWarper
    module.BertModelWarper = SubSentenceBert
    try:
        yield
    finally:
        module.BertModelWarper = original


def build_model(
    config_file: str | Path, checkpoint: str | Path | None = None, *, seed: int = 0
) -> torch.nn.Module:
    """The groundingdino model of ``config_file`` on the CPU in eval mode, weights from
    ``checkpoint``.

    ``checkpoint=None`` keeps random weights drawn with ``seed`` (tests, benchmarks); the text
    encoder then has the weights of ``text_encoder_type``. ``text_encoder_type`` names a Hub id
    (``bert-base-uncased``, fetched or cached by transformers) or a folder written by
    ``save_pretrained``; a relative name is first looked up beside the config file, so a model
    folder can carry its own tokenizer and run offline.

    Raises ``ModuleNotFoundError`` (one line, with the install command) without groundingdino,
    ``ValueError`` naming the file for a bad config, checkpoint, or a checkpoint that does not
    fit the config, ``RuntimeError`` when the text encoder cannot be loaded.
    """
    config_file = Path(config_file)
    settings = read_config(config_file)
    text_encoder = settings.get("text_encoder_type")
    if isinstance(text_encoder, str) and (config_file.parent / text_encoder).is_dir():
        settings["text_encoder_type"] = str(config_file.parent / text_encoder)
    settings.update(_INFERENCE_SETTINGS)
    state = None if checkpoint is None else read_checkpoint(checkpoint)
    module = _import_groundingdino()
    from groundingdino.models import build_model as build_groundingdino

    # The package prints its text encoder name while building; the output is dropped.
    with (
        _sub_sentence_bert(module),
        torch.random.fork_rng(devices=[]),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        torch.manual_seed(seed)
        try:
            model = build_groundingdino(SimpleNamespace(**settings))
        except AttributeError as exc:
            raise ValueError(f"{config_file}: missing setting {exc.name!r}") from exc
        except OSError as exc:  # transformers could not find or fetch the text encoder
            first = (str(exc).splitlines() or [""])[0]
            raise RuntimeError(
                f"{config_file}: could not load text_encoder_type {text_encoder!r}: {first}"
            ) from exc
    if state is not None:
        _load_weights(model, state, checkpoint, config_file)
    return model.eval()


def _load_weights(
    model: torch.nn.Module,
    state: dict[str, torch.Tensor],
    checkpoint: str | Path,
    config_file: Path,
) -> None:
    """Load ``state`` into ``model``; every weight of the model must come from it.

    Extra keys in the checkpoint are ignored (logged), as the package's own loader does.
    """
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shape mismatches
        reason = next(
            (line.strip() for line in str(exc).splitlines() if "size mismatch" in line), ""
        )
        raise ValueError(
            f"checkpoint {str(checkpoint)!r} does not fit config {str(config_file)!r}: {reason}"
        ) from exc
    if missing:
        raise ValueError(
            f"checkpoint {str(checkpoint)!r} lacks {len(missing)} weights of config "
            f"{str(config_file)!r}, e.g. {', '.join(missing[:3])}"
        )
    if unexpected:
        logger.info(
            "checkpoint %s: ignored %d keys the model has no use for", checkpoint, len(unexpected)
        )


class GroundingDinoPyDetector(GroundingDinoDetector):
    """Boxes of ``classes`` in images with an original IDEA GroundingDINO checkpoint.

    Same interface, records and semantics as :class:`GroundingDinoDetector` (its class checks,
    chunked prompts and detection loop are inherited); ``config_file`` is the IDEA config
    (``GroundingDINO_SwinT_OGC.py``), ``checkpoint`` its ``.pth`` (``None``: random weights from
    ``seed``, for tests). Images are resized to a shortest side of ``image_size`` px, longest at
    most ``max_size`` px (800 and 1333 for the released models), then batched with padding.
    Construction checks settings only; :meth:`load` (or the first :meth:`detect`) builds the
    model.
    """

    def __init__(
        self,
        classes: Sequence[str],
        config_file: str | Path,
        checkpoint: str | Path | None,
        *,
        device: str = "auto",
        box_threshold: float = 0.35,
        text_threshold: float = 0.25,
        image_size: int = IMAGE_SIZE,
        max_size: int = MAX_IMAGE_SIZE,
        seed: int = 0,
    ) -> None:
        super().__init__(
            classes,
            str(config_file),
            device=device,
            box_threshold=box_threshold,
            text_threshold=text_threshold,
        )
        if not 0 < image_size <= max_size:
            raise ValueError(
                f"image_size must be in (0, max_size], got {image_size!r} and {max_size!r}"
            )
        self.config_file = Path(config_file)
        self.checkpoint = None if checkpoint is None else Path(checkpoint)
        self.image_size = int(image_size)
        self.max_size = int(max_size)
        self.seed = int(seed)

    def load(self) -> GroundingDinoPyDetector:
        """Build the model (once) and split the classes into prompts that fit its text length.

        Raises what :func:`build_model` raises.
        """
        if self._model is not None:
            return self
        model = build_model(self.config_file, self.checkpoint, seed=self.seed)
        tokenizer = model.tokenizer
        max_tokens = min(model.max_text_len, tokenizer.model_max_length)
        self._chunks = chunk_classes(
            self.classes, lambda prompt: len(tokenizer(prompt).input_ids), max_tokens
        )
        self._model = model.to(self.device)
        return self

    def _pixels(self, images: list[Image.Image]) -> Any:
        """The images resized, normalised and padded into one batch (a groundingdino
        ``NestedTensor``: ``tensors`` ``(batch, 3, H, W)``, ``mask`` True on padding)."""
        import torchvision.transforms.functional as tf
        from groundingdino.datasets.transforms import resize
        from groundingdino.util.misc import nested_tensor_from_tensor_list

        tensors = [
            tf.normalize(
                tf.to_tensor(resize(image, None, self.image_size, self.max_size)[0]), _MEAN, _STD
            )
            for image in images
        ]
        return nested_tensor_from_tensor_list(tensors).to(self.device)

    def _detect_chunk(
        self, images: list[Image.Image], sizes: list[tuple[int, int]], chunk: tuple[str, ...]
    ) -> list[list[Detection]]:
        """One forward pass prompting ``chunk``; ``sizes`` are ``(height, width)`` in pixels.

        A query's score is its best prompt-token probability; its label, the prompt tokens
        above ``text_threshold``. Boxes come out as ``(cx, cy, w, h)`` in [0, 1] of each image's
        own (unpadded) extent and are scaled to its pixels.
        """
        from groundingdino.util.utils import get_phrases_from_posmap

        prompt = grounding_prompt(chunk)
        tokenizer = self._model.tokenizer
        tokenized = tokenizer(prompt)
        n_tokens = len(tokenized["input_ids"])
        special = tokenizer.all_special_tokens
        with torch.inference_mode():
            outputs = self._model(self._pixels(images), captions=[prompt] * len(images))
        probabilities = outputs["pred_logits"].sigmoid()[..., :n_tokens].float().cpu()
        boxes = outputs["pred_boxes"].float().cpu()
        batch: list[list[Detection]] = []
        for (height, width), token_probs, image_boxes in zip(
            sizes, probabilities, boxes, strict=True
        ):
            scores = token_probs.max(dim=-1).values
            keep = scores > self.box_threshold
            detections = []
            for probs, box, score in zip(
                token_probs[keep], image_boxes[keep], scores[keep], strict=True
            ):
                label = get_phrases_from_posmap(probs > self.text_threshold, tokenized, tokenizer)
                cx, cy, w, h = box.tolist()
                corners = (
                    (cx - w / 2) * width,
                    (cy - h / 2) * height,
                    (cx + w / 2) * width,
                    (cy + h / 2) * height,
                )
                detection = box_detection(
                    label, chunk, corners, float(score), (height, width), special
                )
                if detection is not None:
                    detections.append(detection)
            batch.append(detections)
        return batch
