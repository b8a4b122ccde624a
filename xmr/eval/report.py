"""What a person sees of an evaluation: a terminal table, a JSON file, an example grid, MLflow."""

from __future__ import annotations

import json
import tempfile
import textwrap
import time
from pathlib import Path

from matplotlib.figure import Figure
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from xmr.compare.per_query import PER_QUERY_FILE, write_per_query
from xmr.data.errors import DataError
from xmr.eval.benchmark import BenchmarkResult, skip_summary
from xmr.eval.config import EvalConfig
from xmr.eval.encode import NATURAL
from xmr.eval.score import EvalResult, RetrievalExample
from xmr.metrics import metric_direction
from xmr.storage import StoragePath
from xmr.tracking import TrackedRun, experiment_name, start_run

_GROUPS = (
    ("Recall i2t", "recall_i2t_at_"),
    ("Recall t2i", "recall_t2i_at_"),
    ("ODmAP", "odmap_at_"),
    ("Bias", "bias_at_"),
    ("Gendered share", "gendered_share_at_"),
    ("Male share", "male_share_at_"),
)
_RANKS = (("MedR i2t", "medr_i2t"), ("MedR t2i", "medr_t2i"))
"""Metrics without a K (ranks, shown in the first column), after the recall rows."""


def metrics_table(result: EvalResult, ks: tuple[int, ...]) -> Table:
    """One row per metric family, one column per K, each labelled with its direction
    (:func:`~xmr.metrics.metric_direction`: ↑ higher is better, →0 closer to 0, · a
    diagnostic, ↓ lower). Recall and ODmAP in %; signed metrics (Bias@K, in [-1, 1]) as they
    are, with their sign; Bias@K's diagnostics (shares in [0, 1]) as they are; MedR, which has
    no K, in ranks in the first column. Each value is followed by its bootstrap interval,
    ``[low, high]``, when there is one. Bias@K of the scored split's own images
    (``{split}/natural/...``, when Bias@K ranks another split) follows, "(natural)"."""
    table = Table(title="xmr eval")
    table.add_column("metric")
    for k in ks:
        table.add_column(f"@{k}", justify="right")
    for ranking in ("", NATURAL):
        for label, stem in _GROUPS:
            names = {
                k: n
                for n in result.metrics
                for k in ks
                if n.endswith(f"/{stem}{k}") and _ranking(n) == ranking
            }
            if names:
                _add_rows(table, result, ks, names, f"{label} ({ranking})" if ranking else label)
            if not ranking and stem == "recall_t2i_at_":
                _add_rank_rows(table, result, len(ks))
    return table


def _add_rank_rows(table: Table, result: EvalResult, columns: int) -> None:
    """A row for each metric of :data:`_RANKS` that ``result`` has: its value in ranks (1 is
    best) with its interval, in the first of ``columns``."""
    for label, stem in _RANKS:
        for name in [n for n in result.metrics if n.endswith(f"/{stem}")]:
            symbol = metric_direction(name).symbol
            table.add_row(f"{label} {symbol}", _cell(result, name), *[""] * (columns - 1))


def _ranking(name: str) -> str:
    """The Bias@K ranking a metric belongs to: ``"natural"`` for ``test/natural/bias_at_10``,
    else ``""``."""
    parts = name.split("/")
    return NATURAL if len(parts) > 2 and parts[-2] == NATURAL else ""


def _add_rows(
    table: Table, result: EvalResult, ks: tuple[int, ...], names: dict[int, str], label: str
) -> None:
    """The row of the metrics ``names`` (K -> name), then one per class that has its own."""
    stem = names[min(names)].rsplit("/", 1)[-1]
    direction = metric_direction(stem)
    if direction.signed:
        fmt, scale = "{:+.3f}", 1.0
    elif not direction.judges:  # a share in [0, 1]
        fmt, scale = "{:.3f}", 1.0
    else:
        fmt, scale = "{:.1f}", 100.0

    def cell(name: str) -> str:
        return _cell(result, name, fmt, scale)

    table.add_row(
        f"{label} {direction.symbol}", *(cell(names[k]) if k in names else "" for k in ks)
    )
    for suffix in _class_suffixes(result.metrics, names):
        per_class = {k: f"{names[k]}_{suffix}" for k in names}
        cells = (cell(per_class[k]) if per_class.get(k) in result.metrics else "" for k in ks)
        table.add_row(f"  {suffix.replace('_', ' ')}", *cells)


def _cell(result: EvalResult, name: str, fmt: str = "{:.1f}", scale: float = 1.0) -> str:
    """Metric ``name``'s value times ``scale`` in ``fmt``, then its interval dimmed, if any."""
    text = fmt.format(result.metrics[name] * scale)
    interval = result.intervals.get(name)
    if interval is None:
        return text
    low, high = fmt.format(interval.low * scale), fmt.format(interval.high * scale)
    return f"{text} [dim]{escape(f'[{low}, {high}]')}[/dim]"


def _class_suffixes(metrics: dict[str, float], names: dict[int, str]) -> list[str]:
    """The classes with a metric of their own beside ``names`` (K -> name): ``cup`` for
    ``test/bias_at_10_cup`` beside ``test/bias_at_10``, in order."""
    suffixes = [
        metric.removeprefix(f"{name}_")
        for metric in metrics
        for name in names.values()
        if metric.startswith(f"{name}_") and "_ci_" not in metric
    ]
    return list(dict.fromkeys(suffixes))


def timing_text(timings: dict[str, float]) -> str:
    """Where an evaluation's seconds went, for its report.

    >>> timing_text({"prepare_s": 2.04, "encode_s": 9.1, "encoder_wait_s": 1.2,
    ...              "metrics_s": 0.5, "total_s": 11.6})
    '11.6 s: prepare 2.0 s, encode 9.1 s (1.2 s waiting for the encoder), metrics 0.5 s'
    """
    parts = []
    for key, label in (("prepare_s", "prepare"), ("read_s", "read"), ("encode_s", "encode"),
                       ("metrics_s", "metrics")):  # fmt: skip
        if key in timings:
            part = f"{label} {timings[key]:.1f} s"
            if key == "encode_s" and "encoder_wait_s" in timings:
                part += f" ({timings['encoder_wait_s']:.1f} s waiting for the encoder)"
            parts.append(part)
    return f"{timings['total_s']:.1f} s: " + ", ".join(parts)


def print_report(result: EvalResult, config: EvalConfig, console: Console | None = None) -> None:
    console = console or Console()
    console.print(metrics_table(result, config.ks))
    if result.intervals:
        console.print(
            f"[dim]{escape('[low, high]')}: {config.confidence:.0%} bootstrap intervals over "
            f"the queries ({config.bootstrap} resamples)[/dim]"
        )
    counts = ", ".join(f"{k}={v}" for k, v in result.counts.items())
    console.print(f"[dim]{counts}[/dim]")
    console.print(f"[dim]{timing_text(result.timings)}[/dim]")
    if result.bias_split not in (None, config.split):
        console.print(
            f"[dim]Bias@K ranks the {result.bias_split} split's images; (natural): the "
            f"{config.split} split's own images, person-less scenes among them[/dim]"
        )
    if result.clip is not None:
        clip = result.clip
        shown = ", ".join(map(str, clip.indices[:12])) + (" ..." if len(clip.indices) > 12 else "")
        console.print(
            f"CLIP-clip: dropped {len(clip.indices)} dims by {clip.estimator} MI on "
            f"{clip.mi_images} {clip.mi_split} images ({shown})"
        )
        if clip.mi_split == config.split:
            console.print(
                f"[yellow]warning[/yellow]: the MI was estimated on the scored split "
                f"({config.split}): its gender labels chose the dims, so Bias@K is optimistic"
            )
    for issue in result.skipped[:10]:
        console.print(f"[yellow]skipped[/yellow] {issue.item}: {issue.reason}")
    if len(result.skipped) > 10:
        console.print(f"[yellow]... and {len(result.skipped) - 10} more skipped items[/yellow]")


def save_example_grid(examples: list[RetrievalExample], path: Path) -> Path:
    """ODmAP queries with the removed classes (red) and their top captions (green = relevant)."""
    rows = max(1, len(examples))
    fig = Figure(figsize=(10, 2.4 * rows))
    axes = fig.subplots(rows, 2, width_ratios=(1, 3), squeeze=False)
    for ax_img, ax_txt in axes:
        ax_img.axis("off")
        ax_txt.axis("off")
    for (ax_img, ax_txt), ex in zip(axes, examples, strict=False):
        try:
            ax_img.imshow(ex.query.render())
        except DataError as exc:
            ax_img.text(0.5, 0.5, f"unreadable:\n{exc}", ha="center", va="center", fontsize=7)
        ax_img.set_title(f"removed: {', '.join(ex.removed)}", color="red", fontsize=9)
        ax_txt.text(0, 0.95, f"present: {', '.join(ex.present)}", fontsize=9, va="top")
        for i, (caption, ok) in enumerate(zip(ex.captions, ex.relevant, strict=True)):
            line = textwrap.shorten(f"{i + 1}. {caption}", width=80)
            color = "green" if ok else "red"
            ax_txt.text(0, 0.7 - 0.25 * i, line, fontsize=9, va="top", color=color)
    fig.suptitle("ODmAP queries: top retrieved captions (green = relevant, red = not)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def write_json(
    result: EvalResult | BenchmarkResult, config: EvalConfig, path: StoragePath
) -> StoragePath:
    """The result's JSON (``{"config", "metrics", ...}``) at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_json(config), indent=2) + "\n")
    return path


def log_to_mlflow(
    result: EvalResult,
    config: EvalConfig,
    *,
    tracking_uri: str | None = None,
    run_name: str | None = None,
    experiment: str | None = None,
    parent_run_id: str | None = None,
) -> str:
    """Log one evaluation as a run of ``experiment`` (default ``xmr/eval/<dataset>``), nested
    under ``parent_run_id`` when given (a job's step), starting when the evaluation did
    (``total_s`` ago); returns the run id."""
    with start_run(
        experiment or experiment_name("eval", config.dataset),
        run_name=run_name,
        tracking_uri=tracking_uri,
        tags={"xmr.command": "eval"},
        parent_run_id=parent_run_id,
        started=time.time() - result.timings.get("total_s", 0.0),  # the evaluation's start
    ) as run:
        log_result(run, result, config)
        return run.run_id


def log_result(
    run: TrackedRun, result: EvalResult, config: EvalConfig, *, examples: bool = True
) -> None:
    """Log an evaluation into ``run``: params, metrics and their intervals (``..._ci_low``,
    ``..._ci_high``), counts and timings, the metrics JSON, the per-query values
    (``per_query.parquet``), CLIP-clip's dimensions (``clip_dims.json``) and the ODmAP example
    grid."""
    run.log_params(result.params(config))
    run.log_metrics(result.metrics)
    run.log_metrics(result.interval_metrics())
    run.log_metrics({f"data/{k}": float(v) for k, v in result.counts.items()})
    run.log_metrics({f"time/{k}": v for k, v in result.timings.items()})
    with tempfile.TemporaryDirectory() as tmp:
        write_json(result, config, Path(tmp) / "metrics.json")
        run.log_artifact(Path(tmp) / "metrics.json")
        if result.per_query:  # what xmr compare RUN_A RUN_B pairs
            run.log_artifact(write_per_query(result.per_query, Path(tmp) / PER_QUERY_FILE))
        if result.clip is not None:
            clip_file = Path(tmp) / "clip_dims.json"
            clip_file.write_text(json.dumps(result.clip.to_json(), indent=2) + "\n")
            run.log_artifact(clip_file)
        if examples and result.examples:
            save_example_grid(result.examples, Path(tmp) / "odmap_examples.png")
            run.log_artifact(Path(tmp) / "odmap_examples.png")


def benchmark_table(result: BenchmarkResult) -> Table:
    """The benchmark's metrics (accuracy, higher is better) in %, each followed by its
    bootstrap interval, ``[low, high]``, when there is one."""
    table = Table(title=f"xmr eval --benchmark {result.benchmark}")
    table.add_column("metric")
    table.add_column("accuracy ↑", justify="right")
    for name, value in result.metrics.items():
        cell = f"{100 * value:.1f}"
        interval = result.intervals.get(name)
        if interval is not None:
            bounds = f"[{100 * interval.low:.1f}, {100 * interval.high:.1f}]"
            cell += f" [dim]{escape(bounds)}[/dim]"
        table.add_row(name, cell)
    return table


def print_benchmark(
    result: BenchmarkResult, config: EvalConfig, console: Console | None = None
) -> None:
    """The metrics table, the counts, the missing files and the unscored items: ``skipped: N``
    with the count of each reason, then the first 10 with the line naming their file and
    item (all of them in ``--output``)."""
    console = console or Console()
    console.print(benchmark_table(result))
    if result.intervals:
        console.print(
            f"[dim]{escape('[low, high]')}: {config.confidence:.0%} bootstrap intervals over "
            f"the items, resampled within each group ({config.bootstrap} resamples)[/dim]"
        )
    counts = ", ".join(f"{k}={v}" for k, v in result.counts.items())
    console.print(f"[dim]{counts}[/dim]")
    console.print(f"[dim]{timing_text(result.timings)}, on {result.device}[/dim]")
    if result.missing:
        console.print(f"not found, not scored: {', '.join(result.missing)}")
    if result.skipped:
        console.print(f"[yellow]skipped[/yellow]: {escape(skip_summary(result.skipped))}")
    for item in result.skipped[:10]:
        console.print(f"  {escape(item.detail)}", soft_wrap=True)
    if len(result.skipped) > 10:
        console.print(f"  ... and {len(result.skipped) - 10} more (see --output)")


def log_benchmark_to_mlflow(
    result: BenchmarkResult,
    config: EvalConfig,
    *,
    tracking_uri: str | None = None,
    run_name: str | None = None,
    experiment: str | None = None,
    parent_run_id: str | None = None,
) -> str:
    """Log one benchmark run to ``experiment`` (default ``xmr/eval/<benchmark>``), nested
    under ``parent_run_id`` when given (a job's step): params, metrics and their intervals
    (``..._ci_low``, ``..._ci_high``), counts, timings, the JSON and the per-item values
    (``per_query.parquet``, what ``xmr compare`` pairs); returns the run id."""
    with start_run(
        experiment or experiment_name("eval", result.benchmark),
        run_name=run_name,
        tracking_uri=tracking_uri,
        tags={"xmr.command": "eval", "xmr.benchmark": result.benchmark},
        parent_run_id=parent_run_id,
        started=time.time() - result.timings.get("total_s", 0.0),  # the benchmark's start
    ) as run:
        run.log_params(result.params(config))
        run.log_metrics(result.metrics)
        run.log_metrics(result.interval_metrics())
        run.log_metrics({f"data/{k}": float(v) for k, v in result.counts.items()})
        run.log_metrics({f"time/{k}": v for k, v in result.timings.items()})
        with tempfile.TemporaryDirectory() as tmp:
            run.log_artifact(write_json(result, config, Path(tmp) / "benchmark.json"))
            if result.per_query:
                run.log_artifact(write_per_query(result.per_query, Path(tmp) / PER_QUERY_FILE))
    return run.run_id
