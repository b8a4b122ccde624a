"""Benchmark: per-dimension MI of CLIP-clip (``xmr.debias.mutual_information``), both estimators.

Features are seeded random CLIP-like rows (standard normal, L2-normalised, float32) with a
gender label male/female/neutral per row; a few planted dimensions are shifted by the gender
code before normalising, the rest carry no gender. Reports the median wall time over
``--repeats`` runs, the tracemalloc peak of one extra (untimed) run, and whether the planted
dimensions are exactly the top-ranked ones. Set ``OMP_NUM_THREADS`` to pin the thread count.

    OMP_NUM_THREADS=2 python bench/bench_clip_mi.py                  # N 5000, D 512, 3 repeats
    python bench/bench_clip_mi.py --samples 1000 --dims 128 --repeats 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import tracemalloc

import numpy as np

from xmr.debias import MI_ESTIMATORS, mutual_information
from xmr.metrics.gender_bias import gender_codes

PLANTED = 8  # dimensions that carry the gender
SHIFT = 0.5  # their mean shift per unit of gender code (noise std 1, before normalising)


def features(samples: int, dims: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float32 ``[samples, dims]`` unit rows, gender codes ``[samples]``, the planted dims."""
    rng = np.random.default_rng(seed)
    codes = gender_codes(rng.choice(["male", "female", "neutral"], samples))
    planted = np.sort(rng.choice(dims, min(PLANTED, dims - 1), replace=False))
    x = rng.standard_normal((samples, dims), dtype=np.float32)
    x[:, planted] += SHIFT * codes[:, None]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, codes, planted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5000)
    parser.add_argument("--dims", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    x, codes, planted = features(args.samples, args.dims, args.seed)
    print(
        f"N={args.samples} D={args.dims} planted dims={planted.tolist()} "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} cpus={os.cpu_count()}"
    )
    header = f"{'estimator':<10} {'N':>6} {'D':>5} {'median s':>9} {'min s':>7} {'peak MB':>8}"
    print(f"{header}  planted")
    for estimator in MI_ESTIMATORS:
        seconds = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            scores = mutual_information(x, codes, estimator)
            seconds.append(time.perf_counter() - start)
        tracemalloc.start()
        mutual_information(x, codes, estimator)
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        top = np.argsort(-scores, kind="stable")[: len(planted)]
        found = len(set(top.tolist()) & set(planted.tolist()))
        print(
            f"{estimator:<10} {args.samples:>6} {args.dims:>5} {statistics.median(seconds):>9.3f} "
            f"{min(seconds):>7.3f} {peak:>8.1f}  {found}/{len(planted)} in the top {len(planted)}"
        )


if __name__ == "__main__":
    main()
