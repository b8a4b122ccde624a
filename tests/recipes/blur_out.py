from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from dataclasses import replace

import cv2
import numpy as np

from xmr.data.errors import DataError
from xmr.pipeline import Executor, Resources, Stage
from xmr.pipeline.stage import Batch
from xmr.synth.batch import encode_png, fail_row, failed_rows, seconds_per_row, with_error_columns
from xmr.synth.config import SynthOptions, SynthRuntime
from xmr.synth.removal.method import RemovalMethod, RemovalPlan
from xmr.synth.removal.rows import PlannedRow
from xmr.synth.removal.stages import load_source, row_mask
from xmr.synth.runner import SynthPass


class BlurRegion(Stage):
    """Planned rows -> ``image``: PNG bytes of the source with the removed boxes blurred."""

    name = "fill"  # errors are counted by the removal method's stages
    needs_actor = False  # stateless: Ray tasks

    def __init__(self, radius: int, resources: Resources, batch_size: int) -> None:
        super().__init__(resources, batch_size)
        self.radius = radius

    def process(self, batch: Batch) -> Batch:
        start = time.perf_counter()
        out = with_error_columns(batch)
        images = np.array([b""] * len(batch["key"]), dtype=object)
        for i in np.flatnonzero(~failed_rows(batch)):  # rows failed upstream pass through
            try:
                row = PlannedRow.from_batch(batch, i)
                image, mask = load_source(row), row_mask(row)  # [H, W, 3] uint8, [H, W] bool
                blurred = cv2.GaussianBlur(image, (0, 0), self.radius)
                images[i] = encode_png(np.where(mask[..., None], blurred, image))
            except (DataError, ValueError) as exc:  # never raise: the row carries its reason
                fail_row(out, i, self.name, type(exc).__name__, str(exc))
        out["image"] = images
        out["seconds_fill"] = seconds_per_row(start, len(images))
        return out


class BlurOutMethod(RemovalMethod):
    """The removal method's plan and captions, the removed boxes blurred instead of filled."""

    def __init__(self, options: SynthOptions, runtime: SynthRuntime) -> None:
        super().__init__(options, runtime)
        self.blur = options.own  # the config of its mode: a BlurConfig

    def fingerprint(self) -> str:  # the removal method's hash (its --mode too), the radius
        text = f"{super().fingerprint()}/{self.blur.blur_radius}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def synthesis(self, executor: Executor, plan: RemovalPlan, keys: set[str]) -> SynthPass | None:
        work = super().synthesis(executor, plan, keys)  # [(fill, n), (caption, m)]
        if work is None:
            return None
        (fill, workers), caption = work.stages
        blur = BlurRegion(self.blur.blur_radius, Resources(1.0), fill.batch_size)
        return replace(work, stages=[(blur, workers), caption])

    def output_rows(
        self, batch: Batch, keys: set[str]
    ) -> Iterator[tuple[str, dict | None, dict | None]]:
        for key, row, error in super().output_rows(batch, keys):
            yield key, row and {**row, "fill": "blur-out"}, error
