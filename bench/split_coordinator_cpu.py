"""The split coordinator's CPU when the loader is ahead of a slow consumer (issue 46, item 7).

The training loader's shape without the model: ``--slots`` slot rows in blocks of 4, one
actor decoding each slot into a ``[128, 3, 64, 64]`` float32 micro-batch (``--decode-s`` of
CPU work), and one consumer that takes each micro-batch from ``streaming_split(1)`` and then
sleeps ``--step-s`` (a training step that needs no CPU here, so every CPU-second measured is
the data path's). It prints the wall time and the CPU-seconds of the coordinator, the loader
actor and the consumer (``/proc/<pid>/stat``), and each one's share of a core::

    python bench/split_coordinator_cpu.py --slots 240 --step-s 0.25
    python bench/split_coordinator_cpu.py --slots 240 --step-s 0.25 --loader-ahead 8
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np
import ray
import ray.data

from bench.data_path_cpu import cpu_seconds
from xmr.pipeline.ray_idle import pause_when_idle


class Decode:
    """A stand-in for :class:`~xmr.train.plan.DecodeSlots`: a slot in, one micro-batch out."""

    def __init__(self, decode_s: float) -> None:
        self.decode_s = decode_s

    def __call__(self, slots: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        end = time.process_time() + self.decode_s
        while time.process_time() < end:  # CPU work, like decoding images
            pass
        pixels = np.full((1, 128, 3, 64, 64), float(slots["slot"][0]), np.float32)
        return {"pixels": pixels, "slot": slots["slot"]}


@ray.remote(num_cpus=0)
class Consumer:
    """Takes the split's micro-batches one at a time, ``step_s`` apart."""

    def pid(self) -> int:
        return os.getpid()

    def run(self, shard: Any, step_s: float, rows: int) -> int:
        taken = 0
        for _ in shard.iter_batches(batch_size=1, batch_format="numpy", prefetch_batches=2):
            taken += 1
            time.sleep(step_s)
            if taken == rows:
                break
        return taken


def actor_pids(class_prefix: str) -> list[int]:
    """The process ids of this Ray session's live actors whose class name starts with
    ``class_prefix`` (from the GCS actor table, so another session's actors are not counted)."""
    actors = ray._private.state.actors().values()
    return [
        actor["Pid"]
        for actor in actors
        if actor["State"] == "ALIVE" and actor["ActorClassName"].startswith(class_prefix)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=int, default=240)
    parser.add_argument("--step-s", type=float, default=0.25, help="the consumer's step")
    parser.add_argument("--decode-s", type=float, default=0.05, help="CPU-s to decode a slot")
    parser.add_argument(
        "--consumer-cpus",
        type=float,
        default=0.0,
        help="CPUs the consumer holds (a training worker holds its own)",
    )
    parser.add_argument(
        "--pause", action="store_true", help="register xmr's PauseWhenIdle (xmr.pipeline.ray_idle)"
    )
    parser.add_argument("--take", type=int, default=0, help="micro-batches to take (0: all)")
    parser.add_argument("--loader-cpus", type=float, default=1.0, help="CPUs the loader holds")
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    dataset = ray.data.from_items(
        [{"slot": i} for i in range(args.slots)], override_num_blocks=-(-args.slots // 4)
    ).map_batches(
        Decode, batch_size=1, fn_constructor_args=(args.decode_s,),
        compute=ray.data.ActorPoolStrategy(size=1), num_cpus=args.loader_cpus,
    )  # fmt: skip
    dataset.context.execution_options.preserve_order = True
    if args.pause:
        pause_when_idle(dataset)
    (shard,) = dataset.streaming_split(1, equal=True)
    consumer = Consumer.options(num_cpus=args.consumer_cpus).remote()
    consumer_pid = ray.get(consumer.pid.remote())
    start = time.monotonic()
    rows = consumer.run.remote(shard, args.step_s, args.take)
    seen: dict[str, dict[int, float]] = {"coordinator": {}, "loader": {}}
    while not ray.wait([rows], timeout=1.0)[0]:  # the actors exit with the run: sample as it goes
        for part, prefix in (("coordinator", "SplitCoordinator"), ("loader", "MapWorker")):
            for pid in actor_pids(prefix):
                seen[part][pid] = max(seen[part].get(pid, 0.0), cpu_seconds(pid))
    done, wall = ray.get(rows), time.monotonic() - start
    parts = {
        **{part: sum(pids.values()) for part, pids in seen.items()},
        "consumer": cpu_seconds(consumer_pid),
    }
    print(f"{done} micro-batches in {wall:.1f} s (step {args.step_s} s, decode {args.decode_s} s)")
    for name, seconds in parts.items():
        print(f"  {name:<12} {seconds:7.1f} CPU-s  {seconds / wall:6.1%} of a core")


if __name__ == "__main__":
    main()
