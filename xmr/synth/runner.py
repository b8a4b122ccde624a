"""One resumable D′ build, whatever the method: read -> plan -> synthesize -> errors -> manifest.

A D′ method (:class:`SynthMethod`: the removal method, :mod:`xmr.synth.removal`; BiAug,
:mod:`xmr.synth.biaug`) says what a plan is and which stages make it and then the rows; this
module does the rest, the same for every method:

1. refuse an ``--out`` that holds anything but a D′ build (:func:`~xmr.synth.output.check_out_dir`);
   read the source records (:mod:`xmr.synth.inputs`);
2. plan, or reuse the plan an earlier run saved in ``--out`` when its fingerprints (the config
   hash and the inputs hash) are this build's, and apply its saved retries; a rerun plans again
   the units whose planning failed transiently (:mod:`xmr.synth.retry`);
3. cut the plan's rows into shards (each segment on its own), find those already committed, and
   synthesize the rows of the others, and the transient failures of committed ones, committing
   each shard as soon as its last row arrives (:class:`ShardAssembler`);
4. merge the errors, count what was written, and write the manifest with the timings.

The stages run on an :class:`~xmr.pipeline.Executor` that the command or job hands in, as a
function that makes it: it is made on first use, after every refusal that needs no cluster, and
never when the build is already finished (a Ray executor starts Ray).

Accounting: ``planned`` counts units of work, every planned row plus every unit that yields no
row (an unreadable image, a failed plan); each ends in exactly one of the shards or
``errors.parquet``: ``planned == written + errors``.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from xmr import __version__
from xmr.data import DataError
from xmr.data.records import ImageRecord
from xmr.data.synthetic import MANIFEST
from xmr.pipeline import Executor, Stage
from xmr.pipeline.stage import Batch
from xmr.progress import ProgressLines, stdout_is_terminal
from xmr.storage import StoragePath
from xmr.synth.config import SynthConfig, SynthRuntime
from xmr.synth.inputs import data_root, inputs_hash, read_inputs
from xmr.synth.output import (
    check_out_dir,
    commit_shard,
    count_written,
    finished_shards,
    merge_errors,
    read_shard,
    shard_errors,
    write_json_atomic,
)
from xmr.synth.retry import (
    PlanRetry,
    RetryCounts,
    plan_retry_keys,
    save_retry,
    saved_retries,
    segment_shards,
    shard_retries,
)


@dataclass(frozen=True)
class SynthResult:
    """What a build did. ``manifest`` is what ``manifest.json`` holds."""

    out: StoragePath
    manifest: dict

    @property
    def error_rate(self) -> float:
        return self.manifest["errors"] / max(self.manifest["planned"], 1)


class Plan(Protocol):
    """A method's plan: what its planning pass made of the source units, retries applied."""

    errors: list[dict]
    """ERROR_SCHEMA dicts of the units that yield no row (read errors first)."""

    def row_keys(self) -> list[list[str]]:
        """The keys of the rows to synthesize, per segment: the plan's, then each retry's."""
        ...

    def add_retry(self, retry: PlanRetry) -> None:
        """Apply a retry of the plan's transient errors: its units become a new segment, its
        errors replace those of the retried keys."""
        ...


@dataclass(frozen=True)
class SynthPass:
    """What a method's synthesis pass maps: input rows through stages (each with its number
    of workers) cut into ``blocks``; its progress lines are named ``desc``, counted in
    ``unit``."""

    inputs: list[dict]
    stages: list[tuple[Stage, int]]
    blocks: int
    desc: str
    unit: str


@dataclass(frozen=True)
class BuildFacts:
    """What a finished run counted, for the method's manifest entries."""

    out: StoragePath
    images: int
    """Source records read (without the unreadable ones)."""
    shards: int
    written: int
    stage_errors: Counter
    """Errors by stage, the plan's and the shards'."""


class SynthMethod(Protocol):
    """A D′ method, as the runner uses it. Made per build with its configs (it holds them); the
    runner calls, in order: :meth:`check`, :meth:`take_inputs`, :meth:`saved_plan`, and when a
    planning pass runs :meth:`prepare_planning` then :meth:`plan` (and :meth:`save_plan` or
    :meth:`retry_of`), :meth:`synthesis` and :meth:`output_rows` per batch, :meth:`finish`."""

    config: SynthConfig
    stages: tuple[str, ...]
    """The stages errors are counted by (``errors_by_stage``), ``read`` first."""
    row_schema: pa.Schema
    """The schema of the rows in the shards."""
    unit: str
    """What a planning unit is called in the log (``images``, ``source examples``)."""
    reason_schema: pa.Schema | None
    """The schema of a plan retry's reasons (what its steps dropped), None without."""

    def fingerprint(self) -> str:
        """The config hash of the build (the plan's ``config_hash``)."""
        ...

    def check(self, root: Path) -> None:
        """Refuse what can be refused before reading the records (one line naming the flag)."""
        ...

    def take_inputs(self, records: list[ImageRecord]) -> set[str]:
        """Keep ``records`` for planning; the keys of the planning units they make."""
        ...

    def saved_plan(self, out: StoragePath) -> tuple[Plan, dict[str, str]] | None:
        """The plan saved in ``out`` (no retry applied) and its metadata, or None."""
        ...

    def prepare_planning(self, root: Path) -> None:
        """Before a planning pass, before the executor starts (what it needs that can fail)."""
        ...

    def plan(self, executor: Executor, keys: Sequence[str] | None) -> tuple[Plan, dict]:
        """Plan the units ``keys`` (None: all of them): ``(plan, busy seconds per stage)``."""
        ...

    def save_plan(self, out: StoragePath, plan: Plan, identity: dict[str, str]) -> None:
        """Save a new plan in ``out``, with ``identity`` (its fingerprints) in its metadata."""
        ...

    def retry_of(self, plan: Plan, retried: list[str]) -> PlanRetry:
        """``plan`` (of the ``retried`` keys) as a retry of the saved plan."""
        ...

    def synthesis(self, executor: Executor, plan: Plan, keys: set[str]) -> SynthPass | None:
        """What makes the rows ``keys`` (None: nothing to do)."""
        ...

    def output_rows(
        self, batch: Batch, keys: set[str]
    ) -> Iterator[tuple[str, dict | None, dict | None]]:
        """The rows of a finished batch among ``keys``: ``(key, row, None)`` for a written row
        (:attr:`row_schema`), ``(key, None, error)`` for a failed one."""
        ...

    def finish(self, plan: Plan, facts: BuildFacts) -> dict[str, Any]:
        """Write the method's own summary files; return its manifest entries (``config`` among
        them; a ``counts`` mapping is added to the runner's counts)."""
        ...


def ray_executor(runtime: SynthRuntime) -> Callable[[], Executor]:
    """The executor of ``xmr synth`` and the jobs: Ray Data on ``runtime.address`` (or a local
    Ray), made when called (Ray is imported then)."""

    def start() -> Executor:
        from xmr.pipeline.ray_executor import RayExecutor

        return RayExecutor(runtime.address, runtime.num_cpus, progress=runtime.progress)

    return start


def build(
    method: SynthMethod, runtime: SynthRuntime, executor: Callable[[], Executor]
) -> SynthResult:
    """Build (or finish building) D′ with ``method`` into ``runtime.out``; see the module
    docstring. ``executor``: makes the executor, called at most once, when there is work."""
    start = time.perf_counter()
    out = runtime.out
    config = method.config
    check_out_dir(out)
    root = data_root(config, runtime.progress)
    method.check(root)
    records, read_errors = read_inputs(config, root)
    digest = inputs_hash(records, read_errors)
    fingerprint = method.fingerprint()
    timings = {"read": time.perf_counter() - start}

    # Every refusal that needs no cluster comes before the executor starts.
    units = method.take_inputs(records)
    saved = method.saved_plan(out)
    again: list[str] = []
    if saved is not None:
        plan, metadata = saved
        check_same_build(out, metadata, fingerprint, digest)
        for retry in saved_retries(out):
            plan.add_retry(retry)
        again = [k for k in plan_retry_keys(plan.errors, runtime.retry_errors) if k in units]
    if saved is None or again:
        method.prepare_planning(root)
    cluster = cache(executor)  # made on first use: not when the build is finished

    busy: dict[str, float] = {}
    counts = RetryCounts()
    t = time.perf_counter()
    if saved is None:
        plan, busy = method.plan(cluster(), None)
        plan.errors = read_errors + plan.errors
        method.save_plan(out, plan, {"config_hash": fingerprint, "inputs_hash": digest})
    elif again:
        announce_retries(len(again), method.unit)
        retried, busy = method.plan(cluster(), again)
        retry = method.retry_of(retried, again)
        save_retry(out, retry, method.reason_schema)
        plan.add_retry(retry)
        counts.add(again, [e["key"] for e in retry.errors])
    timings["plan"] = time.perf_counter() - t
    shards, done = shards_of(out, plan.row_keys(), config.rows_per_shard)
    pending = set(range(len(shards))) - done
    retries = shard_retries(out, shards, done, runtime.retry_errors)
    if retries:
        announce_retries(sum(len(keys) for keys in retries.values()), "rows")
    t = time.perf_counter()
    if pending or retries:
        busy.update(synth_pass(cluster(), method, plan, shards, pending, retries, runtime, counts))
    timings["synthesize"] = time.perf_counter() - t
    merged = merge_errors(out, plan.errors, len(shards))
    written = count_written(out, len(shards))
    timings["total"] = time.perf_counter() - start

    rows_this_run = sum(len(shards[s]) for s in pending)
    rows_this_run += sum(len(keys) for keys in retries.values())
    stage_errors = Counter(merged["stage"].to_pylist())
    facts = BuildFacts(out, len(records), len(shards), written, stage_errors)
    extras = method.finish(plan, facts)
    manifest = {
        "xmr_version": __version__,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "config_hash": fingerprint,
        "inputs_hash": digest,
        "data_root": str(root),
        "planned": len(plan.errors) + sum(len(keys) for keys in shards),
        "written": written,
        "errors": merged.num_rows,
        **{key: value for key, value in extras.items() if key != "counts"},
        "counts": {
            "errors_by_stage": {s: stage_errors.get(s, 0) for s in method.stages},
            "shards": len(shards),
            "shards_resumed": len(done),
            "rows_this_run": rows_this_run,
            **extras.get("counts", {}),
            **error_counts(merged, counts),
        },
        **run_figures(timings, busy, rows_this_run),
    }
    return write_manifest(out, manifest)


def synth_pass(
    executor: Executor,
    method: SynthMethod,
    plan: Plan,
    shards: list[list[str]],
    pending: set[int],
    retries: dict[int, list[str]],
    runtime: SynthRuntime,
    counts: RetryCounts,
) -> dict[str, float]:
    """Make the rows of the ``pending`` shards and the ``retries`` of committed ones, committing
    shards as they finish; the retries are added to ``counts``. Returns busy seconds per stage
    (``write``: this process's, committing)."""
    keys = {k for s in pending for k in shards[s]}
    keys.update(k for again in retries.values() for k in again)
    work = method.synthesis(executor, plan, keys)
    if work is None:
        return {}
    assembler = ShardAssembler(runtime.out, shards, pending, method.row_schema, retries)
    busy: Counter = Counter()
    lines = log_lines(len(work.inputs), work.desc, work.unit, runtime)
    for batch in executor.stream(work.inputs, work.stages, blocks=work.blocks):
        start = time.perf_counter()
        add_busy(busy, batch)
        if lines:
            lines.update(len(batch["key"]))
        for key, row, error in method.output_rows(batch, keys):
            assembler.add(key, row, error)
        busy["write"] += time.perf_counter() - start
    assembler.check_complete()
    counts.retried += sum(len(again) for again in retries.values())
    counts.recovered += assembler.recovered
    return dict(busy)


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
        schema: pa.Schema,
        retries: Mapping[int, Sequence[str]] | None = None,
    ) -> None:
        """``schema``: of the rows (the method's)."""
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


def shards_of(
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
