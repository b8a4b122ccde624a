"""The removal method (odmap paper §3): remove co-occurring objects from an image and the noun
phrases naming them from its caption.

Planning pass: :class:`~xmr.synth.removal.stages.PlanRows` (after :class:`~xmr.synth.removal.
stages.DetectObjects` when boxes come from GroundingDINO) over the records; the plan is the
planned rows, one per (image, removal plan, chosen caption). Synthesis pass:
:class:`~xmr.synth.removal.stages.FillImages` and :class:`~xmr.synth.removal.stages.
WriteCaptions`, separate operators with their own resources, so that GPU and CPU stages run
concurrently. The runner (:mod:`xmr.synth.runner`) does the rest: resume, retries, shards,
errors, manifest.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xmr.data.coco import load_json
from xmr.data.records import ImageRecord
from xmr.data.synthetic import ROW_SCHEMA
from xmr.pipeline import Executor, Resources, Stage
from xmr.pipeline.stage import Batch
from xmr.progress import PARTS
from xmr.storage import StoragePath
from xmr.synth.batch import ERROR_COLUMNS
from xmr.synth.config import SynthConfig, SynthOptions, SynthRuntime, fingerprint
from xmr.synth.output import error_record, error_table
from xmr.synth.placement import Placement, stage_device
from xmr.synth.removal.plan import pair_record, plan_table, read_plan, save_plan
from xmr.synth.removal.rows import PlannedRow
from xmr.synth.removal.stages import (
    DetectObjects,
    FillImages,
    PlanRows,
    WriteCaptions,
    plan_inputs,
)
from xmr.synth.retry import PlanRetry, apply_retry
from xmr.synth.runner import BuildFacts, SynthPass, add_busy, log_lines
from xmr.text import FLICKR30K_ODMAP_CLASSES

STAGES = ("read", "detect", "plan", "fill", "caption")


def detection_classes(config: SynthConfig, root: Path) -> list[str]:
    """The class names GroundingDINO is prompted with: the dataset's categories."""
    if config.dataset == "flickr30k":
        return list(FLICKR30K_ODMAP_CLASSES)
    annotations = sorted((root / "annotations").glob(f"instances_{config.split}*.json"))
    if not annotations:
        raise FileNotFoundError(f"{root}/annotations has no instances_{config.split}*.json")
    return [c["name"] for c in load_json(annotations[0])["categories"]]


@dataclass
class RemovalPlan:
    """The planned rows (the plan's, then each retry's), the error rows, and the row keys of
    each segment."""

    rows: list[PlannedRow]
    errors: list[dict]
    segments: list[list[str]]

    def row_keys(self) -> list[list[str]]:
        return self.segments

    def add_retry(self, retry: PlanRetry) -> None:
        added = [PlannedRow.from_dict(r) for r in retry.units.to_pylist()]
        self.rows += added
        self.segments.append([r.key for r in added])
        self.errors = apply_retry(self.errors, retry.retried, retry.errors)


class RemovalMethod:
    """The removal method as a :class:`~xmr.synth.runner.SynthMethod`."""

    stages = STAGES
    row_schema = ROW_SCHEMA
    unit = "images"
    reason_schema = None

    def __init__(self, options: SynthOptions, runtime: SynthRuntime) -> None:
        self.options = options  # recorded whole in the manifest
        self.config = options.shared
        self.removal = options.methods["removal"]
        self.runtime = runtime
        self.records: dict[str, ImageRecord] = {}
        self.classes: list[str] = []

    def fingerprint(self) -> str:
        return fingerprint(self.config, self.removal)

    def check(self, root: Path) -> None:
        """Nothing to refuse before the records are read."""

    def take_inputs(self, records: list[ImageRecord]) -> set[str]:
        self.records = {str(r.image_id): r for r in records}
        return set(self.records)

    def saved_plan(self, out: StoragePath) -> tuple[RemovalPlan, dict[str, str]] | None:
        saved = read_plan(out)
        if saved is None:
            return None
        rows, errors, metadata = saved
        return RemovalPlan(rows, errors.to_pylist(), [[r.key for r in rows]]), metadata

    def prepare_planning(self, root: Path) -> None:
        """The classes GroundingDINO is prompted with (``--boxes groundingdino``)."""
        if self.config.boxes == "groundingdino":
            self.classes = detection_classes(self.config, root)

    def plan(self, executor: Executor, keys: Sequence[str] | None) -> tuple[RemovalPlan, dict]:
        records = list(self.records.values()) if keys is None else [self.records[k] for k in keys]
        rows, errors, busy = self._plan_pass(executor, records)
        return RemovalPlan(rows, errors, [[r.key for r in rows]]), busy

    def _plan_pass(
        self, executor: Executor, records: list[ImageRecord]
    ) -> tuple[list[PlannedRow], list[dict], dict[str, float]]:
        """Plan every record: ``(rows in plan order, error rows, busy seconds per stage)``."""
        if not records:
            return [], [], {}
        config, runtime = self.config, self.runtime
        detect = config.boxes == "groundingdino"
        place = Placement.on(executor, int(detect), runtime.gpus_per_actor)
        items = plan_inputs(records)
        blocks = math.ceil(len(items) / runtime.batch_size)
        stages: list[tuple[Stage, int]] = []
        detect_actors = 0
        if detect:
            resources = place.resources(True)
            detect_actors = place.actors(runtime.detect_actors, True, 1)
            stage = DetectObjects(
                config, self.classes, resources, runtime.batch_size, stage_device(resources)
            )
            stages.append((stage, detect_actors))
        cpu_default = place.cpus - (detect_actors if detect and not place.gpus else 0)
        plan_actors = place.actors(runtime.plan_actors, False, min(cpu_default, blocks))
        # Planning is light per record: large tasks keep Ray's per-task cost small, and twice as
        # many as the progress lines of a log make each tenth of the pass show as it is done.
        plan_batch = max(runtime.batch_size, math.ceil(len(items) / (2 * PARTS)))
        stages.append((PlanRows(config, self.removal, Resources(1.0), plan_batch), plan_actors))
        rows, errors, busy = [], [], Counter()
        lines = log_lines(len(items), "plan", "images", runtime)
        for batch in executor.stream(items, stages, blocks=blocks):
            add_busy(busy, batch)
            if lines:  # rows are keyed "image_id/..."; an image without a plan has none
                lines.update(len({str(key).split("/", 1)[0] for key in batch["key"]}))
            for i in range(len(batch["key"])):
                if batch["error"][i]:
                    errors.append(error_record(batch, i))
                else:
                    rows.append(PlannedRow.from_batch(batch, i))
        if lines and lines.done < lines.total:
            lines.update(lines.total - lines.done)  # the images that got no plan
        return rows, errors, dict(busy)

    def save_plan(self, out: StoragePath, plan: RemovalPlan, identity: dict[str, str]) -> None:
        save_plan(out, plan.rows, error_table(plan.errors), identity)

    def retry_of(self, plan: RemovalPlan, retried: list[str]) -> PlanRetry:
        return PlanRetry(plan_table(plan.rows), plan.errors, retried)

    def synthesis(self, executor: Executor, plan: RemovalPlan, keys: set[str]) -> SynthPass | None:
        """Fill and caption the planned rows ``keys``."""
        todo = [r for r in plan.rows if r.key in keys]
        if not todo:
            return None
        config, runtime = self.config, self.runtime
        fill_gpu, caption_gpu = config.fill == "sd", self.removal.caption == "captioner"
        place = Placement.on(executor, int(fill_gpu) + int(caption_gpu), runtime.gpus_per_actor)
        fill_res, caption_res = place.resources(fill_gpu), place.resources(caption_gpu)
        blocks = math.ceil(len(todo) / runtime.batch_size)
        if not (fill_gpu or caption_gpu):
            # Two CPU task stages with the same width: Ray Data fuses them into one task per batch.
            fill_actors = place.actors(runtime.fill_actors, False, min(place.cpus, blocks))
            caption_actors = place.actors(runtime.caption_actors, False, fill_actors)
        else:
            caption_actors = place.actors(runtime.caption_actors, caption_gpu, place.cpus // 4)
            cpu_left = place.cpus - (0 if caption_res.gpus else caption_actors)
            fill_actors = place.actors(runtime.fill_actors, fill_gpu, cpu_left)
        fill_batch = runtime.batch_size if not fill_res.gpus else min(runtime.batch_size, 8)
        fill = FillImages(config, fill_res, fill_batch, device=stage_device(fill_res))
        caption = WriteCaptions(
            config, self.removal, caption_res, runtime.batch_size, device=stage_device(caption_res)
        )
        blank = {name: "" for name in ERROR_COLUMNS}
        inputs = [{**r.to_dict(), **blank} for r in todo]
        stages: list[tuple[Stage, int]] = [(fill, fill_actors), (caption, caption_actors)]
        return SynthPass(inputs, stages, blocks, "synthesize", "rows")

    def output_rows(
        self, batch: Batch, keys: set[str]
    ) -> Iterator[tuple[str, dict | None, dict | None]]:
        for i in range(len(batch["key"])):
            if batch["error"][i]:
                yield str(batch["key"][i]), None, error_record(batch, i)
            else:
                row = pair_record(batch, i, self.config.fill, self.removal.caption)
                yield row["key"], row, None

    def finish(self, plan: RemovalPlan, facts: BuildFacts) -> dict[str, Any]:
        planned = len(plan.rows)
        return {
            "config": self.options.to_dict(),
            "counts": {
                "images": facts.images,
                "rows_planned": planned,
                "rows_out_by_stage": {
                    "read": facts.images,
                    "plan": planned,
                    "fill": planned - facts.stage_errors.get("fill", 0),
                    "caption": facts.written,
                },
            },
        }
