"""Benchmark: D′ build throughput, Ray Data pipeline vs a plain single-process loop.

Both do the same work on the same inputs: plan removals (with caption mentions), load each source
image, fill the removed boxes, encode PNG, rewrite the caption by noun-phrase removal and commit
Parquet shards. The loop calls the very same stage classes one batch at a time in this process;
the pipeline is ``xmr.synth.methods.synthesize`` on a local Ray (started once, outside the timings;
its cold start is reported separately). Every measured run starts with cold caption caches: the
loop clears its tagger cache, and each pipeline run gets a fresh Ray whose workers are warmed up
(imports, tagger) on the val split. Reports rows/s of each, the ratio, a table over worker
counts, and a profile of the loop (where the time goes).

Run from the repository root with ``xmr`` importable and ``NLTK_DATA`` set if the tagger cannot be
downloaded:

    python bench/bench_synth_throughput.py                       # ToyWorld (2,000 train images)
    python bench/bench_synth_throughput.py --coco ../shared/data/coco-mini   # + real COCO sizes
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import ray

from xmr.data import dataset_splits
from xmr.pipeline import Resources
from xmr.pipeline.stage import rows_to_batch
from xmr.synth.config import SynthOptions, SynthRuntime
from xmr.synth.inputs import read_inputs
from xmr.synth.methods import synthesize
from xmr.synth.output import commit_shard, error_record, split_shards
from xmr.synth.removal.plan import pair_record
from xmr.synth.removal.stages import FillImages, PlanRows, WriteCaptions, plan_inputs
from xmr.synth.runner import ray_executor
from xmr.text.noun_phrases import _cached_spans
from xmr.toyworld.default_world import default_toyworld


def loop_build(options: SynthOptions, root: Path, out: Path, batch_size: int) -> tuple[int, float]:
    """The same stages, one batch after another in this process. Returns (rows, seconds)."""
    _cached_spans.cache_clear()
    start = time.perf_counter()
    config, removal = options.shared, options.methods["removal"]
    records, _ = read_inputs(config, root)
    plan = PlanRows(config, removal, Resources(1.0), batch_size)
    fill = FillImages(config, Resources(1.0), batch_size)
    caption = WriteCaptions(config, removal, Resources(1.0), batch_size)
    inputs = plan_inputs(records)
    planned: list[dict] = []
    for i in range(0, len(inputs), batch_size):
        result = plan.run_local(rows_to_batch(inputs[i : i + batch_size]))
        planned += [
            {k: result[k][j] for k in result if not k.startswith("seconds_")}
            for j in range(len(result["key"]))
            if not result["error"][j]
        ]
    by_key = {r["key"]: r for r in planned}
    for index, keys in enumerate(split_shards(list(by_key), config.rows_per_shard)):
        done = caption.run_local(fill.run_local(rows_to_batch([by_key[k] for k in keys])))
        failed = [j for j in range(len(done["key"])) if done["error"][j]]
        ok = [j for j in range(len(done["key"])) if not done["error"][j]]
        rows = [pair_record(done, j, config.fill, removal.caption) for j in ok]
        commit_shard(out, index, rows, [error_record(done, j) for j in failed])
    return len(planned), time.perf_counter() - start


def pipeline_build(options: SynthOptions, out: Path, fill_actors: int) -> dict:
    runtime = SynthRuntime(out=out, fill_actors=fill_actors, caption_actors=fill_actors,
                           progress=False, log_mlflow=False)  # fmt: skip
    return synthesize(options, runtime, executor=ray_executor(runtime)).manifest


def fresh_ray(options: SynthOptions) -> None:
    """Restart Ray and warm its workers up (imports, tagger) on the val split, or on 5 images
    when there is none."""
    ray.shutdown()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    config = options.shared
    has_val = "val" in dataset_splits(config.dataset, config.data)
    warm = replace(config, split="val", limit=50) if has_val else replace(config, limit=5)
    warm = replace(options, shared=warm)
    with tempfile.TemporaryDirectory() as tmp:
        pipeline_build(warm, Path(tmp) / "warm", os.cpu_count() or 1)


def profile_loop(options: SynthOptions, root: Path, batch_size: int, top: int = 12) -> str:
    profiler = cProfile.Profile()
    _cached_spans.cache_clear()
    with tempfile.TemporaryDirectory() as tmp:
        profiler.enable()
        loop_build(options, root, Path(tmp), batch_size)
        profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def bench(name: str, options: SynthOptions, root: Path, batch_size: int, actors: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows, loop_s = loop_build(options, root, Path(tmp) / "loop", batch_size)
    fill, caption = options.shared.fill, options.methods["removal"].caption
    print(f"\n## {name}: {rows} rows, fill={fill}, caption={caption}\n")
    print("| run | plan s | synth s | total s | rows/s (total) | vs loop |")
    print("|---|---|---|---|---|---|")
    print(f"| plain loop, 1 process | | | {loop_s:.1f} | {rows / loop_s:.1f} | 1.00 |")
    for n in actors:
        fresh_ray(options)
        with tempfile.TemporaryDirectory() as tmp:
            m = pipeline_build(options, Path(tmp) / "out", n)
        t = m["timings_s"]
        total = t["total"]
        print(f"| Ray Data, {n} worker(s) | {t['plan']:.1f} | "
              f"{t['synthesize']:.1f} | {total:.1f} | {rows / total:.1f} | "
              f"{loop_s / total:.2f} |")  # fmt: skip
        print(f"|   busy s: {json.dumps(m['busy_s'])} | | | | | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=2000, help="ToyWorld train images")
    parser.add_argument("--coco", type=Path, help="a COCO-layout folder (e.g. coco-mini)")
    parser.add_argument("--fill", default="telea")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--actors", default="1,2", help="fill actor counts to try")
    parser.add_argument("--profile", action="store_true", help="print the loop's profile")
    args = parser.parse_args()
    actors = [int(a) for a in args.actors.split(",")]

    t = time.perf_counter()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    print(f"Ray cold start: {time.perf_counter() - t:.1f} s on {os.cpu_count()} CPUs")
    world = default_toyworld(0, progress=False)
    toy = SynthOptions.of(data=world, limit=args.limit, fill=args.fill)
    bench(f"ToyWorld train, {args.limit} images at 128 px", toy, world, args.batch_size, actors)
    if args.profile:
        print(profile_loop(toy, world, args.batch_size))
    if args.coco:
        coco = SynthOptions.of(dataset="coco", data=args.coco, fill=args.fill)
        bench("COCO (real images, ~640x480)", coco, args.coco, args.batch_size, actors)
        if args.profile:
            print(profile_loop(coco, args.coco, args.batch_size))


if __name__ == "__main__":
    main()
