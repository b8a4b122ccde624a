"""The stages of a BiAug D′ build (``xmr synth --mode biaug``), as plain Stage classes.

Planning pass, one row per source example (an image and one of its captions):
``ProposeObjects`` (LLM, paper step 1) -> ``VerifyObjects`` (detector, or the annotations with
``--boxes gt``, and the §4.1 filters, step 2) -> ``DecoupleAttributes`` (LLM, steps 3–5).
Synthesis pass, one row per hard-negative group (an object, an attribute category, a positive
and a negative phrase): ``InpaintPairs`` (steps 6–7) paints the object's box twice, with the
same mask and seed, once per phrase.

As in the removal mode's stages, a failed row keeps flowing with its reason in the error columns
(``error_stage``, ``error_type``, ``error``) and later stages pass it through untouched. What a
step drops without failing the row (a proposal the detector did not confirm, an invalid CSV row)
goes to the row's ``dropped`` / ``rejected`` JSON columns: the build writes them to
``reasons.parquet``. LLM stages talk to their backend (:mod:`xmr.llm`) from inside the actor; no
prompt or key reaches a log. ``--llm oracle`` (ToyWorld's ground truth,
:class:`~xmr.biaug.oracle_chat.ToyWorldOracleChat`) is built here, and its questions carry the
row's image path.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict

import numpy as np

from xmr.biaug import (
    AnswerError,
    ToyWorldOracle,
    ToyWorldOracleChat,
    attribute_messages,
    filter_proposals,
    object_proposal_messages,
    parse_attribute_rows,
    parse_object_list,
    toyworld_class,
)
from xmr.biaug.validation import clip_token_counter, refuse_object, refuse_row
from xmr.data.errors import DataError
from xmr.data.images import load_image
from xmr.detection import Detection
from xmr.llm import ChatRequest, ChatResult, LLMSpec, create_chat
from xmr.llm.spec import ORACLE
from xmr.pipeline.stage import Batch, Resources, Stage
from xmr.removal.planning import box_mask
from xmr.synth.batch import (
    encode_png,
    fail_row,
    failed_rows,
    seconds_per_row,
    with_error_columns,
)
from xmr.synth.biaug.config import BiAugConfig
from xmr.synth.config import SynthConfig

GROUP_COLUMNS = (
    "key", "image_id", "caption_id", "source_caption", "path", "width", "height", "object",
    "category", "box", "phrase", "caption", "negative_phrase", "negative_caption", "seed",
)  # fmt: skip
"""A hard-negative group: ``key`` is its ``group_id``, ``box`` the JSON ``[x, y, w, h]``."""


def llm_request(
    config: SynthConfig,
    biaug: BiAugConfig,
    messages: Sequence[tuple[str, str]],
    image: str | None = None,
) -> ChatRequest:
    """The request a BiAug LLM stage sends: greedy, ``llm_max_tokens`` long, seeded; ``image``
    (the row's image path) only for a backend that reads images."""
    return ChatRequest(
        tuple(messages),
        max_tokens=biaug.llm_max_tokens,
        temperature=0.0,
        seed=config.seed,
        image=image,
    )


def propose_request(
    config: SynthConfig, biaug: BiAugConfig, caption: str, image: str | None = None
) -> ChatRequest:
    """What :class:`ProposeObjects` asks about ``caption`` (of the image at ``image``)."""
    messages = object_proposal_messages(caption, biaug.max_objects)
    return llm_request(config, biaug, messages, image)


def decouple_request(
    config: SynthConfig,
    biaug: BiAugConfig,
    caption: str,
    verified: str,
    image: str | None = None,
) -> ChatRequest:
    """What :class:`DecoupleAttributes` asks about ``caption`` and its ``verified`` objects
    (the JSON column :class:`VerifyObjects` writes) of the image at ``image``."""
    names = [v["name"] for v in json.loads(verified)]
    messages = attribute_messages(caption, names, biaug.attribute_categories(str(config.fill)))
    return llm_request(config, biaug, messages, image)


class _LLMStage(Stage):
    """A stage that asks the LLM one question per live row and reads the answers.

    ``engine_failures`` (``--llm vllm`` only): the failures of the engine pass that answered
    these questions beforehand, by cache key (see :class:`xmr.llm.vllm.EngineAnswers`).
    ``--llm oracle``: the ToyWorld oracle answers, and each question names its row's image.
    """

    def __init__(
        self,
        config: SynthConfig,
        biaug: BiAugConfig,
        llm: LLMSpec,
        resources: Resources,
        batch_size: int,
        device: str = "cpu",
        engine_failures: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(resources, batch_size)
        self.config = config
        self.biaug = biaug
        self.llm = llm
        self.device = device
        self.engine_failures = engine_failures
        self.chat = None

    def setup(self) -> None:
        if self.llm.backend == ORACLE:
            self.chat = ToyWorldOracleChat()
        else:
            self.chat = create_chat(self.llm, self.device, self.engine_failures)

    def teardown(self) -> None:
        """Close the backend (its connections, event loop or local model)."""
        if self.chat is not None:
            self.chat.close()
            self.chat = None

    def image(self, batch: Batch, i: int) -> str | None:
        """Row ``i``'s image path when the backend reads images, else None."""
        return str(batch["path"][i]) if self.llm.reads_images else None

    def _ask(self, batch: Batch, out: Batch) -> dict[int, ChatResult]:
        """The answers to the live rows' questions; rows whose call failed are failed here."""
        live = [int(i) for i in np.flatnonzero(~failed_rows(batch))]
        questions = {i: self.request(batch, i) for i in live}
        results = self.chat.complete(list(questions.values())) if questions else []
        answers: dict[int, ChatResult] = {}
        for i, result in zip(questions, results, strict=True):
            out[f"{self.name}_attempts"][i] = result.attempts
            if result.status == "ok":
                answers[i] = result
            else:
                fail_row(out, i, self.name, f"llm_{result.status}", result.error)
        return answers

    def request(self, batch: Batch, i: int) -> ChatRequest:
        """What to ask about row ``i``."""
        raise NotImplementedError


class ProposeObjects(_LLMStage):
    """``caption`` -> ``objects`` (JSON list): at most ``max_objects`` likely visible objects,
    most probable first (paper step 1), each past :func:`~xmr.biaug.validation.refuse_object`;
    ``refused_objects`` (JSON list of ``{name, rule, reason}``): the names it refused. A row
    whose every name is refused fails with ``validation:<rule>`` of the first.

    ``vocabulary``: the normalised names of ``--object-vocabulary`` (read in the driver), or
    None.
    """

    name = "propose"

    def __init__(
        self,
        config: SynthConfig,
        biaug: BiAugConfig,
        llm: LLMSpec,
        resources: Resources,
        batch_size: int,
        device: str = "cpu",
        engine_failures: Mapping[str, str] | None = None,
        vocabulary: frozenset[str] | None = None,
    ) -> None:
        super().__init__(config, biaug, llm, resources, batch_size, device, engine_failures)
        self.vocabulary = vocabulary

    def request(self, batch: Batch, i: int) -> ChatRequest:
        caption = str(batch["caption"][i])
        return propose_request(self.config, self.biaug, caption, self.image(batch, i))

    def process(self, batch: Batch) -> Batch:
        start = time.perf_counter()
        n = len(batch["key"])
        out = with_error_columns(batch)
        out["objects"] = np.array(["[]"] * n, dtype=object)
        out["refused_objects"] = np.array(["[]"] * n, dtype=object)
        out["propose_attempts"] = np.zeros(n, dtype=np.int64)
        for i, result in self._ask(batch, out).items():
            try:
                objects = parse_object_list(result.text, self.biaug.max_objects)
            except AnswerError as exc:
                fail_row(out, i, self.name, "AnswerError", f"object list: {exc}")
                continue
            if not objects:
                fail_row(out, i, self.name, "NoObjects", "the LLM proposed no object")
                continue
            kept, refused = [], []
            for name in objects:
                refusal = refuse_object(name, self.vocabulary)
                if refusal is None:
                    kept.append(name)
                else:
                    refused.append({"name": name, "rule": refusal[0], "reason": refusal[1]})
            out["refused_objects"][i] = json.dumps(refused)
            if not kept:
                reasons = "; ".join(r["reason"] for r in refused)
                fail_row(out, i, self.name, f"validation:{refused[0]['rule']}", reasons)
                continue
            out["objects"][i] = json.dumps(kept)
        out["seconds_propose"] = seconds_per_row(start, n)
        return out


def annotated_detections(
    objects: Sequence[str], annotations: Sequence[tuple[str, Sequence[float]]], dataset: str
) -> list[Detection]:
    """``--boxes gt``: the proposals an image's annotations confirm, as detections.

    A proposal naming an annotated class (ToyWorld: the class or a word its captions use for it,
    :func:`~xmr.biaug.oracle.toyworld_class`; other datasets: the category name, any case and
    spacing) gets the union box ``(x, y, w, h)`` px of all that class's instances, so that an
    edit covers every instance and a plural caption stays true, with score 1.0. Proposals naming
    no annotated class get no detection (the filters drop them as not detected).

    ``annotations``: ``(category, (x, y, w, h))`` of every annotated object of the image.
    """
    boxes: dict[str, list[Sequence[float]]] = {}
    for category, box in annotations:
        boxes.setdefault(category, []).append(box)
    spelled = {" ".join(category.casefold().split()): category for category in boxes}
    found = []
    for name in objects:
        if dataset == "toyworld":
            try:
                category = toyworld_class(name, list(boxes))
            except ValueError:
                continue
        else:
            category = spelled.get(" ".join(name.casefold().split()))
            if category is None:
                continue
        instances = boxes[category]
        x0 = min(b[0] for b in instances)
        y0 = min(b[1] for b in instances)
        x1 = max(b[0] + b[2] for b in instances)
        y1 = max(b[1] + b[3] for b in instances)
        found.append(Detection(name, (x0, y0, x1 - x0, y1 - y0), 1.0))
    return found


class VerifyObjects(Stage):
    """``objects`` + the image -> ``verified`` (JSON list of ``{name, bbox, score}``) and
    ``dropped`` (JSON list of the proposals left out, each with its rule and reason): the
    detector looks for the proposals and the §4.1 filters keep the usable boxes (step 2).

    ``--boxes gt``: no detector; the row's ``annotations`` (JSON ``[[category, [x, y, w, h]],
    ...]``) confirm the proposals (:func:`annotated_detections`), then the same filters.
    """

    name = "verify"

    def __init__(
        self,
        config: SynthConfig,
        biaug: BiAugConfig,
        resources: Resources,
        batch_size: int,
        device: str = "cpu",
    ) -> None:
        super().__init__(resources, batch_size)
        self.config = config
        self.device = device
        self.detector = None
        self.rules = biaug.proposal_filter()

    def setup(self) -> None:
        from xmr.detection import create_detector

        c = self.config
        if c.boxes == "gt":
            return
        self.detector = create_detector(
            c.detector,
            ["object"],  # replaced per image by the image's proposals
            c.detector_model,
            device=self.device,
            box_threshold=c.box_threshold,
            text_threshold=c.text_threshold,
        )
        self.detector.load()

    def teardown(self) -> None:
        self.detector = None

    def process(self, batch: Batch) -> Batch:
        start = time.perf_counter()
        n = len(batch["key"])
        out = with_error_columns(batch)
        out["verified"] = np.array(["[]"] * n, dtype=object)
        out["dropped"] = np.array(["[]"] * n, dtype=object)
        for i in np.flatnonzero(~failed_rows(batch)):
            objects = json.loads(batch["objects"][i])
            try:
                if self.config.boxes == "gt":
                    annotations = json.loads(batch["annotations"][i])
                    found = annotated_detections(objects, annotations, self.config.dataset)
                else:
                    image = load_image(str(batch["path"][i]))
                    (found,) = self.detector.detect_each([image], [objects])
            except (DataError, RuntimeError, ValueError) as exc:
                fail_row(out, i, self.name, type(exc).__name__, str(exc))
                continue
            kept, dropped = filter_proposals(
                objects, found, int(batch["width"][i]), int(batch["height"][i]), self.rules
            )
            out["verified"][i] = json.dumps([asdict(v) for v in kept])
            out["dropped"][i] = json.dumps([asdict(d) for d in dropped])
            if not kept:
                reasons = "; ".join(f"{d.name}: {d.reason}" for d in dropped)
                fail_row(out, i, self.name, "NoObjectVerified", f"no proposal kept ({reasons})")
        out["seconds_verify"] = seconds_per_row(start, n)
        return out


class DecoupleAttributes(_LLMStage):
    """``caption`` + ``verified`` -> ``attributes`` (JSON list of attribute rows: per object and
    category a phrase, the extended caption, a negative phrase and its caption), ``rejected``
    (JSON list of the answer's rows that are not of the asked form, with their line and reason)
    and ``refused`` (JSON list of ``{object, category, rule, message}``: well-formed rows that
    break a rule of :func:`~xmr.biaug.validation.refuse_row`), steps 3–5.
    """

    name = "decouple"
    count_tokens: Callable[[str], int] | None = None  # CLIP's tokenizer, loaded by setup

    def setup(self) -> None:
        super().setup()
        self.count_tokens = clip_token_counter()

    def request(self, batch: Batch, i: int) -> ChatRequest:
        caption, verified = str(batch["caption"][i]), str(batch["verified"][i])
        return decouple_request(self.config, self.biaug, caption, verified, self.image(batch, i))

    def process(self, batch: Batch) -> Batch:
        start = time.perf_counter()
        n = len(batch["key"])
        out = with_error_columns(batch)
        out["attributes"] = np.array(["[]"] * n, dtype=object)
        out["rejected"] = np.array(["[]"] * n, dtype=object)
        out["refused"] = np.array(["[]"] * n, dtype=object)
        out["decouple_attempts"] = np.zeros(n, dtype=np.int64)
        categories = self.biaug.attribute_categories(str(self.config.fill))
        for i, result in self._ask(batch, out).items():
            names = [v["name"] for v in json.loads(batch["verified"][i])]
            try:
                parsed, rejected = parse_attribute_rows(result.text, names, categories)
            except AnswerError as exc:
                fail_row(out, i, self.name, "AnswerError", f"attribute table: {exc}")
                continue
            rows, refused = [], []
            for row in parsed:
                refusal = refuse_row(
                    row.object, row.phrase, row.caption, row.negative_phrase,
                    row.negative_caption, self.count_tokens,
                )  # fmt: skip
                if refusal is None:
                    rows.append(row)
                else:
                    refused.append({"object": row.object, "category": row.category,
                                    "rule": refusal[0], "message": refusal[1]})  # fmt: skip
            out["attributes"][i] = json.dumps([asdict(r) for r in rows])
            out["rejected"][i] = json.dumps([asdict(r) for r in rejected])
            out["refused"][i] = json.dumps(refused)
            if not rows and not refused:
                reason = (
                    f"none of {len(rejected)} rows was valid"
                    if rejected
                    else "the LLM gave no row (it declined every object and category)"
                )
                fail_row(out, i, self.name, "NoValidRow", reason)
        out["seconds_decouple"] = seconds_per_row(start, n)
        return out


class InpaintPairs(Stage):
    """A group -> ``positive_image`` and ``negative_image`` (PNG bytes): the object's box
    painted with the phrase and with the negative phrase, same mask and seed (steps 6–7).

    ``--fill sd``: Stable Diffusion inpainting prompted with the phrase. ``--fill render``
    (ToyWorld): the world's renderer re-draws the object in the colour the phrase names, the
    exact counterfactual that SD output can be scored against.
    """

    name = "inpaint"

    def __init__(
        self,
        config: SynthConfig,
        resources: Resources,
        batch_size: int,
        device: str = "cpu",
        world: str | None = None,
    ) -> None:
        """``world``: the ToyWorld folder (``--fill render``)."""
        super().__init__(resources, batch_size)
        self.config = config
        self.device = device
        self.world = world
        self.inpainter = None
        self.oracle = None

    def setup(self) -> None:
        c = self.config
        if c.fill == "render":
            self.oracle = ToyWorldOracle(self.world)
            return
        from xmr.removal.sd_inpaint import StableDiffusionInpainter

        self.inpainter = StableDiffusionInpainter(
            c.sd_model,
            device=self.device,
            steps=c.sd_steps,
            guidance_scale=c.sd_guidance,
            resolution=c.sd_resolution,
        )
        self.inpainter.load()

    def teardown(self) -> None:
        self.inpainter = self.oracle = None

    def process(self, batch: Batch) -> Batch:
        start = time.perf_counter()
        n = len(batch["key"])
        out = with_error_columns(batch)
        positive = np.array([b""] * n, dtype=object)
        negative = np.array([b""] * n, dtype=object)
        live = [int(i) for i in np.flatnonzero(~failed_rows(batch))]
        try:
            if self.oracle is not None:
                self._render(batch, out, live, positive, negative)
            else:
                self._diffuse(batch, out, live, positive, negative)
        except (RuntimeError, ValueError) as exc:  # e.g. CUDA out of memory: the whole batch
            for i in live:
                if not out["error"][i]:
                    fail_row(out, i, self.name, type(exc).__name__, str(exc))
        out["positive_image"], out["negative_image"] = positive, negative
        out["seconds_inpaint"] = seconds_per_row(start, n)
        return out

    def _render(
        self, batch: Batch, out: Batch, live: list[int], positive: np.ndarray, negative: np.ndarray
    ) -> None:
        classes = self.oracle.config.classes
        for i in live:
            box = tuple(json.loads(batch["box"][i]))
            image_id = int(batch["image_id"][i])
            try:
                category = toyworld_class(str(batch["object"][i]), classes)
                painted = [
                    self.oracle.recolour(image_id, box, category, str(batch[column][i]))
                    for column in ("phrase", "negative_phrase")
                ]
            except ValueError as exc:
                fail_row(out, i, self.name, "ValueError", str(exc))
                continue
            positive[i], negative[i] = (encode_png(image) for image in painted)

    def _diffuse(
        self, batch: Batch, out: Batch, live: list[int], positive: np.ndarray, negative: np.ndarray
    ) -> None:
        sources: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for i in live:
            try:
                image = np.asarray(load_image(str(batch["path"][i])))
                box = json.loads(batch["box"][i])
                mask = box_mask([box], image.shape[1], image.shape[0])
                if not mask.any():
                    raise ValueError(f"box {box} covers no pixel")
                sources[i] = (image, mask)
            except (DataError, ValueError) as exc:
                fail_row(out, i, self.name, type(exc).__name__, str(exc))
        if not sources:
            return
        index = list(sources)
        images = [sources[i][0] for i in index] * 2
        masks = [sources[i][1] for i in index] * 2
        seeds = [int(batch["seed"][i]) for i in index] * 2
        prompts = [str(batch["phrase"][i]) for i in index]
        prompts += [str(batch["negative_phrase"][i]) for i in index]
        painted = self.inpainter.inpaint(images, masks, seeds, [""] * len(images), prompts)
        for k, i in enumerate(index):
            positive[i] = encode_png(painted[k])
            negative[i] = encode_png(painted[len(index) + k])
