"""The BiAug method (``xmr synth --mode biaug``): propose -> verify -> decouple -> inpaint.

The planning pass maps :class:`~xmr.synth.biaug.stages.ProposeObjects`,
:class:`~xmr.synth.biaug.stages.VerifyObjects` and :class:`~xmr.synth.biaug.stages.
DecoupleAttributes` over the source examples (each image with its chosen caption); the plan is
the hard-negative groups. The synthesis pass maps :class:`~xmr.synth.biaug.stages.InpaintPairs`
over the groups, two rows each (positive, negative). The runner (:mod:`xmr.synth.runner`) does
the rest: resume, retries, shards, errors, manifest.

Accounting: a unit of work is a source example that yields no group (its reason in
``errors.parquet``), or one of the two rows of a group. Every unit ends in a shard or in
``errors.parquet``: ``planned == written + errors``. What a step dropped without failing its
example (a proposal the detector did not confirm or the filters removed, an invalid row of the
LLM's table) is in ``reasons.parquet`` with its cause.

``--llm vllm`` plans around two engine passes instead of asking from the LLM stages' actors
(see :func:`plan_pass`). ``--llm oracle`` answers from a scene ToyWorld's ground truth in the
LLM stages' actors (checked before Ray starts, :func:`check_oracle`; not cached: it reads no
model). ``--boxes gt`` confirms the proposals from each example's annotations instead of the
detector.

Resuming: the LLM's answers are cached (``--llm-cache``, default outside ``--out``:
:func:`default_llm_cache`), so a rerun, or a build into a new ``--out``, pays for no call twice;
a saved plan is reused, and only missing shards are redone. A rerun also asks again what failed
transiently (:mod:`xmr.synth.retry`). The manifest's ``llm.cache`` says where the answers are.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from xmr.biaug import ToyWorldOracle
from xmr.data.error_kinds import with_kind
from xmr.data.records import ImageRecord
from xmr.data.synthetic import BIAUG_ROW_SCHEMA, read_error_table, read_parquet
from xmr.llm import ChatRequest, LLMSpec, ResponseCache, cache_key
from xmr.llm.spec import ORACLE
from xmr.llm.vllm import BACKEND as VLLM
from xmr.llm.vllm_processor import build_vllm_processor
from xmr.pipeline import Executor, Resources, Stage
from xmr.pipeline.stage import Batch, batch_rows
from xmr.storage import STORAGE_ENV, StoragePath, cache_dir, default_output, is_uri
from xmr.synth.batch import ERROR_COLUMNS, row_seed
from xmr.synth.biaug.config import BiAugConfig
from xmr.synth.biaug.stages import (
    GROUP_COLUMNS,
    DecoupleAttributes,
    InpaintPairs,
    ProposeObjects,
    VerifyObjects,
    decouple_request,
    propose_request,
)
from xmr.synth.config import SynthConfig, SynthOptions, SynthRuntime, fingerprint
from xmr.synth.output import (
    LLM_CACHE,
    PLAN,
    PLAN_ERRORS,
    PLAN_REASONS,
    REASONS,
    error_record,
    error_table,
    shard_path,
    write_table_atomic,
)
from xmr.synth.placement import Placement, stage_device
from xmr.synth.retry import PlanRetry, apply_retry
from xmr.synth.runner import BuildFacts, SynthPass, add_busy, log_lines

STAGES = ("read", "propose", "verify", "decouple", "inpaint")
ROLES = ("positive", "negative")
GROUP_SCHEMA = pa.schema(
    [(name, pa.int64() if name in ("image_id", "caption_id", "width", "height", "seed")
      else pa.string()) for name in GROUP_COLUMNS]
)  # fmt: skip
REASON_SCHEMA = pa.schema(
    [
        ("key", pa.string()),  # the source example "<image_id>/<caption_id>"
        ("stage", pa.string()),  # verify | decouple
        ("rule", pa.string()),  # not_detected | area | confidence | overlap | invalid_row ...
        ("item", pa.string()),  # the proposal, or the rejected answer line
        ("message", pa.string()),
    ]
)
"""What a step left out without failing its source example, and why."""


def biaug_fingerprint(config: SynthConfig, biaug: BiAugConfig, llm: LLMSpec) -> str:
    """The config hash of a BiAug build: the configs' (:func:`~xmr.synth.config.fingerprint`),
    and which LLM answered."""
    data = {"config": fingerprint(config, biaug), "llm": llm.backend, "llm_model": llm.model}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def source_examples(records: list[ImageRecord], config: SynthConfig) -> list[dict]:
    """One input row per (image, chosen caption): ``captions_per_image`` captions drawn per
    image with a generator seeded by ``(seed, image id)`` (all of them when None). Each row
    carries the image's annotations as JSON ``[[category, [x, y, w, h]], ...]`` (what
    ``--boxes gt`` verifies proposals against)."""
    rows = []
    for record in records:
        annotations = json.dumps([[o.category, list(o.bbox)] for o in record.objects])
        captions = list(record.captions)
        count = config.captions_per_image
        if count is not None and len(captions) > count:
            rng = np.random.default_rng(row_seed(config.seed, f"{record.image_id}/captions"))
            captions = [captions[i] for i in sorted(rng.choice(len(captions), count, False))]
        for caption in captions:
            rows.append(
                {
                    "key": f"{record.image_id}/{caption.id}",
                    "image_id": record.image_id,
                    "caption_id": caption.id,
                    "caption": caption.text,
                    "path": str(record.path),
                    "width": record.width,
                    "height": record.height,
                    "annotations": annotations,
                    **{name: "" for name in ERROR_COLUMNS},
                }
            )
    return rows


def hard_negative_groups(batch: Batch, i: int, seed: int) -> list[dict]:
    """The hard-negative groups of source example ``i`` of a decoupled batch."""
    boxes = {v["name"]: v["bbox"] for v in json.loads(batch["verified"][i])}
    groups = []
    for row in json.loads(batch["attributes"][i]):
        group_id = f"{batch['key'][i]}/{row['object']}/{row['category']}"
        groups.append(
            {
                "key": group_id,
                "image_id": int(batch["image_id"][i]),
                "caption_id": int(batch["caption_id"][i]),
                "source_caption": str(batch["caption"][i]),
                "path": str(batch["path"][i]),
                "width": int(batch["width"][i]),
                "height": int(batch["height"][i]),
                "object": row["object"],
                "category": row["category"],
                "box": json.dumps(list(boxes[row["object"]])),
                "phrase": row["phrase"],
                "caption": row["caption"],
                "negative_phrase": row["negative_phrase"],
                "negative_caption": row["negative_caption"],
                "seed": row_seed(seed, group_id),
            }
        )
    return groups


def refused_groups(batch: Batch, i: int) -> list[dict]:
    """One error row per attribute row of source example ``i`` that validation refused, keyed
    by the hard-negative group it would have been (``validation:<rule>``, permanent)."""
    return [
        with_kind({"key": f"{batch['key'][i]}/{r['object']}/{r['category']}",
                   "stage": "decouple", "error_type": f"validation:{r['rule']}",
                   "message": r["message"]})
        for r in json.loads(batch["refused"][i])
    ]  # fmt: skip


def _reasons_of(batch: Batch, i: int) -> list[dict]:
    key = str(batch["key"][i])
    reasons = [
        {"key": key, "stage": "propose", "rule": f"validation:{r['rule']}", "item": r["name"],
         "message": r["reason"]}
        for r in json.loads(batch["refused_objects"][i])
    ]  # fmt: skip
    reasons += [
        {"key": key, "stage": "verify", "rule": d["rule"], "item": d["name"],
         "message": d["reason"]}
        for d in json.loads(batch["dropped"][i])
    ]  # fmt: skip
    reasons += [
        {"key": key, "stage": "decouple", "rule": "invalid_row", "item": r["raw"],
         "message": f"line {r['line']}: {r['reason']}"}
        for r in json.loads(batch["rejected"][i])
    ]  # fmt: skip
    return reasons


def plan_pass(
    executor: Executor,
    examples: list[dict],
    config: SynthConfig,
    biaug: BiAugConfig,
    runtime: SynthRuntime,
    llm: LLMSpec,
) -> tuple[list[dict], list[dict], list[dict], dict[str, int], dict[str, float], dict[str, dict]]:
    """Propose, verify and decouple every source example.

    Returns ``(groups, error rows, reasons, statistics, busy seconds per stage, the statistics
    of each failed example by key)``: a retry of a failed example replaces its counts.
    """
    if not examples:
        return [], [], [], {}, {}, {}
    busy: Counter = Counter()
    if llm.backend == "vllm":
        batches = _engine_plan(executor, examples, config, biaug, runtime, llm, busy)
    else:
        batches = _streamed_plan(executor, examples, config, biaug, runtime, llm)
    groups, errors, reasons = [], [], []
    stats: Counter = Counter()
    failed_stats: dict[str, dict] = {}
    lines = log_lines(len(examples), "plan", "examples", runtime)
    for batch in batches:
        add_busy(busy, batch)
        if lines:
            lines.update(len(batch["key"]))
        for i in range(len(batch["key"])):
            proposed = json.loads(batch["objects"][i])
            dropped = json.loads(batch["dropped"][i])
            counts = {
                "extracted_objects": len(proposed),
                "detected_objects": len(proposed) - sum(d["rule"] != "confidence" for d in dropped),
                "kept_objects": len(json.loads(batch["verified"][i])),
            }
            stats["source_examples"] += 1
            stats.update(counts)
            reasons += _reasons_of(batch, i)
            if batch["error"][i]:
                errors.append(error_record(batch, i))
                failed_stats[str(batch["key"][i])] = counts
            else:
                groups += hard_negative_groups(batch, i, config.seed)
                errors += refused_groups(batch, i)
    return groups, errors, reasons, dict(stats), dict(busy), failed_stats


def _streamed_plan(
    executor: Executor,
    examples: list[dict],
    config: SynthConfig,
    biaug: BiAugConfig,
    runtime: SynthRuntime,
    llm: LLMSpec,
) -> Iterator[Batch]:
    """The planning stages in one stream: the LLM stages ask their backend from their actors
    (``openai``, ``hf``) while the detector verifies the rows already proposed."""
    llm_gpu = llm.backend == "hf"  # a local model: both LLM stages on GPUs when there are some
    detect = config.boxes == "groundingdino"
    place = Placement.on(executor, int(detect) + 2 * int(llm_gpu), runtime.gpus_per_actor)
    llm_res = place.resources(True) if llm_gpu else Resources(cpus=0.25)
    llm_actors = place.actors(runtime.llm_actors, llm_gpu, 1)
    llm_batch = max(runtime.batch_size, llm.max_in_flight)
    vocabulary = biaug.object_names()
    propose = ProposeObjects(
        config, biaug, llm, llm_res, llm_batch, stage_device(llm_res), vocabulary=vocabulary
    )
    decouple = DecoupleAttributes(config, biaug, llm, llm_res, llm_batch, stage_device(llm_res))
    stages: list[tuple[Stage, int]] = [
        (propose, llm_actors),
        _verify_stage(place, config, biaug, runtime),
        (decouple, llm_actors),
    ]
    blocks = math.ceil(len(examples) / runtime.batch_size)
    return executor.stream(examples, stages, blocks=blocks)


def _verify_stage(
    place: Placement, config: SynthConfig, biaug: BiAugConfig, runtime: SynthRuntime
) -> tuple:
    """VerifyObjects and its actor count: on GPUs with the detector, one core with ``--boxes
    gt``."""
    detect = config.boxes == "groundingdino"
    resources = place.resources(detect)
    stage = VerifyObjects(config, biaug, resources, runtime.batch_size, stage_device(resources))
    return stage, place.actors(runtime.detect_actors, detect, 1)


def _engine_plan(
    executor: Executor,
    examples: list[dict],
    config: SynthConfig,
    biaug: BiAugConfig,
    runtime: SynthRuntime,
    llm: LLMSpec,
    busy: Counter,
) -> Iterator[Batch]:
    """The planning stages around two vLLM engine passes (``--llm vllm``): the engine answers
    every proposal question, the stream proposes and verifies, the engine answers every
    attribute question of the verified rows, the stream decouples. The LLM stages read the
    answers back from the cache (the GPUs are the engine's while it runs)."""
    detect = int(config.boxes == "groundingdino")
    place = Placement.on(executor, detect, runtime.gpus_per_actor)
    blocks = math.ceil(len(examples) / runtime.batch_size)
    light = Resources(cpus=0.25)
    questions = [propose_request(config, biaug, str(row["caption"])) for row in examples]
    failures = _engine_pass(executor, questions, llm, runtime, busy)
    propose = ProposeObjects(
        config, biaug, llm, light, runtime.batch_size, "cpu", failures, biaug.object_names()
    )
    proposed = [
        row
        for batch in executor.stream(
            examples, [(propose, 1), _verify_stage(place, config, biaug, runtime)], blocks=blocks
        )
        for row in batch_rows(batch)
    ]
    questions = [
        decouple_request(config, biaug, str(row["caption"]), str(row["verified"]))
        for row in proposed
        if not row["error"]
    ]
    failures = _engine_pass(executor, questions, llm, runtime, busy)
    decouple = DecoupleAttributes(config, biaug, llm, light, runtime.batch_size, "cpu", failures)
    yield from executor.stream(proposed, [(decouple, 1)], blocks=blocks)


def _engine_pass(
    executor: Executor,
    questions: list[ChatRequest],
    llm: LLMSpec,
    runtime: SynthRuntime,
    busy: Counter,
) -> dict[str, str]:
    """Ask the vLLM engine every question the cache cannot answer, storing each answer as it
    arrives (a killed job asks again only what was unanswered). Returns the engine's failures
    by cache key; its time goes to ``busy["llm_engine"]``."""
    assert llm.model is not None and llm.cache_dir is not None  # checked before Ray
    start = time.perf_counter()
    cache = ResponseCache(llm.cache_dir)
    todo: dict[str, ChatRequest] = {}
    for question in questions:
        key = cache_key(VLLM, llm.model, question)
        if key not in todo and cache.get(key) is None:
            todo[key] = question
    failures: dict[str, str] = {}
    if todo:
        processor = build_vllm_processor(
            llm.model,
            keep_columns=["key"],
            batch_size=llm.batch_size,
            concurrency=runtime.llm_actors or 1,
            engine_kwargs=llm.engine_kwargs_dict(),
            runtime_env=llm.runtime_env_dict(),
        )
        rows = [{"key": key, "request": question.to_json()} for key, question in todo.items()]
        blocks = math.ceil(len(rows) / llm.batch_size)
        for batch in executor.transform(rows, processor, blocks=blocks):
            for key, status, response, error in zip(
                batch["key"], batch["status"], batch["response"], batch["error"], strict=True
            ):
                if status == "ok":
                    cache.put(str(key), str(response))
                else:
                    failures[str(key)] = str(error)
    busy["llm_engine"] += time.perf_counter() - start
    return failures


def _row(group: dict, role: str, image: bytes, fill: str) -> dict:
    positive = role == "positive"
    return {
        "key": f"{group['key']}/{role}",
        "image": image,
        "caption": group["caption"] if positive else group["negative_caption"],
        "source_image_id": group["image_id"],
        "source_caption_id": group["caption_id"],
        "source_caption": group["source_caption"],
        "object": group["object"],
        "category": group["category"],
        "phrase": group["phrase"] if positive else group["negative_phrase"],
        "group_id": group["key"],
        "role": role,
        "box": json.loads(group["box"]),
        "width": group["width"],
        "height": group["height"],
        "fill": fill,
    }


@dataclass
class BiAugPlan:
    """The planning pass's results: hard-negative groups, error rows, reasons, statistics, and
    the group keys of each segment (the plan's, then each retry's)."""

    groups: list[dict]
    errors: list[dict]
    reasons: list[dict]
    stats: Counter
    segments: list[list[str]]
    failed_stats: dict[str, dict]
    """The statistics of each failed example, by key (what a retry of it replaces)."""

    def add_retry(self, retry: PlanRetry) -> None:
        """Apply a retry of the plan's transient errors: its groups become a new segment; the
        retried examples' reasons and object counts are replaced by the retry's (the examples
        are not counted again)."""
        asked = set(retry.retried)
        added = retry.units.to_pylist()
        self.groups += added
        self.segments.append([g["key"] for g in added])
        self.errors = apply_retry(self.errors, retry.retried, retry.errors)
        self.reasons = [r for r in self.reasons if r["key"] not in asked] + retry.reasons
        for key in asked:
            self.stats.subtract(self.failed_stats.pop(key, {}))
        stats = json.loads(retry.metadata.get("statistics", "{}"))
        stats.pop("source_examples", None)
        self.stats.update(stats)
        self.failed_stats.update(json.loads(retry.metadata.get("failed_statistics", "{}")))

    def row_keys(self) -> list[list[str]]:
        """The row keys of each segment (two rows per group)."""
        return [[f"{key}/{role}" for key in segment for role in ROLES] for segment in self.segments]

    def statistics(self) -> dict[str, str]:
        """The plan file's metadata beside its fingerprints: the statistics, and those of each
        failed example."""
        return {
            "statistics": json.dumps(dict(self.stats)),
            "failed_statistics": json.dumps(self.failed_stats),
        }


class BiAugMethod:
    """The BiAug method as a :class:`~xmr.synth.runner.SynthMethod`: ``llm`` answers its
    questions (its cache, when not given, is :func:`default_llm_cache` of ``runtime.out``)."""

    stages = STAGES
    row_schema = BIAUG_ROW_SCHEMA
    unit = "source examples"
    reason_schema = REASON_SCHEMA

    def __init__(self, options: SynthOptions, runtime: SynthRuntime, llm: LLMSpec) -> None:
        self.options = options  # recorded whole in the manifest
        self.config = options.shared
        self.biaug = options.methods["biaug"]
        self.runtime = runtime
        self.llm = llm
        self.root = Path()
        self.examples: list[dict] = []

    def fingerprint(self) -> str:
        return biaug_fingerprint(self.config, self.biaug, self.llm)

    def check(self, root: Path) -> None:
        """The LLM's cache, ``--llm oracle``'s world, ``--object-vocabulary``'s file."""
        if self.llm.cache_dir is None:
            self.llm = replace(self.llm, cache_dir=default_llm_cache(self.runtime.out))
        self.root = root
        check_oracle(self.config, self.llm, root)
        self.biaug.object_names()  # an unreadable --object-vocabulary: one line, before Ray

    def take_inputs(self, records: list[ImageRecord]) -> set[str]:
        self.examples = source_examples(records, self.config)
        return {row["key"] for row in self.examples}

    def saved_plan(self, out: StoragePath) -> tuple[BiAugPlan, dict[str, str]] | None:
        if not (out / PLAN).is_file():
            return None
        table = read_parquet(out / PLAN)
        metadata = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
        groups = table.to_pylist()
        plan = BiAugPlan(
            groups=groups,
            errors=read_error_table(out / PLAN_ERRORS).to_pylist(),
            reasons=read_parquet(_plan_reasons(out)).to_pylist(),
            stats=Counter(json.loads(metadata["statistics"])),
            segments=[[g["key"] for g in groups]],
            failed_stats=json.loads(metadata.get("failed_statistics", "{}")),
        )
        return plan, metadata

    def prepare_planning(self, root: Path) -> None:
        """The LLM can answer (``--llm vllm`` without vLLM: what to do instead)."""
        self.llm.check_ready()

    def plan(self, executor: Executor, keys: Sequence[str] | None) -> tuple[BiAugPlan, dict]:
        examples = self.examples
        if keys is not None:
            asked = set(keys)
            examples = [row for row in examples if row["key"] in asked]
        groups, errors, reasons, stats, busy, failed = plan_pass(
            executor, examples, self.config, self.biaug, self.runtime, self.llm
        )
        segments = [[g["key"] for g in groups]]
        return BiAugPlan(groups, errors, reasons, Counter(stats), segments, failed), busy

    def save_plan(self, out: StoragePath, plan: BiAugPlan, identity: dict[str, str]) -> None:
        write_table_atomic(error_table(plan.errors), out / PLAN_ERRORS)
        write_table_atomic(_reason_table(plan.reasons), out / PLAN_REASONS)
        metadata = {**identity, **plan.statistics()}
        write_table_atomic(_group_table(plan.groups), out / PLAN, metadata)

    def retry_of(self, plan: BiAugPlan, retried: list[str]) -> PlanRetry:
        return PlanRetry(
            units=_group_table(plan.groups),
            errors=plan.errors,
            retried=retried,
            reasons=plan.reasons,
            metadata=plan.statistics(),
        )

    def synthesis(self, executor: Executor, plan: BiAugPlan, keys: set[str]) -> SynthPass | None:
        """Inpaint the groups with a row among ``keys``."""
        todo = [
            g
            for g in plan.groups
            if f"{g['key']}/positive" in keys or f"{g['key']}/negative" in keys
        ]
        if not todo:
            return None
        config, runtime = self.config, self.runtime
        on_gpu = config.fill == "sd"
        place = Placement.on(executor, int(on_gpu), runtime.gpus_per_actor)
        resources = place.resources(on_gpu)
        actors = place.actors(runtime.fill_actors, on_gpu, 1)
        batch_size = runtime.batch_size if not resources.gpus else min(runtime.batch_size, 4)
        stage = InpaintPairs(config, resources, batch_size, stage_device(resources), str(self.root))
        blank = {name: "" for name in ERROR_COLUMNS}
        inputs = [{**g, **blank} for g in todo]
        blocks = math.ceil(len(todo) / batch_size)
        return SynthPass(inputs, [(stage, actors)], blocks, "inpaint", "groups")

    def output_rows(
        self, batch: Batch, keys: set[str]
    ) -> Iterator[tuple[str, dict | None, dict | None]]:
        for i, group in enumerate(batch_rows(batch)):
            for role, column in zip(ROLES, ("positive_image", "negative_image"), strict=True):
                key = f"{group['key']}/{role}"
                if key not in keys:
                    continue
                if batch["error"][i]:
                    yield key, None, {**error_record(batch, i), "key": key}
                else:
                    yield key, _row(group, role, group[column], self.config.fill), None

    def finish(self, plan: BiAugPlan, facts: BuildFacts) -> dict[str, Any]:
        """Writes ``reasons.parquet`` (the plan's, retries applied)."""
        write_table_atomic(_reason_table(plan.reasons), facts.out / REASONS)
        return {
            "mode": "biaug",
            "config": self.options.to_dict(),
            "llm": _llm_fields(self.llm),
            # The paper's table 1 (detected: confirmed by the detector and the default filters;
            # kept: also past --filter-confidence when it is on).
            "statistics": {
                **dict(plan.stats),
                "augmented_examples": facts.written,
                "hard_negative_pairs": _written_pairs(facts.out, facts.shards),
                "filter_confidence": self.biaug.filter_confidence,
            },
            "counts": {"reasons": len(plan.reasons), "groups_planned": len(plan.groups)},
        }


def _plan_reasons(out: StoragePath) -> StoragePath:
    """The plan's own reasons (a build from before plan retries kept them in reasons.parquet)."""
    own = out / PLAN_REASONS
    return own if own.is_file() else out / REASONS


def default_llm_cache(out: StoragePath) -> StoragePath:
    """Where a build keeps the LLM's answers when ``--llm-cache`` is not given: outside ``out``,
    so that a build into a new ``--out`` asks nothing an earlier one was answered (entries are
    keyed by backend, model and request, so builds share them safely).

    In order: ``<out>/llm_cache`` when it exists (a build from before this default);
    ``$XMR_STORAGE/llm_cache`` when ``XMR_STORAGE`` is set (every node of a cluster reaches
    it); ``<out's parent>/llm_cache`` for an object-store ``out``; else ``llm/`` in xmr's cache
    folder (``$XMR_CACHE_DIR``, else ``$XDG_CACHE_HOME/xmr``, else ``~/.cache/xmr``).
    """
    inside = out / LLM_CACHE
    if inside.is_dir():
        return inside.resolve()
    if os.environ.get(STORAGE_ENV):
        return default_output(LLM_CACHE)
    if is_uri(out):
        return out.parent / LLM_CACHE
    return (cache_dir() / "llm").resolve()


def check_oracle(config: SynthConfig, llm: LLMSpec, root: Path) -> None:
    """``--llm oracle`` answers from a scene ToyWorld's ground truth: refuse it (one line naming
    the flag) on another dataset or a folder that is not a scene ToyWorld. Nothing to check for
    other backends."""
    if llm.backend != ORACLE:
        return
    if config.dataset != "toyworld":
        raise ValueError(
            f"--llm oracle answers from ToyWorld's ground truth: it needs --dataset toyworld, "
            f"not {config.dataset}"
        )
    try:
        ToyWorldOracle(root)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--llm oracle needs a scene ToyWorld as --data: {exc}") from None


def _reason_table(reasons: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(reasons, schema=REASON_SCHEMA)


def _group_table(groups: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(groups, schema=GROUP_SCHEMA)


def _llm_fields(llm: LLMSpec) -> dict:
    """The manifest's ``llm``: backend, model and where its answers are cached (``--llm
    oracle`` asks no model: nothing cached)."""
    fields = {"backend": llm.backend, "model": llm.model}
    if llm.backend != ORACLE:
        fields["cache"] = str(llm.cache_dir)
    return fields


def _written_pairs(out: StoragePath, shard_count: int) -> int:
    """Groups with both rows written: the hard-negative pairs."""
    rows: Counter = Counter()
    for index in range(shard_count):
        rows.update(
            read_parquet(shard_path(out, index), columns=["group_id"])["group_id"].to_pylist()
        )
    return sum(count == 2 for count in rows.values())
