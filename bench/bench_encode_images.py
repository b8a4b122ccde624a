"""Benchmark: an encoder's image preparation (read, preprocess) on 1 to N threads.

On a GPU the encoding stage's pace is set by its CPU work, not by the model: each image is
decoded and preprocessed (for CLIP ViT-B/32: a bicubic resize to 224 px, a centre crop, a
float tensor, normalised) before one batched forward pass. ``EncodeQueries`` does that work on
as many threads as its actor has cores (4 on a GPU by default); this measures
:func:`xmr.eval.encoders.prepare_image` over the default ToyWorld's test images on each thread
count, the images already in the page cache (a warm-up pass first), with one torch thread, as
a GPU actor runs it.

    python bench/bench_encode_images.py                      # ViT-B-32 preprocessing, 1..cores
    python bench/bench_encode_images.py --arch xmr-tiny --threads 1 2
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import torch

from xmr.data import read_dataset
from xmr.eval.encoders import prepare_image
from xmr.eval.protocol import ImageQuery
from xmr.models import create_model
from xmr.toyworld.default_world import default_toyworld


def images_per_s(prepare: partial, queries: list[ImageQuery], threads: int) -> float:
    """Images/s of ``prepare`` over ``queries`` on ``threads`` threads (the best of 3 passes)."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            for pixels in pool.map(prepare, queries):
                assert not isinstance(pixels, str), pixels
        best = min(best, time.perf_counter() - start)
    return len(queries) / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", default="ViT-B-32", help="A clip arch (its preprocessing).")
    parser.add_argument("--threads", type=int, nargs="+", default=None, help="default: 1..cores")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = create_model("clip", arch=args.arch, pretrained="none", seed=0)
    queries = [ImageQuery(r.path) for r in read_dataset("toyworld", default_toyworld(0), "test")]
    prepare = partial(prepare_image, model)
    images_per_s(prepare, queries, 1)  # warm-up: the files in the page cache
    threads = args.threads or list(range(1, (os.cpu_count() or 1) + 1))
    base = None
    for n in threads:
        rate = images_per_s(prepare, queries, n)
        base = base or rate
        print(f"{args.arch} preprocessing, {n} thread(s): {rate:,.0f} images/s, {rate / base:.2f}x")


if __name__ == "__main__":
    main()
