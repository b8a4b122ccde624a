"""Benchmark: the encode stage of ``xmr eval``, end to end against its warm rate, in one run.

``xmr eval`` starts its encoder's actors (a model each, on a GPU when there is one) as soon as
the split is read and checked, so that their start overlaps the rest of the preparation (the
ODmAP queries, the all-splits caption gallery, the Bias@K split); the encode stage then waits
only for what is left of the start. Three measurements of the same rows, in this order:

- **eval**: the evaluation as ``xmr eval`` runs it (:func:`~xmr.eval.encode.encode`, then
  :func:`~xmr.eval.score.score`): seconds
  to prepare, to encode (and of that, waiting for the first actor), the slowest actor's model
  build, and the whole;
- **cold**: an encoder made only when the rows are ready (the start inside the encode stage, as
  before the overlap);
- **warm**: the same encoder encoding the same rows a second time, its actors ready and warm.

It reports rows/s of each and the ratio of the eval's encode stage to the warm time of its rows
(the goal: ≤ 1.3). Rows are what the encoder runs: each distinct image (split, ODmAP queries,
Bias@K split) and each distinct caption (the ODmAP gallery, the Bias@K queries).

    python bench/bench_eval_encode.py                         # CPU, CLIP xmr-tiny
    python bench/bench_eval_encode.py --no-dashboard --device cuda --arch ViT-B-32 \\
        --pretrained none --batch-size 256
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from xmr.eval.config import eval_config
from xmr.eval.encode import RayEncoder, encode, ray_encoder
from xmr.eval.score import score
from xmr.toyworld.default_world import default_toyworld


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="clip")
    parser.add_argument("--arch", default=None, help="Architecture (default: the family's).")
    parser.add_argument("--pretrained", default=None, help="e.g. none (random init).")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--data", type=Path, default=None, help="default: the default ToyWorld")
    parser.add_argument("--split", default="test")
    parser.add_argument("--no-dashboard", action="store_true", help="Ray without its dashboard")
    parser.add_argument("--out", type=Path, default=None, help="Write the figures as JSON here.")
    args = parser.parse_args()
    if args.no_dashboard:
        import ray

        ray.init(include_dashboard=False)  # xmr eval then uses this Ray
    data = args.data or default_toyworld(0)
    config = eval_config(
        model=args.model, arch=args.arch, pretrained=args.pretrained, device=args.device,
        batch_size=args.batch_size, data=data, split=args.split, bootstrap=0,
    )  # fmt: skip

    encoded = encode(config, ray_encoder())  # what `xmr eval` runs: encode, then score
    timings = score(encoded, config).timings
    texts = list(encoded.odmap.gallery if encoded.odmap else encoded.retrieval.captions)
    texts += [text for ranking in encoded.bias for text in ranking.texts]
    queries = list(encoded.image_queries)

    t0 = time.perf_counter()
    with RayEncoder(config) as encoder:
        encoder.encode(queries, texts)
        cold_s = time.perf_counter() - t0
        rows = encoder.rows
        t0 = time.perf_counter()
        encoder.encode(queries, texts)
        warm_s = time.perf_counter() - t0

    figures = {
        "device": encoder.device,
        "model": f"{args.model} {config.model.arch}",
        "batch_size": args.batch_size,
        "rows": rows,
        "prepare_s": timings["prepare_s"],
        "encode_s": timings["encode_s"],
        "encoder_wait_s": timings.get("encoder_wait_s", 0.0),
        "encoder_setup_s": timings.get("encoder_setup_s", 0.0),
        "eval_total_s": timings["total_s"],
        "cold_encode_s": cold_s,
        "warm_encode_s": warm_s,
        "eval_rows_per_s": rows / timings["encode_s"],
        "cold_rows_per_s": rows / cold_s,
        "warm_rows_per_s": rows / warm_s,
        "encode_over_warm": timings["encode_s"] / warm_s,
    }
    print(
        f"{rows} rows on {figures['device']} ({figures['model']}, batch {args.batch_size}):\n"
        f"  eval: prepare {figures['prepare_s']:.1f} s, encode {figures['encode_s']:.1f} s "
        f"(waiting for the encoder {figures['encoder_wait_s']:.1f} s; its model build "
        f"{figures['encoder_setup_s']:.1f} s), total {figures['eval_total_s']:.1f} s: "
        f"{figures['eval_rows_per_s']:.0f} rows/s\n"
        f"  cold encoder (made at encode time): {cold_s:.1f} s, "
        f"{figures['cold_rows_per_s']:.0f} rows/s\n"
        f"  warm encoder: {warm_s:.1f} s, {figures['warm_rows_per_s']:.0f} rows/s\n"
        f"  eval encode stage / warm: {figures['encode_over_warm']:.2f}x (goal <= 1.3)"
    )
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
