"""What a D′ build shows: the summary table, the sample grid and the MLflow run."""

from __future__ import annotations

import textwrap
import time
from io import BytesIO

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from rich.console import Console
from rich.table import Table

from xmr.data.errors import DataError
from xmr.data.images import decode_image, load_image
from xmr.data.synthetic import MANIFEST, read_parquet, synthetic_mode, synthetic_shards
from xmr.llm import LLMSpec
from xmr.removal.planning import box_mask
from xmr.storage import StoragePath
from xmr.synth.config import SynthOptions, SynthRuntime
from xmr.synth.output import PLAN
from xmr.synth.retry import PlanRetry, saved_retries
from xmr.synth.runner import SynthResult
from xmr.tracking import experiment_name, start_run

SAMPLES = "samples.png"


def print_summary(result: SynthResult, console: Console | None = None) -> None:
    """The end-of-build table: counts, errors per stage, time and where it went."""
    m = result.manifest
    table = Table(title="D′", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("planned", str(m["planned"]))
    table.add_row("written", str(m["written"]))
    table.add_row("errors", str(m["errors"]))
    for stage, count in m["counts"]["errors_by_stage"].items():
        if count:
            table.add_row(f"  {stage} errors", str(count))
    counts = m["counts"]
    if counts.get("transient_errors"):
        table.add_row("  transient (a rerun asks again)", str(counts["transient_errors"]))
    if counts.get("retried"):
        table.add_row("retried (recovered)", f"{counts['retried']} ({counts['recovered']})")
    table.add_row("shards (resumed)", f"{counts['shards']} ({counts['shards_resumed']})")
    table.add_row("rows this run", str(counts["rows_this_run"]))
    for name, seconds in m["timings_s"].items():
        table.add_row(f"time {name}", f"{seconds:.1f} s")
    for name, seconds in m["busy_s"].items():
        table.add_row(f"busy {name} (all actors)", f"{seconds:.1f} s")
    if m["rows_per_second"]:
        table.add_row("rows / s", f"{m['rows_per_second']:.1f}")
    for name, value in m.get("statistics", {}).items():  # BiAug: the paper's table 1
        table.add_row(name.replace("_", " "), str(value))
    if m.get("mode") == "biaug":
        table.add_row("dropped proposals, rejected rows", f"{counts['reasons']} (reasons.parquet)")
    console = console or Console()
    console.print(table)
    console.print(f"D′ written to {result.out}", soft_wrap=True, markup=False, highlight=False)


def _sample_rows(out: StoragePath, count: int, seed: int) -> list[dict]:
    """``count`` written rows chosen with ``seed``, with their source image paths."""
    shards = synthetic_shards(out)
    if not shards:
        return []
    keys = [(s, k) for s in shards for k in read_parquet(s, columns=["key"])["key"].to_pylist()]
    rng = np.random.default_rng(seed)
    chosen = sorted(rng.choice(len(keys), size=min(count, len(keys)), replace=False))
    wanted: dict[StoragePath, set[str]] = {}
    for i in chosen:
        wanted.setdefault(keys[i][0], set()).add(keys[i][1])
    plan = read_parquet(out / PLAN, columns=["key", "path"]).to_pydict()
    paths = dict(zip(plan["key"], plan["path"], strict=True))
    for retry in saved_retries(out):  # groups a rerun planned again
        paths.update(retry_paths(retry))
    rows = []
    for shard, shard_keys in wanted.items():
        for row in read_parquet(shard, filters=[("key", "in", sorted(shard_keys))]).to_pylist():
            rows.append({**row, "path": paths[row["key"]]})
    return rows


def retry_paths(retry: PlanRetry) -> dict[str, str]:
    """Plan key -> source image path of the units a plan retry added."""
    units = retry.units.to_pydict()
    return dict(zip(units["key"], units["path"], strict=True))


def _biaug_sample_groups(out: StoragePath, count: int, seed: int) -> list[tuple[dict, dict, str]]:
    """``count`` written hard-negative pairs chosen with ``seed``: (positive, negative, source
    image path) each."""
    pairs: dict[str, dict[str, dict]] = {}
    for shard in synthetic_shards(out):
        for row in read_parquet(shard).to_pylist():
            pairs.setdefault(row["group_id"], {})[row["role"]] = row
    complete = sorted(g for g, roles in pairs.items() if len(roles) == 2)
    if not complete:
        return []
    rng = np.random.default_rng(seed)
    chosen = sorted(rng.choice(len(complete), size=min(count, len(complete)), replace=False))
    plan = read_parquet(out / PLAN, columns=["key", "path"]).to_pydict()
    paths = dict(zip(plan["key"], plan["path"], strict=True))
    for retry in saved_retries(out):  # groups a rerun planned again
        paths.update(retry_paths(retry))
    return [
        (pairs[complete[i]]["positive"], pairs[complete[i]]["negative"], paths[complete[i]])
        for i in chosen
    ]


def _save_figure(fig: Figure, path: StoragePath) -> StoragePath:
    """Save ``fig`` at ``path`` (its format from the suffix), locally or in an object store."""
    image = BytesIO()
    fig.savefig(image, format=path.suffix.lstrip(".") or "png", dpi=90)
    path.write_bytes(image.getvalue())
    return path


def _save_biaug_grid(
    out: StoragePath, path: StoragePath, count: int, seed: int
) -> StoragePath | None:
    """source (box outlined) | positive | hard negative, with their captions."""
    groups = _biaug_sample_groups(out, count, seed)
    if not groups:
        return None
    fig = Figure(figsize=(10, 3.2 * len(groups)))
    axes = fig.subplots(len(groups), 3, squeeze=False)
    for (ax_src, ax_pos, ax_neg), (positive, negative, source) in zip(axes, groups, strict=True):
        for ax in (ax_src, ax_pos, ax_neg):
            ax.axis("off")
        try:
            ax_src.imshow(load_image(source))
        except DataError as exc:
            ax_src.text(0.5, 0.5, f"unreadable:\n{exc}", ha="center", va="center", fontsize=7)
        x, y, w, h = positive["box"]
        ax_src.add_patch(Rectangle((x, y), w, h, fill=False, edgecolor="red", linewidth=1.5))
        ax_src.set_title(textwrap.shorten(positive["source_caption"], 60), fontsize=8)
        ax_pos.imshow(decode_image(positive["image"]))
        ax_pos.set_title(textwrap.shorten(f"+ {positive['caption']}", 60), fontsize=8,
                         color="green")  # fmt: skip
        ax_neg.imshow(decode_image(negative["image"]))
        ax_neg.set_title(textwrap.shorten(f"− {negative['caption']}", 60), fontsize=8,
                         color="red")  # fmt: skip
    fig.suptitle("BiAug D′ samples: source (edited box) | positive | hard negative")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / (3.2 * len(groups))))
    return _save_figure(fig, path)


def save_sample_grid(
    out: StoragePath, path: StoragePath, *, count: int = 6, seed: int = 0
) -> StoragePath | None:
    """original | mask | filled, with the caption before and after, for ``count`` rows
    (BiAug builds: source | positive | hard negative, for ``count`` pairs), saved at ``path``
    (a local path or an object store's)."""
    if synthetic_mode(out) == "biaug":
        return _save_biaug_grid(out, path, count, seed)
    rows = _sample_rows(out, count, seed)
    if not rows:
        return None
    fig = Figure(figsize=(10, 3.2 * len(rows)))
    axes = fig.subplots(len(rows), 3, squeeze=False)
    for (ax_src, ax_mask, ax_new), row in zip(axes, rows, strict=True):
        for ax in (ax_src, ax_mask, ax_new):
            ax.axis("off")
        try:
            ax_src.imshow(load_image(row["path"]))
        except DataError as exc:
            ax_src.text(0.5, 0.5, f"unreadable:\n{exc}", ha="center", va="center", fontsize=7)
        ax_mask.imshow(box_mask(row["removed_boxes"], row["width"], row["height"]), cmap="gray")
        ax_new.imshow(decode_image(row["image"]))
        ax_src.set_title(textwrap.shorten(row["source_caption"], 60), fontsize=8)
        ax_mask.set_title(f"removed: {', '.join(row['removed_classes'])}", fontsize=8, color="red")
        ax_new.set_title(textwrap.shorten(f"→ {row['caption']}", 60), fontsize=8, color="green")
    fig.suptitle("D′ samples: original | removed region | synthetic (caption before → after)")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.3 / (3.2 * len(rows))))
    return _save_figure(fig, path)


def log_to_mlflow(
    result: SynthResult,
    options: SynthOptions,
    runtime: SynthRuntime,
    llm: LLMSpec | None = None,
    *,
    experiment: str | None = None,
    parent_run_id: str | None = None,
) -> str:
    """One run in ``experiment`` (default ``xmr/synth/<dataset>``), nested under
    ``parent_run_id`` when given (a job's step): params, counts, throughput, manifest and the
    sample grid (BiAug: also the LLM and the paper's table-1 statistics). Returns the run id.
    No API key is logged: the LLM is named by backend and model only."""
    m = result.manifest
    with start_run(
        experiment or experiment_name("synth", options.shared.dataset),
        run_name=runtime.run_name,
        tracking_uri=runtime.tracking_uri,
        started=time.time() - m["timings_s"].get("total", 0.0),  # the build's start
        tags={"xmr.command": "synth", "xmr.config_hash": m["config_hash"],
              "xmr.synth_mode": options.mode},
        parent_run_id=parent_run_id,
    ) as run:  # fmt: skip
        params = {f"synth.{k}": v for k, v in options.to_dict().items()}
        params["synth.out"] = str(result.out)
        if options.mode == "biaug" and llm is not None:
            params.update({"synth.llm": llm.backend, "synth.llm_model": llm.model})
        run.log_params({k: "none" if v is None else v for k, v in params.items()})
        metrics = {"planned": m["planned"], "written": m["written"], "errors": m["errors"]}
        metrics.update({f"errors/{k}": v for k, v in m["counts"]["errors_by_stage"].items()})
        for name, key in (
            ("transient", "transient_errors"),
            ("retried", "retried"),
            ("recovered", "recovered"),
        ):
            metrics[f"errors/{name}"] = m["counts"].get(key, 0)
        metrics.update({f"time/{k}": v for k, v in m["timings_s"].items()})
        metrics.update({f"busy/{k}": v for k, v in m["busy_s"].items()})
        if m["rows_per_second"]:
            metrics["rows_per_second"] = m["rows_per_second"]
        metrics.update(
            {f"biaug/{k}": v for k, v in m.get("statistics", {}).items() if not isinstance(v, bool)}
        )
        run.log_metrics({k: float(v) for k, v in metrics.items()})
        run.log_artifact(result.out / MANIFEST)
        if (result.out / SAMPLES).is_file():
            run.log_artifact(result.out / SAMPLES)
        return run.run_id
