"""CLIP-clip on ToyWorld: |Bias@10| and recall as the number of clipped dimensions m grows.

The gender paper's figure 4 for our world. Runs the shipped ``clip_m`` space with both MI
estimators swept (``clip_m``'s base model, or ``--checkpoint``: a tiny CLIP trained on the
default ToyWorld, whose train split plants gender with cups and bicycles; MI estimated on the
train split; recall scored on test, Bias@10 on the gender split, overall and per linked class),
then writes a markdown table (every metric with its 95 % bootstrap interval, and Bias@10's
paired change from m = 0) and ``bench/clip_m_curve.png`` from the sweep's MLflow runs::

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

from xmr.compare.paired import paired_comparison
from xmr.compare.runs import sweep_runs
from xmr.compare.verdict import change_text
from xmr.tune.space import resolve_space_path

BENCH = Path(__file__).resolve().parent
CURVE_METRICS = ["test/bias_at_10", "test/recall_t2i_at_1", "test/recall_t2i_at_10",
                 "test/recall_i2t_at_10"]  # fmt: skip


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
    """One row per finished trial (by estimator, then m): the run id, Bias@10 overall and per
    gender-linked class, and recall, each metric with its ``_ci_low``/``_ci_high`` columns."""
    runs, _ = sweep_runs(name, tracking_uri=tracking_uri)
    runs = runs[runs["status"] == "FINISHED"]
    per_class = sorted(
        c.removeprefix("metrics.")
        for c in runs.columns
        if c.startswith("metrics.test/bias_at_10_") and "_ci_" not in c
    )
    frame = pd.DataFrame(
        {
            "run_id": runs["run_id"],
            "estimator": runs["params.clip.mi_estimator"],
            "m": runs["params.clip.m"].astype(int),
        }
    )
    for metric in [*CURVE_METRICS, *per_class]:
        for column in (metric, f"{metric}_ci_low", f"{metric}_ci_high"):
            frame[column] = runs.get(f"metrics.{column}")
    frame["abs_bias_at_10"] = frame["test/bias_at_10"].abs()
    return frame.sort_values(["estimator", "m"]).reset_index(drop=True)


def changes_from_unclipped(frame: pd.DataFrame, tracking_uri: str | None) -> pd.Series:
    """Per trial, Bias@10's paired change from the same estimator's m = 0 trial with its 95 %
    bootstrap interval over the same queries (``xmr compare``), as ``+0.050 [+0.010, +0.090]*``
    (``*``: the interval excludes 0); empty for m = 0."""
    cells = []
    for row in frame.itertuples():
        base = frame[(frame["estimator"] == row.estimator) & (frame["m"] == 0)]
        if row.m == 0 or base.empty:
            cells.append("")
            continue
        change = paired_comparison(
            base["run_id"].iloc[0], row.run_id, ["test/bias_at_10"], tracking_uri=tracking_uri
        ).frame.iloc[0]
        cells.append(
            change_text(change["difference"], change["ci_low"], change["ci_high"], mark=True)
        )
    return pd.Series(cells, index=frame.index)


def table(frame: pd.DataFrame, changes: pd.Series) -> str:
    """The curve as Markdown: each metric ``value [low, high]``, and Bias@10's paired change."""
    metrics = [c for c in frame.columns if c.startswith("test/") and "_ci_" not in c]
    headers = ["estimator", "m", *(m.removeprefix("test/").replace("_at_", "@") for m in metrics)]
    lines = ["| " + " | ".join([*headers, "Bias@10 − m=0 (paired)"]) + " |"]
    lines.append("|---|---:|" + "---:|" * len(metrics) + "---|")
    for index, row in frame.iterrows():
        cells = [row["estimator"], str(row["m"])]
        for metric in metrics:
            low, high = row[f"{metric}_ci_low"], row[f"{metric}_ci_high"]
            interval = "" if pd.isna(low) else f" [{low:+.3f}, {high:+.3f}]"
            cells.append(f"{row[metric]:+.3f}{interval}")
        lines.append("| " + " | ".join([*cells, changes[index]]) + " |")
    legend = (
        "[low, high]: 95 % bootstrap interval over the test queries (Bias@10: the gender split's "
        "neutral captions); * the paired interval excludes 0"
    )
    return "\n".join([*lines, "", legend])


def plot(frame: pd.DataFrame, path: Path) -> None:
    """Left: Bias@10 overall and per linked class against m with 95 % bands (histogram MI; ksg's
    overall curve dashed); right: text->image recall against m."""
    fig = Figure(figsize=(11, 4))
    ax_bias, ax_recall = fig.subplots(1, 2)
    biases = [c for c in frame.columns if c.startswith("test/bias_at_10") and "_ci_" not in c]
    for estimator, rows in frame.groupby("estimator"):
        for metric in biases if estimator == "histogram" else biases[:1]:
            label = metric.removeprefix("test/bias_at_10").lstrip("_") or "all queries"
            style = "-o" if estimator == "histogram" else "--"
            line = ax_bias.plot(rows["m"], rows[metric], style, label=f"{label} ({estimator})")
            low, high = rows[f"{metric}_ci_low"], rows[f"{metric}_ci_high"]
            if low.notna().all():
                ax_bias.fill_between(rows["m"], low, high, color=line[0].get_color(), alpha=0.15)
        ax_recall.plot(rows["m"], rows["test/recall_t2i_at_10"], "-o", label=f"R@10 ({estimator})")
        ax_recall.plot(rows["m"], rows["test/recall_t2i_at_1"], "--s", label=f"R@1 ({estimator})")
    ax_bias.axhline(0, color="black", linewidth=0.8)
    ax_bias.set(xlabel="clipped dimensions m (of 128)", ylabel="Bias@10 (+ men, − women)",
                title="gender bias of neutral queries, 95 % CI")  # fmt: skip
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
    print(table(frame, changes_from_unclipped(frame, args.tracking_uri)))


if __name__ == "__main__":
    sys.exit(main())
