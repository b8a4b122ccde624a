"""``xmr eval --benchmark aro|sugarcrepe|toyworld-binding``: score a model on a benchmark.

The benchmark's items (:mod:`xmr.benchmarks`: an image or a box of it, the true caption and its
negatives; or a caption, its true image and the negative ones) are encoded once with the
encoding stage of ``xmr eval`` (the :class:`~xmr.eval.encode.Encoder` handed in: Ray actors,
or a model in memory); an item's score for a candidate is the cosine similarity of the two
L2-normalised embeddings, and the benchmark's rules turn the per-item verdicts (true candidate
strictly above every negative) into its metrics.

Bad rows are decided per item and never lost: every row of the benchmark's files is scored or
skipped with its reason (:data:`~xmr.benchmarks.SKIP_REASONS`), ``items = scored + skipped``.
The readers skip, in the driver before any encoder starts, the items whose image is missing or
named outside the images folder and those with an empty caption; an image whose bytes cannot be
decoded comes back from the encoding stage as that row's error and its items are skipped too.
With ``strict`` the first bad row stops the run instead: one :class:`~xmr.data.DataError` line
naming the file and the item (from the readers before Ray starts, or after encoding for an
unreadable image).

Each metric comes with a seeded percentile bootstrap interval over the items (``config.bootstrap``
resamples at ``config.confidence``; none for 0 resamples): the items of one subset are
resampled together for all its metrics, within each group (relation, attribute pair,
category, binding side and direction), so that a macro accuracy keeps every group's weight
(:meth:`~xmr.benchmarks.BenchmarkScore.item_values`). The per-item values, keyed by item id and
true caption, are what ``xmr compare`` pairs for two benchmark runs.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from xmr.benchmarks import (
    ARO_FILES,
    SKIP_REASONS,
    UNREADABLE_IMAGE,
    BenchmarkData,
    BenchmarkScore,
    CaptionContrastItem,
    ContrastItem,
    GroupAccuracy,
    SkippedItem,
    aro_subsets,
    read_aro,
    read_binding,
    read_sugarcrepe,
    score_aro,
    score_binding,
    score_sugarcrepe,
    true_caption_wins,
)
from xmr.compare.bootstrap import Interval
from xmr.compare.per_query import QueryValues
from xmr.data import DataError
from xmr.eval.config import EvalConfig
from xmr.eval.encode import EncoderFactory
from xmr.eval.intervals import interval_metrics, intervals_of
from xmr.eval.protocol import ImageQuery
from xmr.storage import is_uri

BENCHMARKS = ("aro", "sugarcrepe", "toyworld-binding")
"""The values of ``--benchmark``."""


@dataclass(frozen=True)
class BenchmarkResult:
    """A model's scores on one benchmark.

    Attributes:
        benchmark: one of :data:`BENCHMARKS`.
        subsets: what was scored (the ARO subsets; ``("sugarcrepe",)``; ``("binding",)``).
        metrics: MLflow metric name -> accuracy in [0, 1] (higher is better).
        groups: per subset, every group's accuracy (relations, attribute pairs, categories).
        counts: ``items`` (every row of the benchmark's files: an item to score or a skipped
            one), ``scored``, ``skipped`` (``items - scored``) and, of those, ``unreadable``
            (images the encoding stage could not decode).
        missing: benchmark files that were absent (named to the user).
        skipped: every row not scored, with its reason and a line naming its file and item.
        timings: seconds for ``read_s``, ``encode_s`` (of which ``encoder_wait_s`` waiting for
            the encoder to start; its model build took ``encoder_setup_s``), ``total_s``.
        device: where the model ran.
        intervals: each metric's bootstrap interval (none when ``config.bootstrap`` is 0).
        per_query: per subset, its scored items (key ``"<item id>:<true caption>"``, stratum
            the item's group) and each metric's per-item values, whose mean is the metric.
    """

    benchmark: str
    subsets: tuple[str, ...]
    metrics: dict[str, float]
    groups: dict[str, dict[str, GroupAccuracy]]
    counts: dict[str, int]
    missing: tuple[str, ...]
    skipped: list[SkippedItem]
    timings: dict[str, float]
    device: str
    intervals: dict[str, Interval] = field(default_factory=dict)
    per_query: dict[str, QueryValues] = field(default_factory=dict)

    def params(self, config: EvalConfig) -> dict[str, str]:
        """Namespaced MLflow params: the model's and the benchmark's."""
        return {
            **config.model.params(),
            "benchmark.name": self.benchmark,
            "benchmark.subsets": ",".join(self.subsets),
            "benchmark.data": str(config.data),
            "eval.batch_size": str(config.batch_size),
            "eval.device": self.device,
            "eval.seed": str(config.seed),
            "eval.bootstrap": str(config.bootstrap),
            "eval.confidence": str(config.confidence),
        }

    def skip_counts(self) -> dict[str, int]:
        """How many rows each reason skipped (:func:`skip_counts`)."""
        return skip_counts(self.skipped)

    def interval_metrics(self) -> dict[str, float]:
        """The intervals as MLflow metrics: ``{name}_ci_low`` and ``{name}_ci_high``."""
        return interval_metrics(self.intervals)

    def to_json(self, config: EvalConfig) -> dict[str, Any]:
        """What ``--output`` writes: ``{"config", "metrics", "intervals", "groups", "counts",
        "missing", "skipped_by_reason", "skipped", "timings"}``; ``skipped`` lists each
        unscored row as ``{"item", "reason", "detail"}``."""
        return {
            "config": self.params(config),
            "metrics": self.metrics,
            "intervals": {name: i.to_json() for name, i in self.intervals.items()},
            "groups": {
                subset: {
                    name: {"accuracy": g.accuracy, "count": g.count, "excluded": g.excluded}
                    for name, g in groups.items()
                }
                for subset, groups in self.groups.items()
            },
            "counts": self.counts,
            "missing": list(self.missing),
            "skipped_by_reason": self.skip_counts(),
            "skipped": [item._asdict() for item in self.skipped],
            "timings": self.timings,
        }


def read_benchmark(
    benchmark: str,
    data: Path,
    *,
    subset: str = "all",
    images: Path | None = None,
    seed: int = 0,
    strict: bool = False,
) -> dict[str, BenchmarkData]:
    """The items of ``benchmark`` in ``data``, by subset (SugarCrepe: one, ``"sugarcrepe"``;
    the ToyWorld binding test: one, ``"binding"``, read from the world folder ``data``).

    ARO with ``subset="all"`` reads the subsets whose file is in ``data`` and names the others
    as missing (in the first subset's ``missing``); a named subset must be there. Bad rows (a
    missing image or one named outside the images folder, an empty caption) are in each
    subset's ``skipped``, or with ``strict`` raise at the first.

    Raises:
        ValueError: an unknown benchmark or subset (naming the flag), or no ARO file at all;
            ``DataError`` for a malformed or missing benchmark file (naming it), and with
            ``strict`` for the first bad row (naming its file and item).
    """
    if benchmark == "sugarcrepe":
        return {"sugarcrepe": read_sugarcrepe(data, images, strict=strict)}
    if benchmark == "toyworld-binding":
        return {"binding": read_binding(data)}
    if benchmark != "aro":
        raise ValueError(f"--benchmark must be one of {', '.join(BENCHMARKS)}, got {benchmark!r}")
    names = aro_subsets(subset)
    present = [n for n in names if subset != "all" or (data / ARO_FILES[n]).is_file()]
    if not present:
        expected = ", ".join(ARO_FILES[n] for n in names)
        raise ValueError(f"{data}: no ARO file ({expected})")
    read = {name: read_aro(name, data, seed=seed, strict=strict) for name in present}
    absent = tuple(ARO_FILES[n] for n in names if n not in read)
    if absent:
        first = present[0]
        read[first] = replace(read[first], missing=read[first].missing + absent)
    return read


def skip_counts(skipped: list[SkippedItem]) -> dict[str, int]:
    """How many of ``skipped`` each reason skipped, in :data:`~xmr.benchmarks.SKIP_REASONS`
    order (reasons that skipped none are left out)."""
    counted = Counter(item.reason for item in skipped)
    return {reason: counted[reason] for reason in SKIP_REASONS if counted[reason]}


def skip_summary(skipped: list[SkippedItem]) -> str:
    """``"<n> (<reason>: <count>, ...)"``, reasons in :data:`~xmr.benchmarks.SKIP_REASONS`
    order.

    >>> skip_summary([SkippedItem("a/1", "empty caption", "..."),
    ...               SkippedItem("a/2", "image not found", "..."),
    ...               SkippedItem("a/3", "empty caption", "...")])
    '3 (image not found: 1, empty caption: 2)'
    """
    reasons = ", ".join(f"{reason}: {n}" for reason, n in skip_counts(skipped).items())
    return f"{len(skipped)} ({reasons})" if reasons else str(len(skipped))


def run_benchmark(
    config: EvalConfig,
    benchmark: str,
    *,
    encoder: EncoderFactory,
    subset: str = "all",
    images: Path | None = None,
    strict: bool = False,
) -> BenchmarkResult:
    """Score ``config.model`` on ``benchmark`` read from ``config.data``, encoded by the encoder
    ``encoder`` makes (:func:`~xmr.eval.encode.ray_encoder`: Ray actors;
    :func:`~xmr.eval.encode.local_encoder`: a model in this process).

    Every check that needs no cluster (the model spec, the files, each item's image path and
    captions) comes before Ray starts. Bad rows are skipped with their reasons (see the module
    docstring); ``strict``: the first one raises instead.

    Raises:
        DataError: with ``strict``, the first bad row: one line naming its file and item.
        ValueError: no ``--data``, an object store for a local benchmark, no item left to score
            (the skips summed up by reason).
    """
    if config.data is None:
        raise ValueError(f"--benchmark {benchmark} needs --data, the benchmark's folder")
    if benchmark != "toyworld-binding" and is_uri(config.data):
        raise ValueError(
            f"--data {config.data}: --benchmark {benchmark} reads its files from a local or "
            "shared filesystem, not an object store"
        )
    made = encoder(config)  # checks the model spec; starts nothing
    start = time.perf_counter()
    subsets = read_benchmark(
        benchmark, config.data, subset=subset, images=images, seed=config.seed, strict=strict
    )
    items = [item for read in subsets.values() for item in read.items]
    caption_items = [item for read in subsets.values() for item in read.caption_items]
    skipped = [skip for read in subsets.values() for skip in read.skipped]
    if not items and not caption_items:
        raise ValueError(
            f"{config.data}: no {benchmark} item to score"
            + (f"; skipped {skip_summary(skipped)}, e.g. {skipped[0].detail}" if skipped else "")
        )
    timings = {"read_s": time.perf_counter() - start}

    t0 = time.perf_counter()
    # the rows each item's image and captions take in the encoder's inputs: per item its image
    # and its captions, per caption item its images and its caption
    queries: list[ImageQuery] = []
    texts: list[str] = []
    item_rows: list[tuple[int, list[int]]] = []
    for item in items:
        item_rows.append((len(queries), list(range(len(texts), len(texts) + len(item.captions)))))
        queries.append(ImageQuery(item.image, crop=item.box))
        texts += item.captions
    caption_rows: list[tuple[list[int], int]] = []
    for item in caption_items:
        caption_rows.append(
            (list(range(len(queries), len(queries) + len(item.images))), len(texts))
        )
        queries += [ImageQuery(image) for image in item.images]
        texts.append(item.caption)
    with made as encoder:
        image_emb, image_errors, text_emb = encoder.encode(queries, texts)  # repeats once
    timings["encode_s"] = time.perf_counter() - t0
    timings.update(encoder.timings)

    # An image the encoding stage could not decode is its row's error, not an exception:
    # the items that use it are skipped, the rest scored.
    scores = [text_emb[captions] @ image_emb[image] for image, captions in item_rows]
    item_errors = [image_errors[image] for image, _ in item_rows]
    caption_scores = [image_emb[images] @ text_emb[caption] for images, caption in caption_rows]
    caption_errors = [
        "; ".join(image_errors[r] for r in images if image_errors[r]) for images, _ in caption_rows
    ]
    unreadable = [
        SkippedItem(item.item_id, UNREADABLE_IMAGE, f"item {item.item_id!r}: {error}")
        for item, error in zip([*items, *caption_items], item_errors + caption_errors, strict=True)
        if error
    ]
    if strict and unreadable:
        raise DataError(unreadable[0].detail)
    rows = len(items) + len(caption_items) + len(skipped)  # every row: an item or a skip
    skipped += unreadable
    metrics: dict[str, float] = {}
    groups: dict[str, dict[str, GroupAccuracy]] = {}
    per_query: dict[str, QueryValues] = {}
    first = first_caption = 0
    for name, read in subsets.items():
        readable = [i for i in range(first, first + len(read.items)) if not item_errors[i]]
        first += len(read.items)
        span = range(first_caption, first_caption + len(read.caption_items))
        first_caption += len(read.caption_items)
        readable_captions = [j for j in span if not caption_errors[j]]
        if not readable and not readable_captions:
            continue
        kept = [items[i] for i in readable]
        correct = true_caption_wins([scores[i] for i in readable])
        kept_captions = [caption_items[j] for j in readable_captions]
        caption_correct = true_caption_wins([caption_scores[j] for j in readable_captions])
        if benchmark == "sugarcrepe":
            score = score_sugarcrepe(kept, correct)
        elif benchmark == "toyworld-binding":
            score = score_binding(kept, correct, kept_captions, caption_correct)
        else:
            score = score_aro(name, kept, correct)
        metrics.update(score.metrics)
        groups[name] = score.groups
        per_query[name] = _item_values(
            score, [*kept, *kept_captions], np.concatenate([correct, caption_correct])
        )
    # One stratified draw of each subset's items for all its metrics; the value as scored (the
    # per-item values average to it up to rounding).
    intervals = {
        name: replace(interval, value=metrics[name])
        for name, interval in intervals_of(
            per_query, resamples=config.bootstrap, confidence=config.confidence, seed=config.seed
        ).items()
    }
    timings["total_s"] = time.perf_counter() - start
    return BenchmarkResult(
        benchmark,
        tuple(subsets),
        metrics,
        groups,
        {"items": rows, "scored": rows - len(skipped), "unreadable": len(unreadable),
         "skipped": len(skipped)},
        tuple(m for read in subsets.values() for m in read.missing),
        skipped,
        timings,
        encoder.device,
        intervals,
        per_query,
    )  # fmt: skip


def _item_values(
    score: BenchmarkScore,
    items: list[ContrastItem | CaptionContrastItem],
    correct: np.ndarray,
) -> QueryValues:
    """One subset's scored items as a query set: each keyed by its id and true caption (so that
    another benchmark file with the same ids is told apart), its group as its stratum, and
    each metric's per-item values."""
    keys = [
        f"{item.item_id}:{item.captions[0] if isinstance(item, ContrastItem) else item.caption}"
        for item in items
    ]
    strata = [item.group for item in items]
    return QueryValues(keys, score.item_values(items, correct), strata)
