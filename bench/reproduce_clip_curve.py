"""CLIP-clip on ToyWorld: |Bias@10| and recall as the number of clipped dimensions m grows.

The gender paper's figure 4 for our world. Runs the shipped ``clip_m`` space with both MI
estimators swept (a tiny CLIP trained for 3 epochs on the default ToyWorld, whose train split
plants gender with cups and bicycles; MI estimated on the train split, scored on test), then
writes a markdown table and ``bench/clip_m_curve.png`` from the sweep's MLflow runs::

    python bench/reproduce_clip_curve.py [--name clip-m-toyworld] [--tracking-uri sqlite:///…]
                                         [--checkpoint xmr-runs/<run>/last.pt]

It prints the ``xmr tune`` command it runs; rerunning resumes or reuses the finished sweep.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml
from matplotlib.figure import Figure

from xmr.compare import sweep_runs
from xmr.tune.space import resolve_space_path

BENCH = Path(__file__).resolve().parent


def run_sweep(name: str, tracking_uri: str | None, storage: Path, checkpoint: Path | None) -> None:
    spec = yaml.safe_load(resolve_space_path("clip_m").read_text())
    spec["fixed"].pop("mi_estimator")
    spec["params"]["mi_estimator"] = {"grid": ["histogram", "ksg"]}
    with tempfile.TemporaryDirectory() as tmp:
        space = Path(tmp) / "clip_m.yaml"  # the experiment stays xmr/tune/clip_m
        space.write_text(yaml.safe_dump(spec, sort_keys=False))
        command = ["xmr", "tune", "--space", str(space), "--name", name,
                   "--storage", str(storage)]  # fmt: skip
        if tracking_uri:
            command += ["--tracking-uri", tracking_uri]
        if checkpoint:
            command += ["--set", f"checkpoint={checkpoint}"]
        print("$", " ".join(command), flush=True)
        subprocess.run(command, check=True)


def curve(name: str, tracking_uri: str | None) -> pd.DataFrame:
    runs, _ = sweep_runs(name, tracking_uri=tracking_uri)
    runs = runs[runs["status"] == "FINISHED"]
    frame = pd.DataFrame(
        {
            "estimator": runs["params.clip.mi_estimator"],
            "m": runs["params.clip.m"].astype(int),
            "bias_at_10": runs["metrics.test/bias_at_10"],
            "abs_bias_at_10": runs["metrics.test/bias_at_10"].abs(),
            "recall_t2i_at_1": runs["metrics.test/recall_t2i_at_1"],
            "recall_t2i_at_10": runs["metrics.test/recall_t2i_at_10"],
            "recall_i2t_at_10": runs["metrics.test/recall_i2t_at_10"],
        }
    )
    return frame.sort_values(["estimator", "m"]).reset_index(drop=True)


def plot(frame: pd.DataFrame, path: Path) -> None:
    fig = Figure(figsize=(11, 4))
    ax_bias, ax_recall = fig.subplots(1, 2)
    for estimator, rows in frame.groupby("estimator"):
        ax_bias.plot(rows["m"], rows["abs_bias_at_10"], "-o", label=f"{estimator} MI")
        ax_recall.plot(rows["m"], rows["recall_t2i_at_10"], "-o", label=f"R@10 ({estimator})")
        ax_recall.plot(rows["m"], rows["recall_t2i_at_1"], "--s", label=f"R@1 ({estimator})")
    ax_bias.set(xlabel="clipped dimensions m (of 128)", ylabel="|Bias@10| (test)",
                title="gender bias of neutral queries")  # fmt: skip
    ax_recall.set(xlabel="clipped dimensions m (of 128)", ylabel="text→image recall (test)",
                  title="the recall cost")  # fmt: skip
    for ax in (ax_bias, ax_recall):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("CLIP-clip on ToyWorld (xmr-tiny CLIP, MI on the train split)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", default="clip-m-toyworld")
    parser.add_argument("--tracking-uri", default=None)
    parser.add_argument("--storage", type=Path, default=Path("xmr-tune"))
    parser.add_argument("--plot", type=Path, default=BENCH / "clip_m_curve.png")
    parser.add_argument(
        "--checkpoint", type=Path, default=None, help="evaluate this model instead of training one"
    )
    args = parser.parse_args()
    run_sweep(args.name, args.tracking_uri, args.storage, args.checkpoint)
    frame = curve(args.name, args.tracking_uri)
    plot(frame, args.plot)
    print(f"wrote {args.plot}")
    print("| " + " | ".join(frame.columns) + " |")
    print("|" + "---|" * len(frame.columns))
    for row in frame.itertuples(index=False):
        cells = [f"{v:.3f}" if isinstance(v, float) else str(v) for v in row]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
