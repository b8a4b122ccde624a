"""Benchmark: chunked ``topk_similarity`` against FAISS's exact flat search and a dense ``q @ g.T``.

Inputs: random unit-norm float32 embeddings; a ``--duplicates`` share of the gallery rows are
copies of other gallery rows (duplicate captions), so exact ties occur in the top-k.

1. Side by side, in one process on the same inputs (time only; ``--repeat`` interleaved rounds,
   the fastest of each): ``faiss.IndexFlatIP(D).search`` (the anchor; building the index, a copy
   of the gallery, is not timed), ``topk_similarity``, and ``topk_similarity`` with oneDNN off
   (``torch.backends.mkldnn.flags(enabled=False)``: the product is ``torch.mm``, MKL on x86), all
   with the same thread count. Then exactness is asserted: for ``--check-queries`` queries the
   top-k equals ``rank(S, k)`` of the dense products ``S`` made by the same kernel (ties by
   index included), and for every query the top-k set equals FAISS's except for items that tie
   with the k-th score (FAISS keeps arbitrary copies) or lie within float32 rounding (1e-5) of it
   (FAISS's BLAS rounds differently).
2. Each variant in its own subprocess, so peaks do not mix: peak memory is the Linux high-water
   mark of resident memory (``VmHWM``), reset once the embeddings exist, so "peak above inputs"
   is what the variant itself allocates.

Run from the repository root with ``xmr`` and ``faiss-cpu`` importable (``pip install -e .
faiss-cpu``, or ``PYTHONPATH=.``); Linux only.

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
import warnings
from pathlib import Path

import numpy as np
from process_stats import cpu_seconds, status_kib  # bench/process_stats.py

SWEEP_QUERY_CHUNKS = (256, 1024, 4096)
SWEEP_GALLERY_CHUNKS = (1024, 4096, 16384)
ROUNDING = 1e-5  # score differences within this are float32 rounding between kernels


def embeddings(n: int, dim: int, seed: int, duplicates: float = 0.0) -> np.ndarray:
    """Random unit-norm float32 rows [n, dim], made in place (no float64 temporaries); a
    ``duplicates`` share of the rows are then copies of other (random) rows."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    copies = int(duplicates * n)
    if copies:
        x[rng.choice(n, copies, replace=False)] = x[rng.integers(0, n, copies)]
    return x


def inputs(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray]:
    """The benchmark's queries and gallery."""
    queries = embeddings(args.queries, args.dim, seed=0)
    return queries, embeddings(args.gallery, args.dim, seed=1, duplicates=args.duplicates)


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


def side_by_side(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """FAISS and ``topk_similarity`` in this process on the same inputs; exactness asserted.

    Returns, per variant, the fastest of ``args.repeat`` rounds (wall and CPU seconds).
    """
    import faiss
    import torch

    from xmr.retrieval import topk_similarity

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    queries, gallery = inputs(args)
    index = faiss.IndexFlatIP(args.dim)
    index.add(gallery)
    chunks = {"query_chunk": args.query_chunk, "gallery_chunk": args.gallery_chunk}

    def xmr(q: np.ndarray = queries, g: np.ndarray = gallery) -> np.ndarray:
        return topk_similarity(q, g, args.k, **chunks).indices

    def xmr_mm(q: np.ndarray = queries, g: np.ndarray = gallery) -> np.ndarray:
        with warnings.catch_warnings():  # "TF32 acceleration on top of oneDNN" (not used)
            warnings.simplefilter("ignore", UserWarning)
            with torch.backends.mkldnn.flags(enabled=False):
                return xmr(q, g)

    def faiss_search(q: np.ndarray = queries, g: None = None) -> np.ndarray:
        return index.search(q, args.k)[1]

    variants = {"faiss": faiss_search, "xmr": xmr, "xmr_mm": xmr_mm}
    if args.skip_mm:
        del variants["xmr_mm"]
    for run in variants.values():  # warm-up (thread pools, oneDNN primitives), not timed
        run(queries[:64], gallery[:65536])
    times: dict[str, dict[str, float]] = {}
    found: dict[str, np.ndarray] = {}
    for _ in range(args.repeat):
        for name, run in variants.items():
            cpu = cpu_seconds()
            start = time.perf_counter()
            found[name] = run()
            seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
            if name not in times or seconds < times[name]["seconds"]:
                times[name] = {"seconds": seconds, "cpu_seconds": cpu}
    if "xmr_mm" in found:
        check_against_mm(found["xmr"], found["xmr_mm"], queries, gallery)
    times["exactness"] = check_exact(args, queries, gallery, found["xmr"], found["faiss"])
    return times


def check_exact(
    args: argparse.Namespace,
    queries: np.ndarray,
    gallery: np.ndarray,
    xmr: np.ndarray,
    faiss_indices: np.ndarray,
) -> dict[str, float]:
    """Assert that ``xmr`` is the dense ranking of the same products on ``args.check_queries``
    queries and FAISS's top-k sets up to ties and rounding on all of them; returns counts."""
    import torch

    from xmr.metrics import rank
    from xmr.retrieval.topk import _matmul

    picked = np.random.default_rng(2).choice(len(queries), args.check_queries, replace=False)
    picked.sort()
    sub = torch.from_numpy(queries[picked])
    dense = torch.empty(len(picked), len(gallery))
    with torch.inference_mode():
        for start in range(0, len(gallery), args.gallery_chunk):
            chunk = torch.from_numpy(gallery[start : start + args.gallery_chunk])
            dense[:, start : start + len(chunk)] = _matmul(sub, chunk)
    expected = rank(dense, args.k).indices
    if not np.array_equal(xmr[picked], expected):
        bad = np.flatnonzero((xmr[picked] != expected).any(axis=1))
        raise AssertionError(f"top-k differs from the dense ranking for queries {picked[bad]}")
    tied = _rows_with_ties(dense.numpy(), expected)
    del dense

    same = (np.sort(xmr, axis=1) == np.sort(faiss_indices, axis=1)).all(axis=1)
    copies = within_rounding = 0
    for row in np.flatnonzero(~same):
        differing = np.array(sorted(set(xmr[row].tolist()) ^ set(faiss_indices[row].tolist())))
        kth = xmr[row, -1]
        if (gallery[differing] == gallery[kth]).all():
            copies += 1  # FAISS kept other copies of the k-th item than the lowest-index ones
            continue
        gap = _gap(queries[row], gallery, differing, kth)
        if gap > ROUNDING:
            raise AssertionError(
                f"query {row}: top-k differs from FAISS's by items {differing.tolist()} whose "
                f"scores are {gap:.2e} from the k-th"
            )
        within_rounding += 1
    return {
        "dense_checked": len(picked),
        "dense_rows_with_ties": tied,
        "faiss_same_set": int(same.sum()),
        "faiss_differ_by_copies": copies,
        "faiss_differ_within_rounding": within_rounding,
    }


def _rows_with_ties(scores: np.ndarray, top: np.ndarray) -> int:
    """How many rows hold an exact tie within their top-k or between the k-th and an item after
    it (rows where the tie rule decides the ranking)."""
    ranked = np.take_along_axis(scores, top, axis=1)
    inside = (np.diff(ranked, axis=1) == 0).any(axis=1)
    at_kth = (scores == ranked[:, -1:]).sum(axis=1) > (ranked == ranked[:, -1:]).sum(axis=1)
    return int((inside | at_kth).sum())


def check_against_mm(
    xmr: np.ndarray, xmr_mm: np.ndarray, queries: np.ndarray, gallery: np.ndarray
) -> None:
    """The oneDNN and torch.mm runs differ only where their products round differently."""
    for row in np.flatnonzero((np.sort(xmr, axis=1) != np.sort(xmr_mm, axis=1)).any(axis=1)):
        differing = np.array(sorted(set(xmr[row].tolist()) ^ set(xmr_mm[row].tolist())))
        if _gap(queries[row], gallery, differing, xmr[row, -1]) > ROUNDING:
            raise AssertionError(f"query {row}: the oneDNN and torch.mm top-k sets differ")


def _gap(query: np.ndarray, gallery: np.ndarray, items: np.ndarray, kth: int) -> float:
    """The largest distance of the float64 scores of ``items`` from that of item ``kth``."""
    scores = gallery[np.append(items, kth)].astype(np.float64) @ query.astype(np.float64)
    return float(np.abs(scores[:-1] - scores[-1]).max())


def worker(args: argparse.Namespace) -> dict[str, float]:
    """Run one variant in this process; returns seconds and memory in GiB."""
    import torch

    from xmr.metrics import rank
    from xmr.retrieval import topk_similarity

    torch.set_num_threads(args.threads)
    queries, gallery = inputs(args)
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
    elif args.worker == "faiss":
        import faiss

        faiss.omp_set_num_threads(args.threads)
        index = faiss.IndexFlatIP(args.dim)
        index.add(gallery)
        result.update(_peaks(base, "index_"))
        cpu = cpu_seconds()
        start = time.perf_counter()
        index.search(queries, args.k)
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
    for name in ("queries", "gallery", "dim", "k", "duplicates", "threads"):
        command += [f"--{name}", str(getattr(args, name))]
    for name, value in chunks.items():
        command += [f"--{name.replace('_', '-')}", str(value)]
    runs = []
    for _ in range(args.repeat):
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        runs.append(json.loads(done.stdout.splitlines()[-1]))
    return min(runs, key=lambda r: r["seconds"])


def machine(threads: int) -> str:
    """CPU model, core count, RAM, torch and FAISS versions of this machine."""
    import faiss
    import torch

    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next(
        line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if "model name" in line
    )
    mem_kib = int(Path("/proc/meminfo").read_text().split()[1])  # MemTotal
    return (
        f"{model}, {os.cpu_count()} cores, {mem_kib / 2**20:.1f} GiB RAM, "
        f"torch {torch.__version__}, faiss {faiss.__version__}, {threads} threads, no GPU used"
    )


def main() -> None:
    import torch

    from xmr.retrieval.topk import _default_chunks

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="500 x 20,000 smoke run")
    parser.add_argument("--sweep", action="store_true", help="time a grid of chunk sizes")
    parser.add_argument("--queries", type=int, default=5000)
    parser.add_argument("--gallery", type=int, default=600_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument(
        "--duplicates", type=float, default=0.1, help="share of gallery rows that are copies"
    )
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    query_chunk, gallery_chunk = _default_chunks("cpu")
    parser.add_argument("--query-chunk", type=int, default=query_chunk)
    parser.add_argument("--gallery-chunk", type=int, default=gallery_chunk)
    parser.add_argument("--repeat", type=int, default=1, help="runs per variant; the fastest")
    parser.add_argument(
        "--check-queries", type=int, default=200, help="queries checked against a dense ranking"
    )
    parser.add_argument("--skip-mm", action="store_true", help="no torch.mm side-by-side row")
    parser.add_argument("--skip-dense", action="store_true", help="no dense subprocess rows")
    parser.add_argument("--worker", choices=("chunked", "faiss", "dense"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    if args.quick:
        args.queries, args.gallery = 500, 20_000
    if args.sweep:
        args.gallery = 65_536
    args.check_queries = min(args.check_queries, args.queries)
    size = (
        f"{args.queries} x {args.gallery:,} x {args.dim}-d float32 ({args.duplicates:.0%} of "
        f"the gallery duplicated), k={args.k}"
    )
    print(f"{size}; {machine(args.threads)}; load average {_load()}\n")
    header = "| wall time (s) | CPU time (s) | peak above inputs (GiB) | peak RSS (GiB) |"
    if args.sweep:
        print("| query_chunk | gallery_chunk " + header)
        print("|---:|---:|---:|---:|---:|---:|")
        for qc in SWEEP_QUERY_CHUNKS:
            for gc in SWEEP_GALLERY_CHUNKS:
                r = run_variant(args, "chunked", query_chunk=qc, gallery_chunk=gc)
                print(f"| {qc} | {gc} " + _row(r["seconds"], r["cpu_seconds"], r))
        print(f"\nload average at the end: {_load()}")
        return
    chunks = {"query_chunk": args.query_chunk, "gallery_chunk": args.gallery_chunk}
    label = "`topk_similarity` ({})".format(", ".join(f"{n}={v}" for n, v in chunks.items()))
    times = side_by_side(args)
    exact = times.pop("exactness")
    anchor = times["faiss"]["seconds"]
    names = {
        "faiss": "FAISS `IndexFlatIP.search`",
        "xmr": label,
        "xmr_mm": label + ", oneDNN off (`torch.mm`)",
    }
    print(f"Side by side in one process (fastest of {args.repeat}):\n")
    print("| variant | wall time (s) | CPU time (s) | time / FAISS |")
    print("|---|---:|---:|---:|")
    for name, r in times.items():
        print(
            f"| {names[name]} | {r['seconds']:.2f} | {r['cpu_seconds']:.2f} "
            f"| {r['seconds'] / anchor:.2f}x |"
        )
    print(
        f"\nExact: the top-{args.k} of {exact['dense_checked']} queries equals the dense ranking "
        f"of the same products ({exact['dense_rows_with_ties']} of them decided by ties); top-k "
        f"sets equal FAISS's for {exact['faiss_same_set']} of {args.queries} queries, "
        f"{exact['faiss_differ_by_copies']} differ only in which copies of the k-th item they "
        f"hold, {exact['faiss_differ_within_rounding']} only within rounding of the k-th score.\n"
    )
    print("Each in its own process (peak memory):\n")
    print("| variant " + header)
    print("|---|---:|---:|---:|---:|")
    r = run_variant(args, "chunked", **chunks)
    print(f"| {label} " + _row(r["seconds"], r["cpu_seconds"], r))
    r = run_variant(args, "faiss")
    faiss_label = names["faiss"] + " (its index is a copy of the gallery)"
    print(f"| {faiss_label} " + _row(r["seconds"], r["cpu_seconds"], r))
    if not args.skip_dense:
        r = run_variant(args, "dense")
        print("| dense `q @ g.T` " + _row(r["seconds"], r["cpu_seconds"], r, "matmul_"))
        total = r["seconds"] + r["rank_seconds"], r["cpu_seconds"] + r["rank_cpu_seconds"]
        print("| dense `q @ g.T` + `rank` " + _row(*total, r))
    print(f"\nload average at the end: {_load()}")


def _load() -> str:
    """The 1-, 5- and 15-minute load averages."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _row(seconds: float, cpu_seconds: float, memory: dict[str, float], prefix: str = "") -> str:
    """The timing and memory cells of one markdown table row (``prefix``: which peaks)."""
    return (
        f"| {seconds:.1f} | {cpu_seconds:.1f} | {memory[f'{prefix}peak_above_inputs_gib']:.2f} "
        f"| {memory[f'{prefix}peak_rss_gib']:.2f} |"
    )


if __name__ == "__main__":
    main()
