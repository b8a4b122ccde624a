"""The four stages of a removal D′ build, as plain :class:`~xmr.pipeline.Stage` classes.

``DetectObjects`` (optional) -> ``PlanRows`` -> ``FillImages`` -> ``WriteCaptions``. Each takes a
numpy batch of columns and returns one; none raises on a bad row: a failed row keeps flowing
with its reason in the error columns (:mod:`xmr.synth.batch`), so every planned row reaches the
writer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import cv2
import numpy as np

from xmr.data.errors import DataError
from xmr.data.images import decode_image, load_image
from xmr.data.records import Caption, ImageRecord, ObjectAnnotation
from xmr.pipeline.stage import Batch, Resources, Stage
from xmr.removal.fill import CPU_FILLS, Fill
from xmr.removal.planning import box_mask, removal_plans
from xmr.synth.batch import (
    ERROR_COLUMNS,
    encode_png,
    fail_row,
    failed_rows,
    row_seed,
    seconds_per_row,
    with_error_columns,
)
from xmr.synth.config import SynthConfig
from xmr.synth.removal.captions import ImageCaptioner, prompt_caption, rewrite_caption
from xmr.synth.removal.config import RemovalConfig
from xmr.synth.removal.rows import ROW_COLUMNS, PlanFailure, PlannedRow, plan_rows
from xmr.text import caption_mentions


def _describe(exc: BaseException) -> tuple[str, str]:
    return type(exc).__name__, str(exc)


def _blank_errors(n: int) -> dict[str, np.ndarray]:
    return {name: np.array([""] * n, dtype=object) for name in ERROR_COLUMNS}


def _set_error(batch: Batch, i: int, stage: str, exc: BaseException) -> None:
    fail_row(batch, i, stage, *_describe(exc))


def load_source(row: PlannedRow) -> np.ndarray:
    """The source image of a row as ``[H, W, 3]`` uint8, checked against the annotated size.

    Raises:
        DataError: missing or unreadable file, or a size that differs from the annotation.
    """
    image = np.asarray(load_image(row.path))
    height, width = image.shape[:2]
    if (width, height) != (row.width, row.height):
        raise DataError(
            f"{row.path}: image is {width}x{height} but its annotation says "
            f"{row.width}x{row.height}"
        )
    return image


def row_mask(row: PlannedRow) -> np.ndarray:
    """``[H, W]`` bool: the region to fill (the removed classes' boxes).

    Raises:
        ValueError: the boxes cover no pixel (degenerate boxes).
    """
    mask = box_mask(row.boxes, row.width, row.height)
    if not mask.any():
        raise ValueError(f"degenerate boxes {list(row.boxes)}: the removed region is empty")
    return mask


class DetectObjects(Stage):
    """``record`` (JSON) -> ``record`` with GroundingDINO's detections as its objects.

    For data without box annotations (``--boxes groundingdino``). A record whose image cannot be
    read or detected gets an error (key: its image id).
    """

    name = "detect"

    def __init__(
        self,
        config: SynthConfig,
        classes: list[str],
        resources: Resources,
        batch_size: int,
        device: str = "auto",
    ) -> None:
        super().__init__(resources, batch_size)
        self.config = config
        self.classes = classes
        self.device = device
        self.detector = None

    def setup(self) -> None:
        from xmr.detection import create_detector

        self.detector = create_detector(
            self.config.detector,
            self.classes,
            self.config.detector_model,
            device=self.device,
            box_threshold=self.config.box_threshold,
            text_threshold=self.config.text_threshold,
        )
        self.detector.load()

    def teardown(self) -> None:
        self.detector = None

    def process(self, batch: Batch) -> Batch:
        start = time.perf_counter()
        n = len(batch["record"])
        out = {"record": batch["record"].copy(), "key": batch["key"], **_blank_errors(n)}
        records = [ImageRecord.from_dict(json.loads(r)) for r in batch["record"]]
        images, ok = [], []
        for i, record in enumerate(records):
            try:
                images.append(load_image(record.path))
                ok.append(i)
            except DataError as exc:
                _set_error(out, i, self.name, exc)
        if ok:
            try:
                detections = self.detector.detect(images)
            except (RuntimeError, ValueError) as exc:
                for i in ok:
                    _set_error(out, i, self.name, exc)
                detections = []
            for i, found in zip(ok, detections, strict=False):
                record = records[i]
                objects = tuple(ObjectAnnotation(d.category, d.bbox, {}) for d in found)
                detected = ImageRecord(
                    record.image_id,
                    record.path,
                    record.width,
                    record.height,
                    record.captions,
                    objects,
                    record.split,
                )
                out["record"][i] = json.dumps(detected.to_dict())
        out["seconds_detect"] = seconds_per_row(start, n)
        return out


def plan_inputs(records: Sequence[ImageRecord]) -> list[dict]:
    """The input rows of :class:`DetectObjects` / :class:`PlanRows`: key and record JSON."""
    return [{"key": str(r.image_id), "record": json.dumps(r.to_dict())} for r in records]


class PlanRows(Stage):
    """``record`` (JSON) -> the image's planned rows (:func:`xmr.synth.removal.rows.plan_rows`).

    One input row becomes zero or more output rows. A record whose boxes cannot be planned, or
    that an earlier stage failed, becomes one error row keyed by its image id.
    """

    name = "plan"
    needs_actor = False

    def __init__(
        self,
        config: SynthConfig,
        removal: RemovalConfig,
        resources: Resources,
        batch_size: int,
    ) -> None:
        super().__init__(resources, batch_size)
        self.config = config
        self.removal = removal

    def process(self, batch: Batch) -> Batch:
        start = time.perf_counter()
        c, removal = self.config, self.removal
        rows: list[dict] = []
        planned: list[tuple[ImageRecord, list[tuple[str, ...]]]] = []
        failed = "error" in batch
        for i, (key, text) in enumerate(zip(batch["key"], batch["record"], strict=True)):
            if failed and batch["error"][i]:
                stage, kind, message = (batch[name][i] for name in ERROR_COLUMNS)
                rows.append(self._error_row(key, stage, kind, message))
                continue
            record = ImageRecord.from_dict(json.loads(text))
            try:
                plans = removal_plans(record, removal.alpha1, removal.alpha2, removal.alpha3)
            except ValueError as exc:
                rows.append(self._error_row(key, self.name, *_describe(exc)))
                continue
            if plans:
                planned.append((record, plans))
        if removal.caption == "np-removal":
            mentions = caption_mentions(c.dataset, [record for record, _ in planned])
        rewrite = None
        if removal.caption == "np-removal":

            def rewrite(caption: Caption, removed: tuple[str, ...]) -> str:
                return rewrite_caption(caption, removed, c.dataset)

        failures: list[PlanFailure] = []
        offset = 0
        for record, plans in planned:
            own = None
            if removal.caption == "np-removal":
                own = mentions[offset : offset + len(record.captions)]
                offset += len(record.captions)
            for row in plan_rows(
                record,
                plans,
                own,
                captions_per_image=c.captions_per_image,
                seed=c.seed,
                rewrite=rewrite,
                failures=failures,
            ):
                rows.append({**row.to_dict(), "error_stage": "", "error_type": "", "error": ""})
        for f in failures:
            rows.append(self._error_row(f.key, f.stage, f.error_type, f.message))
        columns = {
            name: np.array([r[name] for r in rows], dtype=object)
            for name in (*ROW_COLUMNS, *ERROR_COLUMNS)
        }
        columns["seconds_plan"] = seconds_per_row(start, len(rows))
        if "seconds_detect" in batch:  # carry the detector's time on to the planned rows
            columns["seconds_detect"] = np.full(
                len(rows), float(np.sum(batch["seconds_detect"])) / max(len(rows), 1)
            )
        return columns

    @staticmethod
    def _error_row(key: str, stage: str, error_type: str, message: str) -> dict:
        empty = PlannedRow(str(key), -1, -1, "", "[]", "", 0, 0, (), (), ()).to_dict()
        return {**empty, "error_stage": stage, "error_type": error_type, "error": message}


class _RowStage(Stage):
    """A stage over planned rows that adds columns and passes failed rows through."""

    def __init__(
        self, config: SynthConfig, resources: Resources, batch_size: int, device: str = "auto"
    ) -> None:
        super().__init__(resources, batch_size)
        self.config = config
        self.device = device


class FillImages(_RowStage):
    """Planned rows -> ``image`` (PNG bytes of the filled source image; ``b""`` on error)."""

    name = "fill"
    inpainter = None  # the Stable Diffusion pipeline, set up by ``--fill sd`` workers

    @property
    def needs_actor(self) -> bool:
        return self.config.fill == "sd"

    def setup(self) -> None:
        if self.config.fill == "sd":
            from xmr.removal.sd_inpaint import StableDiffusionInpainter

            c = self.config
            self.inpainter = StableDiffusionInpainter(
                c.sd_model,
                device=self.device,
                steps=c.sd_steps,
                guidance_scale=c.sd_guidance,
                resolution=c.sd_resolution,
            )
            self.inpainter.load()
        elif self.resources.cpus >= 1:
            cv2.setNumThreads(int(self.resources.cpus))

    def teardown(self) -> None:
        self.inpainter = None

    def process(self, batch: Batch) -> Batch:
        start = time.perf_counter()
        out = with_error_columns(batch)
        n = len(batch["key"])
        images = np.array([b""] * n, dtype=object)
        failed = failed_rows(batch)
        sources: dict[int, tuple[PlannedRow, np.ndarray, np.ndarray]] = {}
        for i in np.flatnonzero(~failed):
            row = PlannedRow.from_batch(batch, i)
            try:
                sources[i] = (row, load_source(row), row_mask(row))
            except (DataError, ValueError) as exc:
                _set_error(out, i, self.name, exc)
        if self.inpainter is None:
            fill: Fill = CPU_FILLS[self.config.fill]
            for i, (_, image, mask) in sources.items():
                try:
                    images[i] = encode_png(fill(image, mask))
                except (ValueError, cv2.error) as exc:
                    _set_error(out, i, self.name, exc)
        elif sources:
            index = list(sources)
            try:
                filled = self.inpainter.inpaint(
                    [sources[i][1] for i in index],
                    [sources[i][2] for i in index],
                    [row_seed(self.config.seed, sources[i][0].key) for i in index],
                    [", ".join(sources[i][0].removed) for i in index],
                )
                for i, image in zip(index, filled, strict=True):
                    images[i] = encode_png(image)
            except (RuntimeError, ValueError) as exc:  # e.g. CUDA out of memory: the whole batch
                for i in index:
                    _set_error(out, i, self.name, exc)
        out["image"] = images
        out["seconds_fill"] = seconds_per_row(start, n)
        return out


class WriteCaptions(_RowStage):
    """Filled rows -> ``caption``: the planned noun-phrase rewrite, a prompt, or a captioner."""

    name = "caption"
    captioner: ImageCaptioner | None = None  # set up by ``--caption captioner`` workers

    def __init__(
        self,
        config: SynthConfig,
        removal: RemovalConfig,
        resources: Resources,
        batch_size: int,
        device: str = "auto",
    ) -> None:
        super().__init__(config, resources, batch_size, device)
        self.removal = removal

    @property
    def needs_actor(self) -> bool:
        return self.removal.caption == "captioner"

    def setup(self) -> None:
        if self.removal.caption == "captioner":
            self.captioner = ImageCaptioner(self.removal.captioner_model, device=self.device)
            self.captioner.load()

    def teardown(self) -> None:
        self.captioner = None

    def _one(self, batch: Batch, i: int) -> str:
        if self.removal.caption == "prompt":
            kept = json.loads(batch["kept"][i])
            return prompt_caption(kept, row_seed(self.config.seed, str(batch["key"][i])))
        return str(batch["rewritten"][i])  # noun-phrase removal happens when planning

    def process(self, batch: Batch) -> Batch:
        start = time.perf_counter()
        out = with_error_columns(batch)
        n = len(batch["key"])
        captions = np.array([""] * n, dtype=object)
        todo = np.flatnonzero(~failed_rows(batch))
        if self.captioner is None:
            for i in todo:
                try:
                    captions[i] = self._one(batch, i)
                except (ValueError, LookupError) as exc:
                    _set_error(out, i, self.name, exc)
        elif len(todo):
            try:
                texts = self.captioner.caption(
                    [decode_image(batch["image"][i], str(batch["key"][i])) for i in todo]
                )
                for i, text in zip(todo, texts, strict=True):
                    if text.strip():
                        captions[i] = text
                    else:
                        _set_error(out, i, self.name, ValueError("the captioner wrote no words"))
            except (RuntimeError, ValueError, OSError) as exc:
                for i in todo:
                    _set_error(out, i, self.name, exc)
        out["caption"] = captions
        out["seconds_caption"] = seconds_per_row(start, n)
        return out
