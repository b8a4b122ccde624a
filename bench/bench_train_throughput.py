"""Benchmark: training throughput of ``xmr train`` (Ray Train, 1 worker) vs a plain PyTorch loop.

Both train the same model with the same objective, optimiser, batch size and collate function
(decode PNG, train transform, tokenise) on the same training table. The plain loop iterates the
table's rows in this process, one batch after another; ``xmr train`` runs
:func:`xmr.train.loop.train_loop` in one Ray Train worker reading a Ray Data shard. Throughput is
pairs per second inside the epoch (what the worker reports as ``train/samples_per_s``); the
end-to-end wall time of ``xmr train`` (Ray start, worker start, evaluation) is reported apart.

    python bench/bench_train_throughput.py                     # CLIP xmr-tiny, batch 128, 2 threads
    python bench/bench_train_throughput.py --model vsepp --batch-size 64
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from xmr.data import read_dataset
from xmr.data.toyworld import generate
from xmr.models import create_model
from xmr.train.config import resolve_config
from xmr.train.data import collate, training_data
from xmr.train.optim import make_optimizer
from xmr.train.run import train


def plain_loop(config, root: Path, threads: int, steps: int) -> float:
    """Pairs/s of a single-process loop over the same table (first batch excluded)."""
    torch.set_num_threads(threads)
    records = read_dataset(config.dataset, root, config.split)
    data = training_data(records)
    model = create_model(config.model, seed=config.seed, corpus=data.corpus())
    objective = model.objective(config.loss)
    objective.train()
    optimizer = make_optimizer(objective.parameters(), config.optim)
    table = data.table
    order = np.random.default_rng(0).permutation(table.num_rows)
    batch_size = config.batch_size
    start, seen = None, 0
    for step in range(steps + 1):
        rows = table.take(order[step * batch_size : (step + 1) * batch_size]).to_pydict()
        batch = collate({k: np.asarray(v, dtype=object) for k, v in rows.items()}, model)
        loss = objective(batch)["loss"]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step == 0:
            start = time.perf_counter()  # the first step pays one-off allocations
        else:
            seen += batch_size
    return seen / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="clip")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--train-images", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=None, help="Write the figures as JSON here.")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "world.yaml"
        spec.write_text(f"splits: {{train: {args.train_images}, val: 50, test: 50}}\n")
        root = generate(Path(tmp) / "world", spec, seed=0, progress=False)
        config = resolve_config(
            args.model, data=root, epochs=1, batch_size=args.batch_size,
            cpus_per_worker=args.threads, storage=Path(tmp) / "runs",
        )  # fmt: skip
        pairs = 5 * args.train_images
        steps = pairs // args.batch_size - 1
        plain = plain_loop(config, root, args.threads, steps)
        start = time.perf_counter()
        result = train(config, tracking_uri=f"sqlite:///{Path(tmp) / 'mlflow.db'}")
        wall = time.perf_counter() - start
        ray_train = result.metrics["train/samples_per_s"]
    figures = {
        "model": f"{config.model.family}/{config.model.arch}",
        "batch_size": args.batch_size,
        "threads": args.threads,
        "pairs": pairs,
        "plain_pairs_per_s": round(plain, 1),
        "xmr_train_pairs_per_s": round(ray_train, 1),
        "overhead": round(1 - ray_train / plain, 3),
        "xmr_train_wall_s": round(wall, 1),
        "epoch_compute_s": round(pairs / ray_train, 1),
    }
    print(json.dumps(figures, indent=2))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
