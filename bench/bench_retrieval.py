"""Benchmark: chunked ``topk_similarity`` versus a dense ``q @ g.T`` (time and peak memory).

Each variant runs in its own subprocess, so peaks do not mix. Peak memory is the Linux
high-water mark of resident memory (``VmHWM``), reset once the random unit-norm float32
embeddings exist, so "peak above inputs" is what the variant itself allocates. Run from the
repository root with ``xmr`` importable (``pip install -e .`` or ``PYTHONPATH=.``); Linux only.

    python bench/bench_retrieval.py            # 5000 queries x 600,000 gallery x 512-d, k=10
    python bench/bench_retrieval.py --quick    # 500 x 20,000 x 512 smoke run
    python bench/bench_retrieval.py --sweep    # chunk-size grid on 5000 x 65,536 x 512
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from process_stats import cpu_seconds, status_kib  # bench/process_stats.py

SWEEP_QUERY_CHUNKS = (256, 1024, 4096)
SWEEP_GALLERY_CHUNKS = (4096, 16384, 65536)


def embeddings(n: int, dim: int, seed: int) -> np.ndarray:
    """Random unit-norm float32 rows [n, dim], made in place (no float64 temporaries)."""
    x = np.random.default_rng(seed).standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def _reset_peak() -> int:
    """Reset the resident high-water mark (Linux ``clear_refs`` 5); returns the RSS in KiB."""
    Path("/proc/self/clear_refs").write_text("5")
    return status_kib("VmRSS")


def _peaks(base: int, prefix: str = "") -> dict[str, float]:
    """The resident high-water mark in GiB, above ``base`` (KiB) and in all."""
    peak = status_kib("VmHWM")
    return {
        f"{prefix}peak_above_inputs_gib": (peak - base) / 2**20,
        f"{prefix}peak_rss_gib": peak / 2**20,
    }


def worker(args: argparse.Namespace) -> dict[str, float]:
    """Run one variant in this process; returns seconds and memory in GiB."""
    import torch

    from xmr.metrics import rank
    from xmr.retrieval import topk_similarity

    queries = embeddings(args.queries, args.dim, seed=0)
    gallery = embeddings(args.gallery, args.dim, seed=1)
    base = _reset_peak()
    result: dict[str, float] = {}
    cpu = cpu_seconds()
    start = time.perf_counter()
    if args.worker == "chunked":
        topk_similarity(
            queries,
            gallery,
            args.k,
            query_chunk=args.query_chunk,
            gallery_chunk=args.gallery_chunk,
        )
        result["seconds"] = time.perf_counter() - start
        result["cpu_seconds"] = cpu_seconds() - cpu
    else:  # dense: one [Q, G] matmul, then the exact dense rank of it
        with torch.inference_mode():
            scores = torch.from_numpy(queries) @ torch.from_numpy(gallery).T
        result["seconds"] = time.perf_counter() - start
        result["cpu_seconds"] = cpu_seconds() - cpu
        result.update(_peaks(base, "matmul_"))
        cpu = cpu_seconds()
        start = time.perf_counter()
        rank(scores, args.k)
        result["rank_seconds"] = time.perf_counter() - start
        result["rank_cpu_seconds"] = cpu_seconds() - cpu
    result.update(_peaks(base))
    return result


def run_variant(args: argparse.Namespace, variant: str, **chunks: int) -> dict[str, float]:
    """Run ``variant`` ``args.repeat`` times, each in a fresh Python process: the fastest run."""
    command = [sys.executable, __file__, "--worker", variant]
    for name in ("queries", "gallery", "dim", "k"):
        command += [f"--{name}", str(getattr(args, name))]
    for name, value in chunks.items():
        command += [f"--{name.replace('_', '-')}", str(value)]
    runs = []
    for _ in range(args.repeat):
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        runs.append(json.loads(done.stdout.splitlines()[-1]))
    return min(runs, key=lambda r: r["seconds"])


def machine() -> str:
    """CPU model, core count, RAM and torch version of this machine."""
    import torch

    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next(
        line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if "model name" in line
    )
    mem_kib = int(Path("/proc/meminfo").read_text().split()[1])  # MemTotal
    return (
        f"{model}, {os.cpu_count()} cores, {mem_kib / 2**20:.1f} GiB RAM, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads), no GPU used"
    )


def main() -> None:
    from xmr.retrieval import topk_similarity

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="500 x 20,000 smoke run")
    parser.add_argument("--sweep", action="store_true", help="time a grid of chunk sizes")
    parser.add_argument("--queries", type=int, default=5000)
    parser.add_argument("--gallery", type=int, default=600_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--k", type=int, default=10)
    defaults = topk_similarity.__kwdefaults__
    parser.add_argument("--query-chunk", type=int, default=defaults["query_chunk"])
    parser.add_argument("--gallery-chunk", type=int, default=defaults["gallery_chunk"])
    parser.add_argument("--repeat", type=int, default=1, help="runs per variant; the fastest")
    parser.add_argument("--skip-dense", action="store_true", help="only the chunked variant")
    parser.add_argument("--worker", choices=("chunked", "dense"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    if args.quick:
        args.queries, args.gallery = 500, 20_000
    if args.sweep:
        args.gallery = 65_536
    size = f"{args.queries} x {args.gallery:,} x {args.dim}-d float32, k={args.k}"
    print(f"{size}; {machine()}; load average {os.getloadavg()[0]:.2f}\n")
    header = "| wall time (s) | CPU time (s) | peak above inputs (GiB) | peak RSS (GiB) |"
    if args.sweep:
        print("| query_chunk | gallery_chunk " + header)
        print("|---:|---:|---:|---:|---:|---:|")
        for qc in SWEEP_QUERY_CHUNKS:
            for gc in SWEEP_GALLERY_CHUNKS:
                r = run_variant(args, "chunked", query_chunk=qc, gallery_chunk=gc)
                print(f"| {qc} | {gc} " + _row(r["seconds"], r["cpu_seconds"], r))
    else:
        print("| variant " + header)
        print("|---|---:|---:|---:|---:|")
        chunks = {"query_chunk": args.query_chunk, "gallery_chunk": args.gallery_chunk}
        r = run_variant(args, "chunked", **chunks)
        label = "`topk_similarity` ({})".format(", ".join(f"{n}={v}" for n, v in chunks.items()))
        print(f"| {label} " + _row(r["seconds"], r["cpu_seconds"], r))
        if not args.skip_dense:
            r = run_variant(args, "dense")
            print("| dense `q @ g.T` " + _row(r["seconds"], r["cpu_seconds"], r, "matmul_"))
            total = r["seconds"] + r["rank_seconds"], r["cpu_seconds"] + r["rank_cpu_seconds"]
            print("| dense `q @ g.T` + `rank` " + _row(*total, r))
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


def _row(seconds: float, cpu_seconds: float, memory: dict[str, float], prefix: str = "") -> str:
    """The timing and memory cells of one markdown table row (``prefix``: which peaks)."""
    return (
        f"| {seconds:.1f} | {cpu_seconds:.1f} | {memory[f'{prefix}peak_above_inputs_gib']:.2f} "
        f"| {memory[f'{prefix}peak_rss_gib']:.2f} |"
    )


if __name__ == "__main__":
    main()
