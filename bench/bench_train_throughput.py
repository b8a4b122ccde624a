"""Benchmark: training throughput of ``xmr train`` against a plain PyTorch loop and the
step-only ceiling, side by side in one run.

All three step the same model, objective, optimiser, batch size and precision through the same
function, :func:`xmr.train.epoch.train_one_epoch`; only the data path differs:

- **ceiling**: one batch already on the device, stepped over and over (no data path at all);
- **plain loop**: batches collated in this process (decode PNG, seeded train transform,
  tokenise), one after another, as a single-process script would;
- **xmr train**: Ray Train's worker fed by the loader's Ray Data actors (``--loaders``; 0, the
  default, is as many as the node spares beside the worker).

Rates are steady pairs/s. The ceiling and the plain loop: over the second half of their steps
(:func:`~xmr.train.epoch.steady_rate`). ``xmr train``: over its epochs after the first, when
the loader's pipeline is running (every step, waits included, from the run's per-epoch
``train/steps`` and ``train/epoch_s``), or the one epoch's steady rate when ``--epochs 1``;
its timed seconds are reported so that a figure from too short a run shows as such. On a GPU
its utilisation is sampled (NVML, every 0.2 s): by this process over the ceiling's and the
plain loop's steps, and by ``xmr train`` itself per epoch (``train/gpu_util_pct``). The plain
loop and ``xmr train`` alternate for ``--rounds`` rounds (the machine's speed drifts); the
medians are reported.

    python bench/bench_train_throughput.py --threads 2                 # CPU, CLIP xmr-tiny
    python bench/bench_train_throughput.py --no-dashboard --device cuda --threads 8 \\
        --arch ViT-B-32 --pretrained none --precision fp32 bf16 --train-images 5000 \\
        --epochs 4 --rounds 1
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import tempfile
from collections.abc import Iterator
from pathlib import Path

import mlflow
import numpy as np
import pyarrow as pa
import torch

from xmr.data import read_dataset
from xmr.models import Corpus, create_model
from xmr.models.batch import TrainBatch
from xmr.toyworld import generate
from xmr.train.config import TrainConfig, resolve_config
from xmr.train.data import collate, training_data
from xmr.train.epoch import EpochResult, train_one_epoch
from xmr.train.gpu_utilisation import GpuUtilisation
from xmr.train.loader import loader_count
from xmr.train.optim import make_optimizer, make_scheduler
from xmr.train.precision import PRECISIONS, grad_scaler
from xmr.train.result import TrainResult
from xmr.train.run import train


def step_loop(
    config: TrainConfig, table: pa.Table, batches: Iterator[TrainBatch], device: torch.device
) -> tuple[EpochResult, float | None]:
    """One epoch of ``batches`` through :func:`train_one_epoch` with a fresh model (the run's
    seed), optimiser and scheduler, as ``xmr train``'s worker builds them; and the GPU's mean
    utilisation (%) over the epoch (None on the CPU)."""
    corpus = Corpus(table["caption"].to_pylist())
    model = create_model(config.model, seed=config.seed, corpus=corpus, device=device)
    objective = model.objective(config.loss, seed=config.seed * 1_009)
    objective.train()
    optimizer = make_optimizer(objective.parameters(), config.optim)
    steps_per_epoch = table.num_rows // config.batch_size
    total_steps = config.total_steps(steps_per_epoch)
    scheduler = make_scheduler(optimizer, config.optim, steps_per_epoch, total_steps)
    scaler = grad_scaler(config.precision, device)
    busy = GpuUtilisation.for_device(device)
    with busy or contextlib.nullcontext():
        result = train_one_epoch(
            objective, optimizer, scheduler, scaler, batches, device=device,
            precision=config.precision,
        )  # fmt: skip
    return result, (busy.mean() if busy else None)


def collated(config: TrainConfig, table: pa.Table, steps: int) -> Iterator[TrainBatch]:
    """``steps`` batches of a seeded permutation of ``table``, collated here as the loader's
    actors collate them (seeded per pair)."""
    corpus = Corpus(table["caption"].to_pylist())
    model = create_model(config.model, seed=config.seed, corpus=corpus)
    order = np.random.default_rng(config.seed).permutation(table.num_rows)
    size = config.batch_size
    for step in range(steps):
        rows = table.take(order[step * size : (step + 1) * size]).to_pydict()
        yield collate(rows, model, seed=config.seed, epoch=0)


def xmr_train_rate(
    result: TrainResult, batch: int, tracking_uri: str
) -> tuple[float, float, float | None]:
    """``xmr train``'s steady pairs/s, its timed seconds and its GPU utilisation (%): over the
    epochs after the first, or the one epoch's own steady rate."""
    client = mlflow.MlflowClient(tracking_uri)

    def history(key: str) -> list[float]:
        points = client.get_metric_history(result.mlflow_run_id, key)
        points = sorted(points, key=lambda m: m.step)
        return [m.value for m in points]

    steps, seconds = history("train/steps"), history("train/epoch_s")
    util = history("train/gpu_util_pct")
    if len(steps) < 2:
        rate = result.metrics["train/samples_per_s"]
        return rate, seconds[0] / 2, (util[0] if util else None)
    timed = sum(seconds[1:])
    return batch * sum(steps[1:]) / timed, timed, (statistics.mean(util[1:]) if util else None)


def measure(args: argparse.Namespace, root: Path, tmp: Path, precision: str) -> dict:
    """One precision: the ceiling once, then ``--rounds`` rounds of the plain loop and ``xmr
    train`` (a fresh run each round); medians over the rounds."""
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    torch.set_num_threads(args.threads)

    def config_for(n: int) -> TrainConfig:
        return resolve_config(
            args.model, arch=args.arch, pretrained=args.pretrained, data=root,
            epochs=args.epochs, batch_size=args.batch_size, cpus_per_worker=worker_cpus,
            precision=precision, gpus_per_worker=1 if gpu else 0, loaders=args.loaders,
            storage=tmp / f"runs-{precision}-{n}",
        )  # fmt: skip

    worker_cpus = args.cpus_per_worker or (1 if gpu else args.threads)
    config = config_for(0)
    table = training_data(read_dataset(config.dataset, root, config.split)).table
    steps = table.num_rows // args.batch_size
    plain_steps = min(steps, args.plain_steps)
    one = next(collated(config, table, 1)).to(device)  # on the device: no data path
    ceiling, ceiling_util = step_loop(
        config, table, itertools.repeat(one, args.ceiling_steps), device
    )
    rounds = []
    for n in range(args.rounds):
        config = config_for(n)
        plain, plain_util = step_loop(config, table, collated(config, table, plain_steps), device)
        torch.cuda.empty_cache() if gpu else None
        uri = f"sqlite:///{tmp / f'mlflow-{precision}.db'}"
        result = train(config, tracking_uri=uri)
        rate, timed, util = xmr_train_rate(result, config.batch_size, uri)
        rounds.append({
            "plain": plain.steady_samples_per_s, "xmr": rate, "xmr_timed_s": timed,
            "first_step_s": result.metrics["train/first_step_s"],
            **({"plain_util": plain_util or np.nan, "xmr_util": util or np.nan} if gpu else {}),
        })  # fmt: skip
    median = {key: float(np.median([r[key] for r in rounds])) for key in rounds[0]}
    loaders = loader_count(config)[0]  # what xmr train chose
    figures = {
        "model": f"{config.model.family}/{config.model.arch}",
        "device": torch.cuda.get_device_name(device) if gpu else f"CPU, {args.threads} threads",
        "precision": precision,
        "batch_size": args.batch_size,
        "pairs_per_epoch": table.num_rows,
        "epochs": args.epochs,
        "loaders": loaders,
        "cpus_per_worker": worker_cpus,
        "rounds": args.rounds,
        "ceiling_pairs_per_s": round(ceiling.steady_samples_per_s, 1),
        "plain_pairs_per_s": round(median["plain"], 1),
        "xmr_train_pairs_per_s": round(median["xmr"], 1),
        "xmr_train_of_ceiling": round(median["xmr"] / ceiling.steady_samples_per_s, 3),
        "overhead_vs_plain": round(1 - median["xmr"] / median["plain"], 3),
        "overhead_per_round": [round(1 - r["xmr"] / r["plain"], 3) for r in rounds],
        "xmr_train_timed_s": round(median["xmr_timed_s"], 1),
        "xmr_train_first_step_s": round(median["first_step_s"], 1),
    }
    if gpu:
        figures["ceiling_gpu_util_pct"] = ceiling_util
        figures["plain_gpu_util_pct"] = median["plain_util"]
        figures["xmr_train_gpu_util_pct"] = median["xmr_util"]
    print(json.dumps(figures), flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="clip")
    parser.add_argument("--arch", default=None, help="Architecture (default: the family's).")
    parser.add_argument("--pretrained", default=None, help="e.g. none (random init).")
    parser.add_argument("--precision", nargs="+", default=["fp32"], choices=PRECISIONS)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (xmr train: 1 GPU).")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--train-images", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=1, help="of xmr train (rate: after the 1st)")
    parser.add_argument("--loaders", type=int, default=0, help="xmr train --loaders (0: auto)")
    parser.add_argument("--plain-steps", type=int, default=1_000, help="at most, plain loop")
    parser.add_argument("--ceiling-steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="plain loop")
    parser.add_argument(
        "--cpus-per-worker",
        type=int,
        default=0,
        help="xmr train's (0: --threads on the CPU, 1 on a GPU, xmr train's default)",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="Plain loop, then xmr train, this many times."
    )
    parser.add_argument("--out", type=Path, default=None, help="Write the figures as JSON here.")
    parser.add_argument(
        "--no-dashboard",
        action="store_true",
        help="Start Ray without its dashboard (no ray[default]).",
    )
    args = parser.parse_args()
    import ray

    if args.no_dashboard:
        ray.init(include_dashboard=False)  # xmr train then uses this Ray

    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "world.yaml"
        spec.write_text(f"splits: {{train: {args.train_images}, val: 50, test: 50}}\n")
        root = generate(Path(tmp) / "world", spec, seed=0, progress=False)
        figures = [measure(args, root, Path(tmp), precision) for precision in args.precision]
    print(json.dumps(figures, indent=2))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
