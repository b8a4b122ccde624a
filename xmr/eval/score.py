"""The cheap half of ``xmr eval``: the papers' metrics of an encoded split, and :func:`evaluate`.

:func:`score` computes each metric group that the config asks for, one function each, from the
embeddings of an :class:`~xmr.eval.encode.EncodedSplit` (after CLIP-clip when ``clip_m > 0``):

- :func:`recall_scores`: Recall@K and MedR both ways on the split, after the family's pair
  re-ranking (BLIP's ITM over the top ``rerank_k``);
- :func:`odmap_scores`: ODmAP@K of the object-removed queries over the all-splits gallery, and
  a sample of them with their top captions for the example grid;
- :func:`bias_scores`: Bias@K of the gender-neutral caption queries over the images of the
  Bias@K split (a ToyWorld's gender split), overall and per linked class.

Each group also keeps its metrics' per-query values (a query's hit, rank, AP@k or Δ_K) by query set
(:class:`~xmr.compare.per_query.QueryValues`: i2t images, t2i captions, ODmAP queries, Bias@K
captions): :func:`score` turns each set into seeded percentile bootstrap intervals
(``config.bootstrap`` resamples at ``config.confidence``), and a paired comparison of two
evaluations resamples their differences (``xmr compare``).

:func:`evaluate` is :func:`~xmr.eval.encode.encode` followed by :func:`score`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from xmr.compare.bootstrap import Interval, metric_values
from xmr.compare.per_query import QueryValues
from xmr.data import DataIssue
from xmr.data.images import load_image
from xmr.eval.clip import ClippedDims, clipped_split
from xmr.eval.config import EvalConfig
from xmr.eval.encode import BiasRanking, EncodedSplit, EncoderFactory, encode
from xmr.eval.intervals import interval_metrics, intervals_of
from xmr.eval.protocol import ImageQuery, ODmAPSet
from xmr.metrics import (
    Ranking,
    first_positive_ranks,
    odmap_per_query,
    odmap_relevance,
    recall_hits,
    top_k_genders,
)
from xmr.models import RetrievalModel, create_model
from xmr.models.registry import default_rerank_k
from xmr.retrieval import positive_ranks, rerank, topk_similarity
from xmr.storage import StoragePath


@dataclass
class RetrievalExample:
    """One ODmAP query with its top retrieved captions, for the example grid."""

    query: ImageQuery
    removed: list[str]
    present: list[str]
    captions: list[str]
    relevant: list[bool]


@dataclass
class EvalResult:
    """Metrics (MLflow names), counts, skipped items and timings (seconds) of one evaluation.

    ``intervals``: each metric's bootstrap interval (none when ``config.bootstrap`` is 0);
    ``per_query``: query set (``i2t``, ``t2i``, ``odmap``, ``bias``, ``bias_<class>``, and
    ``natural_bias``, ``natural_bias_<class>`` when Bias@K ranks another split) -> its queries
    and their per-query values, whose means are the metrics. ``bias_split``: the split
    whose images Bias@K ranked (None: no Bias@K).
    """

    metrics: dict[str, float]
    counts: dict[str, int]
    skipped: list[DataIssue]
    timings: dict[str, float]
    data_root: StoragePath
    examples: list[RetrievalExample] = field(default_factory=list)
    clip: ClippedDims | None = None
    intervals: dict[str, Interval] = field(default_factory=dict)
    per_query: dict[str, QueryValues] = field(default_factory=dict)
    bias_split: str | None = None

    def params(self, config: EvalConfig) -> dict[str, str]:
        """``config.params()`` with the data root that was evaluated (and the split Bias@K
        ranked, ``data.bias_split``)."""
        params = {**config.params(), "data.root": str(self.data_root)}
        if self.bias_split is not None:
            params["data.bias_split"] = self.bias_split
        return params

    def interval_metrics(self) -> dict[str, float]:
        """The intervals as MLflow metrics: ``{name}_ci_low`` and ``{name}_ci_high``."""
        return interval_metrics(self.intervals)

    def to_json(self, config: EvalConfig) -> dict:
        return {
            "config": self.params(config),
            "metrics": self.metrics,
            "intervals": {name: i.to_json() for name, i in self.intervals.items()},
            "counts": self.counts,
            "skipped": [issue._asdict() for issue in self.skipped],
            "timings": self.timings,
            **({"clip": self.clip.to_json()} if self.clip else {}),
        }


@dataclass
class ScoringInputs:
    """What every metric group reads: an encoded split's embeddings, after CLIP-clip if any.

    ``image_emb`` ``[len(encoded.image_queries), D]`` and ``text_emb`` ``[T, D]`` are laid out
    as in :class:`~xmr.eval.encode.EncodedSplit`; ``ok_images`` (bool ``[len(records)]``) marks
    the split's images that encoded, which are the only ones ranked.
    """

    encoded: EncodedSplit
    config: EvalConfig
    image_emb: np.ndarray
    text_emb: np.ndarray
    ok_images: np.ndarray

    @property
    def split_images(self) -> np.ndarray:
        """``[n_ok, D]``: the embeddings of the split's images that encoded."""
        return self.image_emb[: len(self.ok_images)][self.ok_images]

    @property
    def prefix(self) -> str:
        """Of every metric name: ``{split}/``."""
        return f"{self.config.split}/"


@dataclass
class GroupScores:
    """One metric group's metrics (MLflow names), their per-query values by query set (see
    :class:`EvalResult`), counts and timings (seconds)."""

    metrics: dict[str, float] = field(default_factory=dict)
    per_query: dict[str, QueryValues] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    examples: list[RetrievalExample] = field(default_factory=list)


def score(
    encoded: EncodedSplit, config: EvalConfig | None = None, *, model: RetrievalModel | None = None
) -> EvalResult:
    """The metrics of ``encoded`` under ``config`` (default: the config it was encoded with).

    ``config`` may differ from ``encoded.config`` only in its CLIP-clip fields. With
    ``clip_m > 0`` the chosen dimensions are removed from every image and text embedding before
    ranking, and BLIP's ITM re-ranking is off (it would rank by the unclipped model). ``model``:
    the re-ranker's model (default: ``config.model`` built here, when the family re-ranks).
    """
    config = config or encoded.config
    if config.encoding() != encoded.config.encoding():
        raise ValueError("score() with a config that changes more than CLIP-clip: encode again")
    start = time.perf_counter()
    image_emb, text_emb, clipped = clipped_split(encoded, config)
    ok_images = np.array([not e for e in encoded.image_errors[: len(encoded.records)]])
    inputs = ScoringInputs(encoded, config, image_emb, text_emb, ok_images)

    metrics: dict[str, float] = {}
    counts = {"images": int(ok_images.sum()), "captions": len(encoded.retrieval.captions)}
    timings = dict(encoded.timings)
    examples: list[RetrievalExample] = []
    per_query: dict[str, QueryValues] = {}
    groups = []
    if "recall" in config.metrics:
        groups.append(recall_scores(inputs, model))
    if encoded.odmap is not None:
        groups.append(odmap_scores(inputs, encoded.odmap))
    if "bias" in config.metrics:
        groups.append(bias_scores(inputs))
    for group in groups:
        metrics.update(group.metrics)
        per_query.update(group.per_query)
        counts.update(group.counts)
        timings.update(group.timings)
        examples += group.examples
    if clipped:
        counts["clip_m"] = config.clip_m
        counts["mi_images"] = clipped.mi_images
    intervals = intervals_of(
        per_query, resamples=config.bootstrap, confidence=config.confidence, seed=config.seed
    )
    timings["metrics_s"] = time.perf_counter() - start
    timings["total_s"] = encoded.timings["total_s"] + timings["metrics_s"]
    counts["skipped"] = len(encoded.issues)
    bias_split = encoded.bias_split if "bias" in config.metrics else None
    return EvalResult(
        metrics, counts, list(encoded.issues), timings, encoded.root, examples, clipped,
        intervals, per_query, bias_split,
    )  # fmt: skip


def evaluate(
    config: EvalConfig, encoder: EncoderFactory, *, model: RetrievalModel | None = None
) -> EvalResult:
    """Run one evaluation: :func:`~xmr.eval.encode.encode` with the encoder ``encoder`` makes,
    then :func:`score`. Bad images are skipped and reported in ``EvalResult.skipped``.

    ``encoder``: :func:`~xmr.eval.encode.ray_encoder` builds ``config.model`` in Ray actors;
    :func:`~xmr.eval.encode.local_encoder` encodes in this process with a model in memory (a
    training worker's, on its device: pass it as ``model`` too, to re-rank with it; Ray is not
    used, and ``config.model`` only names it in the params).
    """
    return score(encode(config, encoder), config, model=model)


def recall_scores(inputs: ScoringInputs, model: RetrievalModel | None = None) -> GroupScores:
    """Recall@K and MedR both ways on the split (``{split}/recall_{i2t,t2i}_at_{K}``,
    ``{split}/medr_{i2t,t2i}``).

    An image's captions are its positives (i2t), a caption's image its positive (t2i); captions
    of images that failed to encode are not queries. When the family re-ranks (BLIP, unless
    CLIP-clip is on) its pair scorer re-orders each query's top ``rerank_k`` first. MedR's
    per-query ranks (:func:`~xmr.metrics.first_positive_ranks`) are read from that ranking
    within its depth and, beyond it, counted over the whole gallery by
    :func:`~xmr.retrieval.positive_ranks` (another pass of the products, chunked).
    """
    config, retrieval = inputs.config, inputs.encoded.retrieval
    ok_images = inputs.ok_images
    images = inputs.split_images
    captions = inputs.text_emb[: len(retrieval.captions)]
    owner = np.asarray(retrieval.caption_image)  # caption -> image index in the split
    image_row = np.cumsum(ok_images) - 1  # image index in the split -> row of ``images``
    keep = ok_images[owner]  # captions whose image encoded
    positives_i2t = [set(np.flatnonzero(owner == i)) for i in np.flatnonzero(ok_images)]
    positives_t2i = [{int(image_row[o])} for o in owner[keep]]
    rerank_k = 0 if config.clip_m else _rerank_depth(config)
    depth = max(max(config.ks), rerank_k)
    i2t_ranking = topk_similarity(images, captions, depth)
    t2i_ranking = topk_similarity(captions[keep], images, depth)
    scores = GroupScores()
    if rerank_k:
        t0 = time.perf_counter()
        i2t_ranking, t2i_ranking = _rerank_pairs(
            inputs, model, i2t_ranking, t2i_ranking, keep, rerank_k
        )
        scores.timings["rerank_s"] = time.perf_counter() - t0
        scores.counts["rerank_k"] = rerank_k
    # The queries' identities, with their text so that another dataset (or another default
    # ToyWorld) with the same ids is told apart: an image's id and first caption; a caption's
    # image id, place among that image's captions, and text.
    image_ids = [str(record.image_id) for record in retrieval.images]
    first = {o: c for c, o in reversed(list(enumerate(owner.tolist())))}  # image -> 1st caption
    caption_keys = [
        f"{image_ids[o]}#{c - first[o]}:{retrieval.captions[c]}"
        for c, o in enumerate(owner.tolist())
    ]
    i2t_keys = [
        f"{image_ids[i]}:{retrieval.captions[first[i]] if i in first else ''}"
        for i in np.flatnonzero(ok_images)
    ]
    t2i_keys = [caption_keys[c] for c in np.flatnonzero(keep)]
    for direction, ranking, positives, keys, (queries, gallery) in (
        ("i2t", i2t_ranking, positives_i2t, i2t_keys, (images, captions)),
        ("t2i", t2i_ranking, positives_t2i, t2i_keys, (captions[keep], images)),
    ):
        hits = recall_hits(ranking, positives, config.ks)
        values = {
            f"{inputs.prefix}recall_{direction}_at_{k}": hits[k].astype(np.float64)
            for k in config.ks
        }
        beyond = positive_ranks(queries, gallery, positives)
        ranks = first_positive_ranks(ranking, positives, beyond=beyond)
        values[f"{inputs.prefix}medr_{direction}"] = ranks.astype(np.float64)
        scores.per_query[direction] = QueryValues(keys, values)
        scores.metrics.update(metric_values(values))
    return scores


def _rerank_pairs(
    inputs: ScoringInputs,
    model: RetrievalModel | None,
    i2t_ranking: Ranking,
    t2i_ranking: Ranking,
    keep: np.ndarray,
    rerank_k: int,
) -> tuple[Ranking, Ranking]:
    """Both rankings with each query's top ``rerank_k`` re-ordered by the family's pair scorer
    (``model``, or ``config.model`` built on the encoding device). ``keep``: bool ``[captions]``,
    the captions that are t2i queries."""
    config, encoded = inputs.config, inputs.encoded
    captions = encoded.retrieval.captions
    scorer = model or create_model(config.model, device=encoded.device, seed=config.seed)
    images = _LazyImages([encoded.records[i].path for i in np.flatnonzero(inputs.ok_images)])
    kept_captions = [c for c, k in zip(captions, keep, strict=True) if k]
    i2t = rerank(i2t_ranking, scorer.pair_scorer(images, captions, "i2t"), rerank_k)
    t2i = rerank(t2i_ranking, scorer.pair_scorer(images, kept_captions, "t2i"), rerank_k)
    return i2t, t2i


def odmap_scores(inputs: ScoringInputs, odmap: ODmAPSet) -> GroupScores:
    """ODmAP@K (``{split}/odmap_at_{K}``) of the ODmAP queries that encoded over the gallery,
    and a seeded sample of them with their top captions (the example grid)."""
    config, n_images = inputs.config, len(inputs.ok_images)
    rows = slice(n_images, n_images + len(odmap.queries))  # after the split's images
    ok = np.array([not e for e in inputs.encoded.image_errors[rows]], dtype=bool)
    gallery_emb = inputs.text_emb[: len(odmap.gallery)]
    ranking = topk_similarity(inputs.image_emb[rows][ok], gallery_emb, max(config.ks))
    idx = np.flatnonzero(ok)
    removed = [odmap.removed[i] for i in idx]
    present = [odmap.present[i] for i in idx]
    ap = odmap_per_query(ranking, odmap.gallery_mentions, removed, present, config.ks)
    values = {f"{inputs.prefix}odmap_at_{k}": ap[k] for k in config.ks}
    keys = [_query_key(odmap.queries[i]) for i in idx]
    return GroupScores(
        metrics={name: float(v.mean()) for name, v in values.items()},
        per_query={"odmap": QueryValues(keys, values)},
        counts={"odmap_queries": len(idx), "odmap_gallery": len(odmap.gallery)},
        examples=_examples(odmap, ranking, idx, config.seed),
    )


def bias_scores(inputs: ScoringInputs) -> GroupScores:
    """Bias@K of each of ``encoded.bias``'s rankings (:class:`~xmr.eval.encode.BiasRanking`):
    ``{split}/bias_at_{K}`` of the gender-neutral caption queries over the images of the
    Bias@K split (a ToyWorld's gender split, else the scored split) that encoded, and for each
    of its classes over the queries that mention it (``{split}/bias_at_{K}_{class}``, spaces as
    ``_``), each beside its diagnostics ``gendered_share_at_{K}`` and ``male_share_at_{K}``
    (:mod:`xmr.metrics.gender_bias`; a set whose top K never holds a gendered image has no male
    share); the same of the scored split's own images as ``{split}/natural/...`` when Bias@K
    ranks another split; how many queries and images of each gender label there are."""
    scores = GroupScores()
    for ranking in inputs.encoded.bias:
        ranked = _ranking_scores(inputs, ranking)
        scores.metrics.update(ranked.metrics)
        scores.per_query.update(ranked.per_query)
        scores.counts.update(ranked.counts)
    return scores


def _ranking_scores(inputs: ScoringInputs, ranking: BiasRanking) -> GroupScores:
    """:func:`bias_scores` of one ranking."""
    config, errors = inputs.config, inputs.encoded.image_errors
    ok = np.array([not errors[row] for row in ranking.image_rows], dtype=bool)
    genders = [g for g, fine in zip(ranking.genders, ok, strict=True) if fine]
    top = topk_similarity(
        inputs.text_emb[ranking.text_rows],
        inputs.image_emb[ranking.image_rows[ok]],
        max(config.ks),
    )
    counts = top_k_genders(top, genders, config.ks)
    per_query = {  # metric stem -> K -> [Q]
        "bias": {k: c.deltas() for k, c in counts.items()},
        "gendered_share": {k: c.gendered_shares() for k, c in counts.items()},
        "male_share": {k: c.male_shares() for k, c in counts.items()},
    }
    keys = [f"{n}:{text}" for n, text in enumerate(ranking.texts)]
    counted = ranking.set_prefix
    scores = GroupScores(
        counts={
            f"{counted}bias_queries": len(ranking.texts),
            **{f"{counted}images_{g}": genders.count(g) for g in ("male", "female", "neutral")},
        }
    )
    query_sets = {"bias": (np.arange(len(keys)), "")}
    for cls in ranking.classes:
        mentioning = [cls in mentioned for mentioned in ranking.mentions]
        query_sets[f"bias_{class_suffix(cls)}"] = (np.flatnonzero(mentioning), class_suffix(cls))
        scores.counts[f"{counted}bias_queries_{class_suffix(cls)}"] = int(sum(mentioning))
    prefix = inputs.prefix + ranking.metric_prefix
    for set_name, (rows, suffix) in query_sets.items():
        if not len(rows):
            continue  # no query mentions the class: its Bias@K is undefined
        values = {
            f"{prefix}{stem}_at_{k}{'_' + suffix if suffix else ''}": by_k[k][rows]
            for stem, by_k in per_query.items()
            for k in config.ks
            if stem != "male_share" or per_query["gendered_share"][k][rows].any()
        }
        scores.per_query[ranking.set_prefix + set_name] = QueryValues(
            [keys[i] for i in rows], values
        )
        scores.metrics.update(metric_values(values))
    return scores


def class_suffix(cls: str) -> str:
    """A class's part of a metric name: ``"sports ball"`` -> ``"sports_ball"``."""
    return cls.replace(" ", "_")


def _query_key(query: ImageQuery) -> str:
    """An ODmAP query's identity: its file's name and the boxes inpainted away, if any."""
    boxes = ";".join(",".join(f"{v:g}" for v in box) for box in query.inpaint_boxes)
    return f"{Path(str(query.path)).name}{f'|{boxes}' if boxes else ''}"


def _rerank_depth(config: EvalConfig) -> int:
    """Candidates per query that the family's pair scorer re-ranks (0: none)."""
    if config.rerank_k is not None:
        return config.rerank_k
    return default_rerank_k(config.model)


class _LazyImages(Sequence[Image.Image]):
    """Images read on first access (a re-ranker asks only for those it scores)."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = list(paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index):  # type: ignore[override]
        return load_image(self.paths[index])


def _examples(
    odmap: ODmAPSet, ranking: Ranking, query_index: np.ndarray, seed: int, n: int = 8, top: int = 3
) -> list[RetrievalExample]:
    """A seeded sample of ODmAP queries with their top captions and whether each is relevant."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(query_index), size=min(n, len(query_index)), replace=False))
    queries = [int(query_index[row]) for row in rows]
    hits = ranking.indices[rows, :top]
    relevant = odmap_relevance(
        hits,
        odmap.gallery_mentions,
        [odmap.removed[q] for q in queries],
        [odmap.present[q] for q in queries],
    )
    return [
        RetrievalExample(
            odmap.queries[q],
            sorted(odmap.removed[q]),
            sorted(odmap.present[q]),
            [odmap.gallery[int(g)] for g in row_hits],
            row_relevant.tolist(),
        )
        for q, row_hits, row_relevant in zip(queries, hits, relevant, strict=True)
    ]
