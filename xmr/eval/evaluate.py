"""``xmr eval``: encode a dataset with a model on Ray and compute Recall, ODmAP and Bias@K."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from xmr.data import DataIssue, dataset_splits, read_counterfactuals, read_dataset
from xmr.data.default_world import default_toyworld
from xmr.data.images import load_image
from xmr.data.records import ImageRecord
from xmr.eval.encoders import EncodeImages, EncodeTexts
from xmr.eval.protocol import (
    ImageQuery,
    ODmAPSet,
    RetrievalSet,
    neutral_queries,
    planned_queries,
)
from xmr.metrics import Ranking, bias_at_k, odmap_at_k, odmap_relevance, recall_at_k
from xmr.metrics.ranking import check_ks
from xmr.models import ModelSpec, RetrievalModel, check_spec, create_model
from xmr.models.registry import default_rerank_k
from xmr.pipeline import Resources, run_local
from xmr.pipeline.ray_executor import cluster_gpus, init_ray, run_stage
from xmr.pipeline.stage import Batch
from xmr.retrieval import rerank, topk_similarity
from xmr.text import caption_mentions

METRIC_GROUPS = ("recall", "odmap", "bias")


@dataclass(frozen=True)
class EvalConfig:
    """Everything that defines one evaluation (logged as ``data.*``, ``model.*``, ``eval.*``)."""

    model: ModelSpec
    dataset: str = "toyworld"
    data: Path | None = None  # None: the embedded default ToyWorld
    split: str = "test"
    metrics: tuple[str, ...] = METRIC_GROUPS
    ks: tuple[int, ...] = (1, 5, 10)
    batch_size: int = 128
    actors: int | None = None  # None: one per GPU, else one per CPU core (at most 4)
    device: str = "auto"  # auto | cpu | cuda
    seed: int = 0
    alpha1: float = 0.4
    alpha2: float = 0.8
    alpha3: float = 0.7
    rerank_k: int | None = None  # None: the family's (BLIP: ITM over the top 128/256); 0: off

    def __post_init__(self) -> None:
        unknown = set(self.metrics) - set(METRIC_GROUPS)
        if unknown:
            raise ValueError(f"unknown metrics {sorted(unknown)}; choose from {METRIC_GROUPS}")
        check_ks(self.ks)

    def params(self) -> dict[str, str]:
        """Namespaced MLflow params."""
        return {
            **self.model.params(),
            "data.dataset": self.dataset,
            "data.root": str(self.data or "default toyworld"),
            "data.split": self.split,
            "eval.metrics": ",".join(self.metrics),
            "eval.ks": ",".join(map(str, self.ks)),
            "eval.batch_size": str(self.batch_size),
            "eval.device": self.device,
            "eval.seed": str(self.seed),
            "eval.rerank_k": "family default" if self.rerank_k is None else str(self.rerank_k),
            "synth.alpha1": str(self.alpha1),
            "synth.alpha2": str(self.alpha2),
            "synth.alpha3": str(self.alpha3),
        }


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
    """Metrics (MLflow names), counts, skipped items and timings (seconds) of one evaluation."""

    metrics: dict[str, float]
    counts: dict[str, int]
    skipped: list[DataIssue]
    timings: dict[str, float]
    data_root: Path
    examples: list[RetrievalExample] = field(default_factory=list)

    def params(self, config: EvalConfig) -> dict[str, str]:
        """``config.params()`` with the data root that was evaluated."""
        return {**config.params(), "data.root": str(self.data_root)}

    def to_json(self, config: EvalConfig) -> dict:
        return {
            "config": self.params(config),
            "metrics": self.metrics,
            "counts": self.counts,
            "skipped": [issue._asdict() for issue in self.skipped],
            "timings": self.timings,
        }


def _resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if cluster_gpus() > 0 else "cpu"
    return device


class _Encoder:
    """Runs the encoding stages: on Ray (one model per actor), or here with a model in memory."""

    def __init__(self, config: EvalConfig, model: RetrievalModel | None = None) -> None:
        self.config = config
        self.model = model
        if model is not None:
            self.device = str(model.device)
            self.actors, self.resources = 0, Resources(cpus=1)
        elif (device := _resolve_device(config.device)) == "cuda":
            self.device = device
            self.actors = config.actors or max(1, cluster_gpus())
            self.resources = Resources(cpus=1, gpus=1)
        else:
            self.device = device
            self.actors = config.actors or max(1, min(4, os.cpu_count() or 1))
            self.resources = Resources(cpus=1)

    def _run(self, stage: type[EncodeImages | EncodeTexts], rows: list[dict]) -> Batch:
        c = self.config
        encoder = stage(c.model, self.device, self.resources, c.batch_size, c.seed, self.model)
        if self.model is not None:
            return run_local(rows, encoder)
        return run_stage(rows, encoder, actors=self.actors)

    def images(self, queries: list[ImageQuery]) -> tuple[np.ndarray, list[str]]:
        """Embeddings ``[N, D]`` and per-row errors ("" when fine)."""
        rows = [
            {"path": str(q.path), "inpaint": json.dumps(q.inpaint_boxes) if q.inpaint_boxes else ""}
            for q in queries
        ]
        out = self._run(EncodeImages, rows)
        return out["embedding"], [str(e) for e in out["error"]]

    def texts(self, texts: list[str]) -> np.ndarray:
        """Embeddings ``[N, D]``."""
        unique = list(dict.fromkeys(texts))  # captions repeat: encode each text once
        position = {text: i for i, text in enumerate(unique)}
        out = self._run(EncodeTexts, [{"text": t} for t in unique])
        return out["embedding"][[position[t] for t in texts]]


def _odmap_set(
    config: EvalConfig, root: Path, records: list[ImageRecord], issues: list[DataIssue]
) -> ODmAPSet:
    """ODmAP queries and the all-splits caption gallery (see :mod:`xmr.eval.protocol`)."""
    if config.dataset == "toyworld":
        cfs = read_counterfactuals(root, config.split)
        queries = [ImageQuery(cf.path) for cf in cfs]
        sources = [cf.source_image_id for cf in cfs]
        removed = [cf.removed for cf in cfs]
        present = [cf.kept for cf in cfs]
    else:
        queries, sources, removed, present = planned_queries(
            records, issues, alpha1=config.alpha1, alpha2=config.alpha2, alpha3=config.alpha3
        )
    gallery_records = list(records)
    for split in dataset_splits(config.dataset, root):
        if split != config.split:
            gallery_records += read_dataset(config.dataset, root, split, issues=issues)
    gallery = [text for record in gallery_records for text in record.caption_texts]
    return ODmAPSet(
        queries,
        sources,
        removed,
        present,
        gallery,
        caption_mentions(config.dataset, gallery_records),
    )


def evaluate(
    config: EvalConfig, *, address: str | None = None, model: RetrievalModel | None = None
) -> EvalResult:
    """Run one evaluation. Bad images are skipped and reported in ``EvalResult.skipped``.

    By default the model of ``config.model`` is built in Ray actors (``address``: the cluster).
    With ``model`` (a training worker's model, on its device) everything is encoded in this
    process and Ray is not used; ``config.model`` then only names it in the params.
    """
    if model is None:
        check_spec(config.model)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    root = config.data or default_toyworld(config.seed)
    issues: list[DataIssue] = []
    records = read_dataset(config.dataset, root, config.split, issues=issues)
    if not records:
        raise ValueError(f"{root}: split {config.split!r} has no usable images")
    retrieval = RetrievalSet.from_records(records)
    odmap = _odmap_set(config, root, records, issues) if "odmap" in config.metrics else None
    bias_texts, genders = neutral_queries(records) if "bias" in config.metrics else ([], [])
    timings["prepare_s"] = time.perf_counter() - start

    if model is None:
        init_ray(address)
    encoder = _Encoder(config, model)
    t0 = time.perf_counter()
    image_queries = [ImageQuery(r.path) for r in records] + (odmap.queries if odmap else [])
    image_emb, image_errors = encoder.images(image_queries)
    timings["encode_images_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    # The test captions come first in the ODmAP gallery, so they are encoded once.
    gallery_texts = odmap.gallery if odmap else retrieval.captions
    text_emb = encoder.texts(gallery_texts + bias_texts)
    timings["encode_texts_s"] = time.perf_counter() - t0

    n_img = len(records)
    for query, error in zip(image_queries, image_errors, strict=True):
        if error:
            issues.append(DataIssue(str(query.path), error))
    ok_images = np.array([not e for e in image_errors[:n_img]])
    kmax = max(config.ks)
    prefix = f"{config.split}/"
    metrics: dict[str, float] = {}
    counts = {"images": int(ok_images.sum()), "captions": len(retrieval.captions)}
    t0 = time.perf_counter()

    img = image_emb[:n_img][ok_images]
    image_index = np.cumsum(ok_images) - 1  # old image index -> row of ``img``
    if "recall" in config.metrics:
        cap = text_emb[: len(retrieval.captions)]
        owner = np.asarray(retrieval.caption_image)
        positives_i2t = [set(np.flatnonzero(owner == i)) for i in np.flatnonzero(ok_images)]
        keep = ok_images[owner]
        positives_t2i = [{int(image_index[o])} for o in owner[keep]]
        rerank_k = _rerank_depth(config)
        depth = max(kmax, rerank_k)
        i2t_ranking = topk_similarity(img, cap, depth)
        t2i_ranking = topk_similarity(cap[keep], img, depth)
        if rerank_k:
            t0_rerank = time.perf_counter()
            scorer_model = model or create_model(
                config.model, device=encoder.device, seed=config.seed
            )
            images = _LazyImages([records[i].path for i in np.flatnonzero(ok_images)])
            kept_captions = [c for c, k in zip(retrieval.captions, keep, strict=True) if k]
            i2t_ranking = rerank(
                i2t_ranking, scorer_model.pair_scorer(images, retrieval.captions, "i2t"), rerank_k
            )
            t2i_ranking = rerank(
                t2i_ranking, scorer_model.pair_scorer(images, kept_captions, "t2i"), rerank_k
            )
            timings["rerank_s"] = time.perf_counter() - t0_rerank
            counts["rerank_k"] = rerank_k
        i2t = recall_at_k(i2t_ranking, positives_i2t, config.ks)
        t2i = recall_at_k(t2i_ranking, positives_t2i, config.ks)
        for k in config.ks:
            metrics[f"{prefix}recall_i2t_at_{k}"] = i2t[k]
            metrics[f"{prefix}recall_t2i_at_{k}"] = t2i[k]

    examples: list[RetrievalExample] = []
    if odmap:
        ok = np.array([not e for e in image_errors[n_img:]], dtype=bool)
        gallery_emb = text_emb[: len(odmap.gallery)]
        ranking = topk_similarity(image_emb[n_img:][ok], gallery_emb, kmax)
        idx = np.flatnonzero(ok)
        removed = [odmap.removed[i] for i in idx]
        present = [odmap.present[i] for i in idx]
        scores = odmap_at_k(ranking, odmap.gallery_mentions, removed, present, config.ks)
        for k in config.ks:
            metrics[f"{prefix}odmap_at_{k}"] = scores[k]
        counts["odmap_queries"] = len(idx)
        counts["odmap_gallery"] = len(odmap.gallery)
        examples = _examples(odmap, ranking, idx, config.seed)

    if "bias" in config.metrics:
        bias_emb = text_emb[len(gallery_texts) :]
        gallery_gender = [g for g, ok in zip(genders, ok_images, strict=True) if ok]
        bias = bias_at_k(topk_similarity(bias_emb, img, kmax), gallery_gender, config.ks)
        for k in config.ks:
            metrics[f"{prefix}bias_at_{k}"] = bias[k]
        counts["bias_queries"] = len(bias_texts)
        for gender in ("male", "female", "neutral"):
            counts[f"images_{gender}"] = gallery_gender.count(gender)
    timings["metrics_s"] = time.perf_counter() - t0
    timings["total_s"] = time.perf_counter() - start
    counts["skipped"] = len(issues)
    return EvalResult(metrics, counts, issues, timings, Path(root), examples)


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
