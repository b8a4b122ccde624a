"""The loader's decode work: CPU-seconds to decode one micro-batch, in this process, with one
torch thread (as a :class:`~xmr.train.plan.DecodeSlots` actor decodes it). Multiplied by a
run's steps, it is the part of the loaders' CPU that is the data itself, the baseline that
issue 46's acceptance holds the coordinator and the loaders' overhead to::

    python bench/decode_cpu.py --data /path/to/world --model clip --pretrained toy --slots 24
"""

from __future__ import annotations

import argparse
import time

import torch

from xmr.data import read_dataset
from xmr.models.base import Corpus
from xmr.train.config import resolve_config
from xmr.train.data import training_data
from xmr.train.plan import SlotDecoder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a ToyWorld folder")
    parser.add_argument("--model", default="clip")
    parser.add_argument("--pretrained", default="toy")
    parser.add_argument("--fair-alpha", type=float, default=0.0)
    parser.add_argument("--slots", type=int, default=24, help="micro-batches to decode")
    args = parser.parse_args()
    torch.set_num_threads(1)
    table = training_data(read_dataset("toyworld", args.data, "train")).table
    config = resolve_config(
        args.model, data=args.data, pretrained=args.pretrained, fair_alpha=args.fair_alpha
    )
    corpus = Corpus(table["caption"].to_pylist())
    steps = table.num_rows // config.batch_size
    decoder = SlotDecoder(config, table, corpus, steps, grouped=False)
    decoder.batch(0)  # the first call builds caches; not counted
    start = time.thread_time()
    for slot in range(1, args.slots + 1):
        decoder.batch(slot)
    per_slot = (time.thread_time() - start) / args.slots
    print(f"batch {config.batch_size}, {steps} micro-batches an epoch: "
          f"{per_slot:.3f} CPU-s a micro-batch, {per_slot * steps:.1f} CPU-s an epoch")  # fmt: skip


if __name__ == "__main__":
    main()
