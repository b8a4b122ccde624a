"""Benchmark: training throughput of ``xmr train`` (Ray Train, 1 worker) vs a plain PyTorch loop.

Both train the same model with the same objective, optimiser, batch size, precision and collate
function (decode PNG, train transform, tokenise) on the same training table. The plain loop
iterates the table's rows in this process, one batch after another; ``xmr train`` runs
:func:`xmr.train.loop.train_loop` in one Ray Train worker reading a Ray Data shard. Throughput is
pairs per second after each side's first step (what the worker reports as
``train/samples_per_s``); ``xmr train``'s wait for its first step (the loader's actors start)
and its end-to-end wall time (Ray start, worker start, evaluation) are reported apart. The two
alternate for ``--rounds`` rounds (the machine's speed drifts) and the medians are reported.
On a GPU (``--device cuda``) the GPU's utilisation is sampled (NVML, every 0.2 s): over the
plain loop's timed steps, and for ``xmr train`` over the busiest window of its epoch's length.

    python bench/bench_train_throughput.py                     # CLIP xmr-tiny, batch 128, 2 threads
    python bench/bench_train_throughput.py --model vsepp --batch-size 64
    python bench/bench_train_throughput.py --device cuda --arch ViT-B-32 --precision fp32 bf16
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import threading
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
from xmr.train.precision import PRECISIONS, autocast, grad_scaler
from xmr.train.run import train


def plain_loop(config, root: Path, threads: int, steps: int, device: torch.device) -> float:
    """Pairs/s of a single-process loop over the same table (first batch excluded)."""
    torch.set_num_threads(threads)
    records = read_dataset(config.dataset, root, config.split)
    data = training_data(records)
    model = create_model(config.model, seed=config.seed, corpus=data.corpus(), device=device)
    objective = model.objective(config.loss)
    objective.train()
    optimizer = make_optimizer(objective.parameters(), config.optim)
    scaler = grad_scaler(config.precision, device)
    table = data.table
    order = np.random.default_rng(0).permutation(table.num_rows)
    batch_size = config.batch_size
    start, seen = None, 0
    for step in range(steps + 1):
        rows = table.take(order[step * batch_size : (step + 1) * batch_size]).to_pydict()
        batch = collate({k: np.asarray(v, dtype=object) for k, v in rows.items()}, model)
        with autocast(config.precision, device):
            loss = objective(batch.to(device, non_blocking=True))["loss"]
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        if step == 0:
            _sync(device)
            start = time.perf_counter()  # the first step pays one-off allocations
        else:
            seen += batch_size
    _sync(device)
    return seen / (time.perf_counter() - start)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class GpuSampler:
    """GPU utilisation (%) sampled every ``interval`` s in a thread (NVML)."""

    def __init__(self, interval: float = 0.2) -> None:
        import pynvml  # nvidia-ml-py, on GPU machines

        pynvml.nvmlInit()
        self._nvml, self._handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        self.interval, self.samples = interval, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            rates = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
            self.samples.append(rates.gpu)

    def __enter__(self) -> GpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def mean(self) -> float:
        return float(np.mean(self.samples)) if self.samples else float("nan")

    def busiest(self, seconds: float) -> float:
        """The highest mean utilisation over a window of ``seconds``."""
        util = np.array(self.samples, dtype=float)
        width = max(1, round(seconds / self.interval))
        if len(util) <= width:
            return float(util.mean()) if len(util) else float("nan")
        windows = np.convolve(util, np.ones(width) / width, mode="valid")
        return float(windows.max())


def measure(args: argparse.Namespace, root: Path, tmp: Path, precision: str) -> dict:
    """One precision: ``--rounds`` rounds of the plain loop then ``xmr train`` on the same world
    (a fresh run each round), medians over the rounds."""
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    pairs = 5 * args.train_images
    steps = pairs // args.batch_size - 1
    rounds = []
    for n in range(args.rounds):
        config = resolve_config(
            args.model, arch=args.arch, pretrained=args.pretrained, data=root, epochs=1,
            batch_size=args.batch_size, cpus_per_worker=args.threads, precision=precision,
            gpus_per_worker=1 if gpu else 0, storage=tmp / f"runs-{precision}-{n}",
        )  # fmt: skip
        with GpuSampler() if gpu else contextlib.nullcontext() as sampler:
            plain = plain_loop(config, root, args.threads, steps, device)
        plain_util = sampler.mean() if gpu else None
        torch.cuda.empty_cache() if gpu else None
        with GpuSampler() if gpu else contextlib.nullcontext() as sampler:
            start = time.perf_counter()
            result = train(config, tracking_uri=f"sqlite:///{tmp / f'mlflow-{precision}.db'}")
            wall = time.perf_counter() - start
        metrics = result.metrics
        ray_train = metrics["train/samples_per_s"]
        rounds.append(
            {
                "plain": plain,
                "xmr": ray_train,
                "first_step_s": metrics["train/first_step_s"],
                "epoch_s": metrics["train/epoch_s"],
                "wall_s": wall,
                **(
                    {
                        "plain_util": plain_util,
                        "xmr_util": sampler.busiest(pairs / ray_train),
                    }
                    if gpu
                    else {}
                ),
            }
        )
    median = {key: float(np.median([r[key] for r in rounds])) for key in rounds[0]}
    figures = {
        "model": f"{config.model.family}/{config.model.arch}",
        "device": torch.cuda.get_device_name(device) if gpu else f"CPU, {args.threads} threads",
        "precision": precision,
        "batch_size": args.batch_size,
        "pairs": pairs,
        "rounds": args.rounds,
        "plain_pairs_per_s": round(median["plain"], 1),
        "xmr_train_pairs_per_s": round(median["xmr"], 1),
        "overhead": round(1 - median["xmr"] / median["plain"], 3),
        "overhead_per_round": [round(1 - r["xmr"] / r["plain"], 3) for r in rounds],
        "xmr_train_first_step_s": round(median["first_step_s"], 1),
        "xmr_train_epoch_s": round(median["epoch_s"], 1),
        "xmr_train_wall_s": round(median["wall_s"], 1),
    }
    if gpu:
        figures["plain_gpu_util_pct"] = round(median["plain_util"], 1)
        figures["xmr_train_gpu_util_pct"] = round(median["xmr_util"], 1)
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
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
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
    if args.no_dashboard:
        import ray

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
