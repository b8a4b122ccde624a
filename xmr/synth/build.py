"""Build D′: read -> (detect) -> plan -> fill -> caption -> write, resumable.

Two passes, each a list of stages that the executor (:class:`~xmr.pipeline.ray_executor.
RayExecutor`, Ray Data) maps over rows. The planning pass runs :class:`~xmr.synth.stages.PlanRows`
(after :class:`~xmr.synth.stages.DetectObjects` when boxes come from GroundingDINO) over the
records and saves the plan. The synthesis pass runs :class:`~xmr.synth.stages.FillImages` and
:class:`~xmr.synth.stages.WriteCaptions` — separate operators with their own resources, so GPU
and CPU stages run concurrently — over the rows of the shards not yet on disk, and this module
commits each shard as soon as its last row arrives. A rerun with the same config and ``out``
reuses the plan and redoes only the missing shards (a finished build: none, and Ray is not
started). Every refusal that needs no cluster (another config or input data in ``out``, shards
of another plan) comes before Ray starts.

``planned`` counts units of work: every planned row, plus every image that could not be planned
(unreadable input, bad annotation, unplannable boxes). Each unit ends in exactly one of the
shards or ``errors.parquet``: ``planned == written + errors``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from xmr import __version__
from xmr.data import DataError, DataIssue, read_dataset
from xmr.data.coco import load_json
from xmr.data.records import ImageRecord
from xmr.data.registry import check_data_folder
from xmr.data.synthetic import MANIFEST, ROW_SCHEMA
from xmr.pipeline import Resources, Stage
from xmr.pipeline.stage import Batch
from xmr.progress import PARTS, ProgressLines, stdout_is_terminal
from xmr.storage import StoragePath
from xmr.synth.config import SynthConfig, SynthRuntime
from xmr.synth.output import (
    check_out_dir,
    commit_shard,
    count_written,
    error_record,
    error_table,
    finished_shards,
    merge_errors,
    pair_record,
    plan_table,
    read_plan,
    read_shard,
    save_plan,
    shard_errors,
    write_json_atomic,
)
from xmr.synth.retry import (
    PlanRetry,
    RetryCounts,
    apply_retry,
    plan_retry_keys,
    save_retry,
    saved_retries,
    segment_shards,
    shard_retries,
)
from xmr.synth.rows import PlannedRow
from xmr.synth.stages import (
    ERROR_COLUMNS,
    DetectObjects,
    FillImages,
    PlanRows,
    WriteCaptions,
    plan_inputs,
)
from xmr.text import FLICKR30K_ODMAP_CLASSES
from xmr.toyworld.default_world import default_toyworld

if TYPE_CHECKING:  # the executor imports Ray: loaded only when a build runs
    from xmr.pipeline.ray_executor import RayExecutor

STAGES = ("read", "detect", "plan", "fill", "caption")


@dataclass(frozen=True)
class SynthResult:
    """What a build did. ``manifest`` is what ``manifest.json`` holds."""

    out: StoragePath
    manifest: dict

    @property
    def error_rate(self) -> float:
        return self.manifest["errors"] / max(self.manifest["planned"], 1)


def data_root(config: SynthConfig, progress: bool) -> StoragePath:
    """The dataset folder: ``--data``, or the embedded ToyWorld generated into the cache."""
    if config.data is not None:
        check_data_folder(config.dataset, config.data)
        return config.data
    if config.dataset != "toyworld":
        raise ValueError(f"--dataset {config.dataset} needs --data (the dataset's folder)")
    return default_toyworld(config.seed, progress=progress)


def read_inputs(config: SynthConfig, root: Path) -> tuple[list[ImageRecord], list[dict]]:
    """The records to plan and one error row per image left out (or input item unreadable).

    An image with any reader issue (missing file, bad box, ...) is left out whole: removing a
    class is only right when every box of the image is known. ``--limit`` keeps the first N
    image ids of the split, counting the left-out ones.
    """
    issues: list[DataIssue] = []
    records = read_dataset(config.dataset, root, config.split, issues=issues)
    if config.limit is not None:
        ids = sorted(
            {r.image_id for r in records} | {i.image_id for i in issues if i.image_id is not None}
        )
        allowed = set(ids[: config.limit])
        records = [r for r in records if r.image_id in allowed]
        issues = [i for i in issues if i.image_id is None or i.image_id in allowed]
    by_image: dict[object, list[DataIssue]] = defaultdict(list)
    for issue in issues:
        by_image[issue.image_id if issue.image_id is not None else issue.item].append(issue)
    errors = [
        {
            "key": str(key),
            "stage": "read",
            "error_type": "DataError",
            "message": "; ".join(f"{i.item}: {i.reason}" for i in found),
        }
        for key, found in by_image.items()
    ]
    records = [r for r in records if r.image_id not in by_image]
    return records, errors


def inputs_hash(records: Sequence[ImageRecord], read_errors: Sequence[dict]) -> str:
    """Hash of the input records (file names, not folders) and what was left out."""
    digest = hashlib.sha256()
    for record in records:
        data = record.to_dict()
        data["path"] = Path(data["path"]).name
        digest.update(json.dumps(data, sort_keys=True).encode())
    digest.update(json.dumps(sorted(e["key"] for e in read_errors)).encode())
    return digest.hexdigest()[:16]


def detection_classes(config: SynthConfig, root: Path) -> list[str]:
    """The class names GroundingDINO is prompted with: the dataset's categories."""
    if config.dataset == "flickr30k":
        return list(FLICKR30K_ODMAP_CLASSES)
    annotations = sorted((root / "annotations").glob(f"instances_{config.split}*.json"))
    if not annotations:
        raise FileNotFoundError(f"{root}/annotations has no instances_{config.split}*.json")
    return [c["name"] for c in load_json(annotations[0])["categories"]]


@dataclass(frozen=True)
class Placement:
    """How many actors each stage gets, and with what resources, on this cluster.

    GPU stages (SD fill, captioner, detector) split the GPUs evenly, at most ``gpus_per_actor``
    per actor; CPU stages get one core per actor.
    """

    cpus: int
    gpus: int
    gpu_stages: int
    gpus_per_actor: float

    @property
    def share(self) -> float:
        """GPUs per actor of a GPU stage."""
        return min(self.gpus_per_actor, self.gpus / max(self.gpu_stages, 1))

    def resources(self, on_gpu: bool) -> Resources:
        return Resources(cpus=1.0, gpus=self.share) if on_gpu and self.gpus else Resources(1.0)

    def actors(self, requested: int | None, on_gpu: bool, cpu_default: int) -> int:
        """``requested``, else the GPU stage's share of the GPUs, else ``cpu_default``."""
        if requested is not None:
            return requested
        if on_gpu and self.gpus:
            return max(1, int(self.gpus / max(self.gpu_stages, 1) / self.share))
        return max(1, cpu_default)


def placement(executor: RayExecutor, gpu_stages: int, runtime: SynthRuntime) -> Placement:
    return Placement(executor.cpus, executor.gpus, gpu_stages, runtime.gpus_per_actor)


def stage_device(resources: Resources) -> str:
    return "cuda" if resources.gpus > 0 else "cpu"


def add_busy(busy: Counter, batch: Batch) -> None:
    """Add a batch's ``seconds_<stage>`` columns to the busy seconds per stage."""
    for name, seconds in batch.items():
        if name.startswith("seconds_"):
            busy[name.removeprefix("seconds_")] += float(np.sum(seconds))


def log_lines(total: int, desc: str, unit: str, runtime: SynthRuntime) -> ProgressLines | None:
    """Progress as whole lines when standard output is a log (a job, CI, a pipe); None on a
    terminal, where Ray Data draws its own bars, or with ``--no-progress``."""
    if not runtime.progress or stdout_is_terminal():
        return None
    return ProgressLines(total, desc, unit=unit)


def plan_pass(
    executor: RayExecutor,
    records: list[ImageRecord],
    config: SynthConfig,
    runtime: SynthRuntime,
    classes: list[str],
) -> tuple[list[PlannedRow], list[dict], dict[str, float]]:
    """Plan every record: ``(rows in plan order, error rows, busy seconds per stage)``.

    ``classes``: what GroundingDINO is prompted with (``--boxes groundingdino`` only).
    """
    if not records:
        return [], [], {}
    detect = config.boxes == "groundingdino"
    place = placement(executor, int(detect), runtime)
    items = plan_inputs(records)
    blocks = math.ceil(len(items) / runtime.batch_size)
    stages: list[tuple[Stage, int]] = []
    detect_actors = 0
    if detect:
        resources = place.resources(True)
        detect_actors = place.actors(runtime.detect_actors, True, 1)
        stage = DetectObjects(
            config, classes, resources, runtime.batch_size, stage_device(resources)
        )
        stages.append((stage, detect_actors))
    cpu_default = place.cpus - (detect_actors if detect and not place.gpus else 0)
    plan_actors = place.actors(runtime.plan_actors, False, min(cpu_default, blocks))
    # Planning is light per record: large tasks keep Ray's per-task cost small, and twice as
    # many as the progress lines of a log make each tenth of the pass show as it is done.
    plan_batch = max(runtime.batch_size, math.ceil(len(items) / (2 * PARTS)))
    stages.append((PlanRows(config, Resources(1.0), plan_batch), plan_actors))
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


class ShardAssembler:
    """Collects finished rows per shard and commits a shard when its last row arrives.

    ``retries``: committed shards whose transient errors are being retried (shard -> keys): such
    a shard is complete when its retried rows are, and is rewritten with its other rows and
    errors as they were (:func:`~xmr.synth.output.commit_shard` with ``rewrite``).
    """

    def __init__(
        self,
        out: StoragePath,
        shards: Sequence[Sequence[str]],
        pending: set[int],
        schema: pa.Schema = ROW_SCHEMA,
        retries: Mapping[int, Sequence[str]] | None = None,
    ) -> None:
        """``schema``: of the rows (the removal mode's, or BiAug's)."""
        retries = retries or {}
        self.out = out
        self.schema = schema
        self.shard_of = {k: s for s in pending for k in shards[s]}
        self.shard_of.update({k: s for s, keys in retries.items() for k in keys})
        self.order = {k: n for s in pending | set(retries) for n, k in enumerate(shards[s])}
        self.remaining = {s: len(shards[s]) for s in pending}
        self.remaining.update({s: len(keys) for s, keys in retries.items()})
        self.retried = {s: set(keys) for s, keys in retries.items()}
        self.recovered = 0
        self.rows: dict[int, list[dict]] = defaultdict(list)
        self.errors: dict[int, list[dict]] = defaultdict(list)

    def add(self, key: str, row: dict | None, error: dict | None) -> None:
        shard = self.shard_of.pop(key)  # KeyError: a row twice, or one not planned
        if row is not None:
            self.rows[shard].append(row)
        else:
            self.errors[shard].append(error)
        self.remaining[shard] -= 1
        if self.remaining[shard] == 0:
            rows, errors = self.rows.pop(shard, []), self.errors.pop(shard, [])
            rewrite = shard in self.retried
            if rewrite:
                self.recovered += len(rows)
                asked = self.retried.pop(shard)
                rows += read_shard(self.out, shard, self.schema)
                errors += [e for e in shard_errors(self.out, shard) if e["key"] not in asked]
            rows.sort(key=lambda r: self.order[r["key"]])
            errors.sort(key=lambda e: self.order[e["key"]])
            commit_shard(self.out, shard, rows, errors, self.schema, rewrite=rewrite)
            del self.remaining[shard]

    def check_complete(self) -> None:
        if self.remaining:
            raise RuntimeError(
                f"the pipeline returned no result for {len(self.shard_of)} planned rows "
                f"(shards {sorted(self.remaining)[:5]}...); rerun to finish them"
            )


def synth_pass(
    executor: RayExecutor,
    rows: list[PlannedRow],
    shards: list[list[str]],
    pending: set[int],
    retries: dict[int, list[str]],
    config: SynthConfig,
    runtime: SynthRuntime,
    counts: RetryCounts,
) -> dict[str, float]:
    """Fill and caption the rows of the ``pending`` shards and the ``retries`` of committed
    ones, committing shards as they finish; the retries are added to ``counts``.

    Returns busy seconds per stage.
    """
    keys = {k for s in pending for k in shards[s]}
    keys.update(k for again in retries.values() for k in again)
    todo = [r for r in rows if r.key in keys]
    if not todo:
        return {}
    fill_gpu, caption_gpu = config.fill == "sd", config.caption == "captioner"
    place = placement(executor, int(fill_gpu) + int(caption_gpu), runtime)
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
        config, caption_res, runtime.batch_size, device=stage_device(caption_res)
    )
    stages: list[tuple[Stage, int]] = [(fill, fill_actors), (caption, caption_actors)]
    blank = {name: "" for name in ERROR_COLUMNS}
    inputs = [{**r.to_dict(), **blank} for r in todo]
    assembler = ShardAssembler(runtime.out, shards, pending, retries=retries)
    busy: Counter = Counter()
    lines = log_lines(len(todo), "synthesize", "rows", runtime)
    for batch in executor.stream(inputs, stages, blocks=blocks):
        start = time.perf_counter()
        add_busy(busy, batch)
        if lines:
            lines.update(len(batch["key"]))
        for i in range(len(batch["key"])):
            if batch["error"][i]:
                assembler.add(str(batch["key"][i]), None, error_record(batch, i))
            else:
                row = pair_record(batch, i, config.fill, config.caption)
                assembler.add(row["key"], row, None)
        busy["write"] += time.perf_counter() - start
    assembler.check_complete()
    counts.retried += sum(len(again) for again in retries.values())
    counts.recovered += assembler.recovered
    return dict(busy)


def _saved_plan(
    out: StoragePath, config: SynthConfig, digest: str
) -> tuple[list[PlannedRow], list[dict], list[list[str]]] | None:
    """The plan an earlier run of this build saved in ``out``, its retries applied: ``(rows,
    error rows, row keys of each segment)`` (the plan's, then each retry's), or None.

    Raises:
        ValueError: ``out`` holds a plan made from another config or other input data.
    """
    saved = read_plan(out)
    if saved is None:
        return None
    rows, plan_errors, metadata = saved
    check_same_build(out, metadata, config.fingerprint(), digest)
    errors = plan_errors.to_pylist()
    segments = [[r.key for r in rows]]
    for retry in saved_retries(out):
        added = [PlannedRow.from_dict(r) for r in retry.units.to_pylist()]
        rows += added
        segments.append([r.key for r in added])
        errors = apply_retry(errors, retry.retried, retry.errors)
    return rows, errors, segments


def check_same_build(
    out: StoragePath, metadata: dict[str, str], config_hash: str, digest: str
) -> None:
    """Raise ValueError unless the plan saved in ``out`` (its ``metadata``) was made from this
    config and these inputs: a rerun may only finish its own build."""
    for name, value in {"config_hash": config_hash, "inputs_hash": digest}.items():
        if metadata.get(name) != value:
            raise ValueError(
                f"--out {out} holds a D′ built from another "
                f"{'config' if name == 'config_hash' else 'input data'} "
                f"({name} {metadata.get(name)} != {value}); use a new --out"
            )


def run_figures(
    timings: dict[str, float], busy: dict[str, float], rows_this_run: int
) -> dict[str, object]:
    """The manifest's ``timings_s``, ``busy_s`` (seconds per stage) and ``rows_per_second``."""
    seconds = timings["synthesize"]
    return {
        "timings_s": {k: round(v, 3) for k, v in timings.items()},
        "busy_s": {k: round(v, 3) for k, v in busy.items()},
        "rows_per_second": round(rows_this_run / seconds, 2)
        if rows_this_run and seconds > 0
        else None,
    }


def write_manifest(out: StoragePath, manifest: dict) -> SynthResult:
    """Check the row accounting (``planned == written + errors``) and write the manifest."""
    if manifest["planned"] != manifest["written"] + manifest["errors"]:
        raise RuntimeError(
            f"row accounting is off: planned {manifest['planned']} != written "
            f"{manifest['written']} + errors {manifest['errors']} (please report this)"
        )
    write_json_atomic(manifest, out / MANIFEST)
    return SynthResult(out=out, manifest=manifest)


def _shards_of(
    out: StoragePath, segments: Sequence[Sequence[str]], rows_per_shard: int
) -> tuple[list[list[str]], set[int]]:
    """The plan's shards (row keys of each; the plan's segments cut one by one,
    :func:`~xmr.synth.retry.segment_shards`) and the indices of those already in ``out``.

    Raises:
        DataError: a row is planned twice, or ``out`` holds shards of another plan.
    """
    keys = [k for segment in segments for k in segment]
    if len(set(keys)) != len(keys):
        twice = next(k for k, n in Counter(keys).items() if n > 1)
        raise DataError(f"row {twice} is planned twice: the data has duplicate caption ids")
    shards = segment_shards(segments, rows_per_shard)
    return shards, finished_shards(out, shards)


def start_executor(runtime: SynthRuntime) -> RayExecutor:
    """Attach to the cluster or start local Ray (imported here: planning a refusal needs none)."""
    from xmr.pipeline.ray_executor import RayExecutor

    return RayExecutor(runtime.address, runtime.num_cpus, progress=runtime.progress)


def synthesize(config: SynthConfig, runtime: SynthRuntime) -> SynthResult:
    """Build (or finish building) D′ into ``runtime.out``; see the module docstring."""
    start = time.perf_counter()
    out = runtime.out
    check_out_dir(out)
    root = data_root(config, runtime.progress)
    records, read_errors = read_inputs(config, root)
    digest = inputs_hash(records, read_errors)
    timings = {"read": time.perf_counter() - start}

    # Every refusal that needs no cluster comes before Ray starts.
    saved = _saved_plan(out, config, digest)
    by_image = {str(r.image_id): r for r in records}
    again: list[str] = []
    if saved is not None:
        rows, errors, segments = saved
        again = [k for k in plan_retry_keys(errors, runtime.retry_errors) if k in by_image]
    detect = (saved is None or bool(again)) and config.boxes == "groundingdino"
    classes = detection_classes(config, root) if detect else []
    cluster = cache(partial(start_executor, runtime))  # started on first use: not when finished

    busy: dict[str, float] = {}
    counts = RetryCounts()
    timings["plan"] = 0.0
    t = time.perf_counter()
    if saved is None:
        rows, errors, busy = plan_pass(cluster(), records, config, runtime, classes)
        errors = read_errors + errors
        save_plan(
            out,
            rows,
            error_table(errors),
            {
                "config_hash": config.fingerprint(),
                "inputs_hash": digest,
            },
        )
        segments = [[r.key for r in rows]]
    elif again:
        announce_retries(len(again), "images")
        added, failed, busy = plan_pass(
            cluster(), [by_image[k] for k in again], config, runtime, classes
        )
        save_retry(out, PlanRetry(plan_table(added), failed, again))
        rows += added
        segments.append([r.key for r in added])
        errors = apply_retry(errors, again, failed)
        counts.add(again, [e["key"] for e in failed])
    timings["plan"] = time.perf_counter() - t
    shards, done = _shards_of(out, segments, config.rows_per_shard)
    pending = set(range(len(shards))) - done
    retries = shard_retries(out, shards, done, runtime.retry_errors)
    if retries:
        announce_retries(sum(len(keys) for keys in retries.values()), "rows")
    t = time.perf_counter()
    if pending or retries:
        busy.update(synth_pass(cluster(), rows, shards, pending, retries, config, runtime, counts))
    timings["synthesize"] = time.perf_counter() - t
    merged = merge_errors(out, errors, len(shards))
    written = count_written(out, len(shards))
    timings["total"] = time.perf_counter() - start

    rows_this_run = sum(len(shards[s]) for s in pending)
    rows_this_run += sum(len(keys) for keys in retries.values())
    stage_errors = Counter(merged["stage"].to_pylist())
    manifest = {
        "xmr_version": __version__,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "config": config.to_dict(),
        "config_hash": config.fingerprint(),
        "inputs_hash": digest,
        "data_root": str(root),
        "planned": len(rows) + len(errors),
        "written": written,
        "errors": merged.num_rows,
        "counts": {
            "images": len(records),
            "rows_planned": len(rows),
            "errors_by_stage": {s: stage_errors.get(s, 0) for s in STAGES},
            "rows_out_by_stage": {
                "read": len(records),
                "plan": len(rows),
                "fill": len(rows) - stage_errors.get("fill", 0),
                "caption": written,
            },
            "shards": len(shards),
            "shards_resumed": len(done),
            "rows_this_run": rows_this_run,
            **error_counts(merged, counts),
        },
        **run_figures(timings, busy, rows_this_run),
    }
    return write_manifest(out, manifest)


def announce_retries(count: int, units: str) -> None:
    """The log line of a rerun that asks again what failed transiently before."""
    print(
        f"retrying {count} {units} that failed transiently in an earlier run "
        "(--no-retry-errors keeps their errors)",
        flush=True,
    )


def error_counts(errors: pa.Table, counts: RetryCounts) -> dict[str, int]:
    """The manifest's error kinds and this run's retries: ``transient_errors`` (a rerun asks
    them again), ``retried`` and ``recovered``."""
    return {
        "transient_errors": errors["kind"].to_pylist().count("transient"),
        "retried": counts.retried,
        "recovered": counts.recovered,
    }


def synthesize_defaults(
    world: Path,
    out: StoragePath,
    *,
    seed: int = 0,
    address: str | None = None,
    progress: bool = True,
) -> SynthResult:
    """D′ of ``world``'s train split with every option at its default (box masks, Telea
    inpainting, noun-phrase removal), into ``out``; resumes or reuses a finished build there.

    What ``xmr demo`` and the ``synth_ratio`` sweep train on; not logged to MLflow.
    """
    from xmr.synth.config import load_configs

    config, runtime = load_configs(
        None,
        {"data": world, "out": out, "seed": seed, "progress": progress, "address": address,
         "log_mlflow": False},
    )  # fmt: skip
    return synthesize(config, runtime)
