"""Benchmark: MedR's per-query ranks, chunked (``xmr.retrieval.positive_ranks``) against a
complete ranking of the dense scores (``xmr.metrics.first_positive_ranks`` of ``q @ g.T``).

Inputs: random unit-norm float32 embeddings, one positive per query (a caption's image, as
text→image retrieval has it) and ``--positives`` per query for the other way. Each variant runs
in its own subprocess so that peaks do not mix: peak memory is the Linux high-water mark of
resident memory (``VmHWM``), reset once the inputs exist, so "above inputs" is what the variant
allocates. Both score with the same float32 kernel, and their ranks are asserted equal.

Run from the repository root with ``xmr`` importable (``pip install -e .`` or ``PYTHONPATH=.``);
Linux only.

    python bench/bench_medr_ranks.py              # 25,000 queries x 5,000 gallery x 512-d
    python bench/bench_medr_ranks.py --quick      # 2,000 x 1,000 x 64 smoke run
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from process_stats import cpu_seconds, status_kib  # bench/process_stats.py

VARIANTS = ("chunked", "complete")


def inputs(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
    """Queries ``[Q, D]``, gallery ``[G, D]`` and each query's ``--positives`` gallery indices."""
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((args.queries, args.dim), dtype=np.float32)
    gallery = rng.standard_normal((args.gallery, args.dim), dtype=np.float32)
    for x in (queries, gallery):
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    picks = rng.integers(0, args.gallery, (args.queries, args.positives))
    return queries, gallery, [sorted(set(row)) for row in picks.tolist()]


def run_variant(args: argparse.Namespace) -> dict[str, float]:
    """One variant in this process: its wall and CPU seconds, peak memory above the inputs
    (GiB), and a digest of its ranks."""
    import torch

    from xmr.metrics import first_positive_ranks
    from xmr.retrieval import positive_ranks
    from xmr.retrieval.topk import _matmul

    torch.set_num_threads(args.threads)
    queries, gallery, positives = inputs(args)
    Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark
    base = status_kib("VmRSS")
    cpu, start = cpu_seconds(), time.perf_counter()
    if args.variant == "chunked":
        ranks = positive_ranks(queries, gallery, positives)
    else:
        # the same float32 products as the chunked kernel's (xmr.retrieval.topk), all at once
        scores = _matmul(torch.from_numpy(queries), torch.from_numpy(gallery))
        ranks = first_positive_ranks(scores, positives)
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "peak_above_inputs_gib": (status_kib("VmHWM") - base) / 2**20,
        "median_rank": float(np.median(ranks)),
        "ranks_sum": int(ranks.sum()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=25_000)
    parser.add_argument("--gallery", type=int, default=5_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--positives", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="2,000 x 1,000 x 64")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.queries, args.gallery, args.dim = 2_000, 1_000, 64
    if args.variant:
        print(json.dumps(run_variant(args)))
        return
    flags = [f"--queries={args.queries}", f"--gallery={args.gallery}", f"--dim={args.dim}",
             f"--positives={args.positives}", f"--threads={args.threads}"]  # fmt: skip
    results = {}
    for variant in VARIANTS:
        out = subprocess.run([sys.executable, __file__, *flags, f"--variant={variant}"],
                             check=True, capture_output=True, text=True)  # fmt: skip
        results[variant] = json.loads(out.stdout.strip().splitlines()[-1])
    if results["chunked"]["ranks_sum"] != results["complete"]["ranks_sum"]:
        raise AssertionError(f"the two variants' ranks differ: {results}")
    print(f"{args.queries} queries x {args.gallery} gallery x {args.dim}-d, "
          f"{args.positives} positive(s) a query, {args.threads} threads")  # fmt: skip
    print("| variant | wall s | CPU s | peak above inputs GiB | MedR |")
    print("|---|---:|---:|---:|---:|")
    for variant, r in results.items():
        print(f"| {variant} | {r['seconds']:.2f} | {r['cpu_seconds']:.2f} | "
              f"{r['peak_above_inputs_gib']:.3f} | {r['median_rank']:.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
