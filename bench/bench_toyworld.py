"""Benchmark: generating a ToyWorld (images/s, total seconds, output size).

Generates a world with the packaged defaults except the split sizes (default 9000/500/500, i.e.
10,000 images, counterfactuals for the test split) into a temporary folder, removed afterwards
unless ``--out`` is given. Uses every core the process may run on. Besides wall time it reports
the CPU time of this process and its workers per image, which other load on the machine does not
inflate. Run from the repository root
with ``xmr`` importable (``pip install -e .`` or ``PYTHONPATH=.``):

    python bench/bench_toyworld.py                      # 10,000 images at 128 px
    python bench/bench_toyworld.py --train 900 --quick  # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

from xmr.toyworld import WorldConfig, generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=9000, help="train images")
    parser.add_argument("--val", type=int, default=500, help="val images")
    parser.add_argument("--test", type=int, default=500, help="test images (+ counterfactuals)")
    parser.add_argument("--size", type=int, default=128, help="image side, pixels")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="keep the world here (must not exist)")
    parser.add_argument("--quick", action="store_true", help="no progress bar")
    args = parser.parse_args()

    config = WorldConfig.from_dict(
        {
            "image_size": args.size,
            "splits": {"train": args.train, "val": args.val, "test": args.test},
        }
    )
    tmp = None if args.out else Path(tempfile.mkdtemp(prefix="bench-toyworld-"))
    out = args.out or tmp / "world"
    try:
        start = time.perf_counter()
        generate(out, config, seed=args.seed, progress=not args.quick)
        seconds = time.perf_counter() - start
        cpu = sum(
            usage.ru_utime + usage.ru_stime
            for usage in (
                resource.getrusage(resource.RUSAGE_SELF),
                resource.getrusage(resource.RUSAGE_CHILDREN),  # the pool's workers
            )
        )
        world = json.loads((out / "world.json").read_text())
        images = sum(c["images"] for c in world["counts"].values())
        counterfactuals = sum(c.get("counterfactuals", 0) for c in world["counts"].values())
        size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"{images} images ({args.train}/{args.val}/{args.test}) at {args.size} px "
        f"+ {counterfactuals} counterfactual renders on {cores} cores: "
        f"{seconds:.1f} s, {images / seconds:.0f} images/s ({1000 * cpu / images:.1f} CPU ms per "
        f"image, all processes), {size / 2**20:.0f} MiB on disk"
    )


if __name__ == "__main__":
    main()
