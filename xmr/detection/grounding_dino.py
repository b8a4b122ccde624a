"""Open-vocabulary object boxes with GroundingDINO (transformers' implementation).

The detector prompts the model with the class names ("cat . dog ."), keeps the boxes whose best
token score passes ``box_threshold``, and maps the phrase GroundingDINO matched (the prompt
tokens scoring above ``text_threshold``, which can be part of a class name or run across several)
back to one of the classes. Boxes come back COCO-style ``(x, y, w, h)`` in pixels of the original
image, origin top-left, as in :mod:`xmr.data.records`.

A prompt holds at most the model's text length (256 BERT tokens for the released checkpoints),
so a long class list (COCO's 80) is split into chunks, one forward pass each.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PIL import Image

from xmr.pretrained import local_model_dir, resolve_device

if TYPE_CHECKING:  # torch and transformers are imported on use: they take seconds to import
    from transformers import GroundingDinoForObjectDetection, GroundingDinoProcessor

DEFAULT_DETECTOR = "IDEA-Research/grounding-dino-tiny"

# GroundingDINO splits a prompt into phrases at these tokens (BERT ids 1012 and 1029).
_SEPARATORS = (".", "?")


@dataclass(frozen=True)
class Detection:
    """One detected object: a class of the detector, a box ``(x, y, w, h)`` in pixels, a score.

    ``score`` is the box's best prompt-token probability, in (0, 1).
    """

    category: str
    bbox: tuple[float, float, float, float]
    score: float


def _words(text: str) -> tuple[str, ...]:
    """The lower-case alphanumeric words of ``text``, accents dropped (as BERT uncased does).

    ``"Sports-Ball."`` -> ``("sports", "ball")``; ``"t - shirt"`` -> ``("t", "shirt")``.
    """
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return tuple(
        re.findall(r"[^\W_]+", "".join(c for c in decomposed if not unicodedata.combining(c)))
    )


def _check_classes(classes: Sequence[str]) -> None:
    """Raise ``ValueError`` unless ``classes`` is a non-empty list of distinct, promptable names."""
    if isinstance(classes, str) or not classes:
        raise ValueError(f"classes must be a non-empty list of class names, got {classes!r}")
    seen: dict[tuple[str, ...], str] = {}
    for name in classes:
        if not isinstance(name, str) or not _words(name):
            raise ValueError(f"class names need at least one letter or digit, got {name!r}")
        if any(sep in name for sep in _SEPARATORS):
            raise ValueError(
                f"class name {name!r} contains '.' or '?', which GroundingDINO reads as the end "
                "of a phrase"
            )
        key = _words(name)
        if key in seen:
            raise ValueError(f"class names {seen[key]!r} and {name!r} are the same phrase")
        seen[key] = name


def grounding_prompt(classes: Sequence[str]) -> str:
    """The GroundingDINO text prompt: lower-case names, each followed by ``" ."``.

    ``["Cat", "sports ball"]`` -> ``"cat . sports ball ."``. Raises ``ValueError`` for an empty
    list, repeated names, or names containing ``.`` / ``?`` (phrase separators).
    """
    _check_classes(classes)
    return " ".join(f"{' '.join(name.lower().split())} ." for name in classes)


def _contains(words: tuple[str, ...], part: tuple[str, ...]) -> int:
    """Index of the first occurrence of ``part`` as a contiguous run of ``words``; -1 if none."""
    n = len(part)
    return next((i for i in range(len(words) - n + 1) if words[i : i + n] == part), -1)


def match_class(label: str, classes: Sequence[str]) -> str | None:
    """The one class of ``classes`` a GroundingDINO text label names, or ``None``.

    Labels and names are compared as lower-case words, punctuation ignored. In order:

    1. the class whose name equals the label (``"Dog."`` -> ``"dog"``);
    2. a merged label (``"dog cat"``, ``"a sports ball"``): of the class names it contains, the
       longest (most words, then most characters), ties to the one occurring first in the label;
    3. a partial label (``"ball"``): the class whose name contains it, if exactly one does.

    Labels that name no class, or only part of several, give ``None``.
    """
    words = _words(label)
    if not words:
        return None
    keys = {name: _words(name) for name in classes}
    exact = [name for name, key in keys.items() if key == words]
    if exact:
        return exact[0]
    contained = [
        (len(key), len(" ".join(key)), -_contains(words, key), -order, name)
        for order, (name, key) in enumerate(keys.items())
        if _contains(words, key) >= 0
    ]
    if contained:
        return max(contained)[-1]
    containing = [name for name, key in keys.items() if _contains(key, words) >= 0]
    return containing[0] if len(containing) == 1 else None


def chunk_classes(
    classes: Sequence[str], count_tokens: Callable[[str], int], max_tokens: int
) -> list[tuple[str, ...]]:
    """Split ``classes`` (in order) into runs whose :func:`grounding_prompt` fits ``max_tokens``.

    ``count_tokens(prompt)`` is the prompt's length in model tokens, special tokens included.
    Greedy: each chunk takes as many of the next classes as fit. Raises ``ValueError`` when one
    class alone does not fit.
    """
    _check_classes(classes)
    chunks: list[tuple[str, ...]] = []
    current: list[str] = []
    for name in classes:
        if count_tokens(grounding_prompt([name])) > max_tokens:
            raise ValueError(
                f"the prompt for class {name!r} alone is longer than {max_tokens} tokens"
            )
        if current and count_tokens(grounding_prompt([*current, name])) > max_tokens:
            chunks.append(tuple(current))
            current = []
        current.append(name)
    chunks.append(tuple(current))
    return chunks


def _strip_tokens(label: str, tokens: Sequence[str]) -> str:
    """``label`` without the tokenizer's special tokens ("[SEP]"), which labels can include."""
    for token in tokens:
        label = label.replace(token, " ")
    return label


def box_detection(
    label: str,
    classes: Sequence[str],
    box: Sequence[float],
    score: float,
    size: tuple[int, int],
    special_tokens: Sequence[str] = (),
) -> Detection | None:
    """The :class:`Detection` of one predicted box, or ``None`` when it is not kept.

    ``label`` is the phrase GroundingDINO matched (``special_tokens`` such as "[SEP]" removed,
    then mapped by :func:`match_class` to one of ``classes``); ``box`` is ``(x0, y0, x1, y1)``
    in pixels of an image of ``size = (height, width)``, clipped to it. ``None`` when the label
    names no class or the clipped box has no area.
    """
    category = match_class(_strip_tokens(label, special_tokens), classes)
    height, width = size
    x0, x1 = (min(max(x, 0.0), width) for x in (box[0], box[2]))
    y0, y1 = (min(max(y, 0.0), height) for y in (box[1], box[3]))
    if category is None or x1 <= x0 or y1 <= y0:
        return None
    return Detection(category, (x0, y0, x1 - x0, y1 - y0), score)


class GroundingDinoDetector:
    """Boxes of ``classes`` in images with a GroundingDINO checkpoint.

    ``model`` is a Hugging Face Hub id or a local directory written by ``save_pretrained`` (model
    and processor). Construction only stores and checks settings; :meth:`load` (or the first
    :meth:`detect`) reads the weights. ``box_threshold`` keeps a box when its best token score
    exceeds it; ``text_threshold`` picks the prompt tokens that form its label. Both in (0, 1).
    """

    def __init__(
        self,
        classes: Sequence[str],
        model: str = DEFAULT_DETECTOR,
        *,
        device: str = "auto",
        box_threshold: float = 0.35,
        text_threshold: float = 0.25,
    ) -> None:
        _check_classes(classes)
        for name, value in (("box_threshold", box_threshold), ("text_threshold", text_threshold)):
            if not 0.0 < value < 1.0:
                raise ValueError(f"{name} must be in (0, 1), got {value!r}")
        self.classes: tuple[str, ...] = tuple(classes)
        self.model_name = str(model)
        self.device = resolve_device(device)
        self.box_threshold = float(box_threshold)
        self.text_threshold = float(text_threshold)
        self._model: GroundingDinoForObjectDetection | None = None
        self._processor: GroundingDinoProcessor | None = None
        self._processor_kwargs: dict[str, str] = {}
        self._chunks: list[tuple[str, ...]] = []

    @property
    def chunks(self) -> list[tuple[str, ...]]:
        """The class chunks, one prompt (forward pass) each; set by :meth:`load`."""
        return list(self._chunks)

    def load(self) -> GroundingDinoDetector:
        """Read the model and processor (once) and split the classes into prompts that fit.

        Raises ``FileNotFoundError`` for a local path that is not a directory, ``RuntimeError``
        naming ``model`` when it cannot be loaded (not a checkpoint, or a Hub id that is not
        cached and cannot be downloaded).
        """
        if self._model is not None:
            return self
        from transformers import AutoProcessor, GroundingDinoForObjectDetection

        name = self.model_name
        folder = local_model_dir(name)
        source = name if folder is None else str(folder)
        try:
            processor = AutoProcessor.from_pretrained(source)
            model = GroundingDinoForObjectDetection.from_pretrained(source)
        except (OSError, ValueError) as exc:  # missing files / unrecognised processor
            raise RuntimeError(
                f"could not load the GroundingDINO model {name!r}: it must be a directory saved "
                "with save_pretrained (model and processor) or a Hugging Face Hub id that is "
                f"cached or reachable: {exc}"
            ) from exc
        tokenizer = processor.tokenizer
        max_tokens = min(model.config.max_text_len, tokenizer.model_max_length)
        specials = tokenizer.num_special_tokens_to_add()
        self._chunks = chunk_classes(
            self.classes, lambda prompt: len(tokenizer.tokenize(prompt)) + specials, max_tokens
        )
        self._processor = processor
        self._model = model.to(self.device).eval()
        # Resizing and normalising on the GPU: 3-4 ms per image on an H100 against 30-70 ms on
        # the one CPU a GPU actor holds (bench/RESULTS.md, "GPU stages on an H100"). Only
        # torchvision-backed processors (transformers' default) take a device; PIL-backed ones
        # stay on the CPU.
        from transformers.image_processing_backends import TorchvisionBackend

        on_gpu = self.device != "cpu" and isinstance(processor.image_processor, TorchvisionBackend)
        self._processor_kwargs = {"device": self.device} if on_gpu else {}
        return self

    def detect(self, images: list[Image.Image]) -> list[list[Detection]]:
        """Detections per image (one list per input image, highest score first).

        Images of any sizes go through together (padded by the processor), one forward pass per
        class chunk. Boxes are clipped to their image; zero-area boxes and labels that name no
        class are dropped.
        """
        if not images:
            return []
        self.load()
        rgb = [image if image.mode == "RGB" else image.convert("RGB") for image in images]
        sizes = [(image.height, image.width) for image in rgb]
        found: list[list[Detection]] = [[] for _ in rgb]
        for chunk in self._chunks:
            for per_image, detections in zip(
                found, self._detect_chunk(rgb, sizes, chunk), strict=True
            ):
                per_image.extend(detections)
        return [sorted(per_image, key=lambda d: -d.score) for per_image in found]

    def detect_each(
        self, images: list[Image.Image], classes: Sequence[Sequence[str]]
    ) -> list[list[Detection]]:
        """Detections per image of that image's own ``classes`` (e.g. an LLM's proposals for
        its caption) instead of the detector's: one forward pass per image, one prompt each,
        highest score first. Raises ``ValueError`` for classes that cannot be prompted."""
        self.load()
        found = []
        for image, names in zip(images, classes, strict=True):
            _check_classes(names)
            rgb = image if image.mode == "RGB" else image.convert("RGB")
            (detections,) = self._detect_chunk([rgb], [(rgb.height, rgb.width)], tuple(names))
            found.append(sorted(detections, key=lambda d: -d.score))
        return found

    def _detect_chunk(
        self, images: list[Image.Image], sizes: list[tuple[int, int]], chunk: tuple[str, ...]
    ) -> list[list[Detection]]:
        """One forward pass prompting ``chunk``; ``sizes`` are ``(height, width)`` in pixels."""
        import torch

        processor = self._processor
        prompt = grounding_prompt(chunk)
        texts = [prompt] * len(images)
        inputs = processor(images=images, text=texts, return_tensors="pt", **self._processor_kwargs)
        with torch.inference_mode():
            outputs = self._model(**inputs.to(self.device))
        results = processor.post_process_grounded_object_detection(
            outputs,
            inputs["input_ids"],
            threshold=self.box_threshold,
            text_threshold=self.text_threshold,
            target_sizes=sizes,
        )
        special = processor.tokenizer.all_special_tokens
        batch: list[list[Detection]] = []
        for size, result in zip(sizes, results, strict=True):
            found = (
                box_detection(label, chunk, box, score, size, special)
                for box, score, label in zip(
                    result["boxes"].tolist(),
                    result["scores"].tolist(),
                    result["text_labels"],
                    strict=True,
                )
            )
            batch.append([detection for detection in found if detection is not None])
        return batch
