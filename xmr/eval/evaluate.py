"""``xmr eval``: encode a dataset with a model on Ray and compute Recall, ODmAP and Bias@K.

Two steps: :func:`encode` turns a split into embeddings (the expensive part, on Ray or with a
model in memory) and :func:`score` computes the metrics from them, optionally after CLIP-clip
(gender paper §3.2: drop the ``clip_m`` embedding dimensions with the highest mutual information
with the image gender label). A ``clip_m`` sweep encodes once and scores every m.

Which images estimate the mutual information is the user's choice (``mi_split``). The default is
the train split: estimating it on the split that is then scored would let that split's gender
labels pick the dimensions, and Bias@K would be measured on the very labels it was fitted to.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from xmr.data import DataIssue, dataset_splits, read_counterfactuals, read_dataset
from xmr.data.default_world import default_toyworld
from xmr.data.images import load_image
from xmr.data.records import ImageRecord
from xmr.debias import MI_ESTIMATORS, apply_clip, clip_scores, top_dims
from xmr.eval.encoders import EncodeImages, EncodeTexts
from xmr.eval.protocol import (
    ImageQuery,
    ODmAPSet,
    RetrievalSet,
    neutral_queries,
    planned_queries,
    record_gender,
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
    clip_m: int = 0  # CLIP-clip: embedding dimensions dropped (0: none)
    mi_estimator: str = "histogram"  # histogram (the reference code's) | ksg (Gao et al. 2017)
    mi_split: str = "train"  # images whose features and gender labels estimate the MI
    mi_samples: int = 5000  # at most this many of them (a seeded sample)
    mi_bins: int = 64  # histogram: bins per axis
    mi_sigma: float = 1.0  # histogram: Gaussian smoothing of the joint histogram (in bins)
    mi_neighbors: int = 3  # ksg: k
    clip_renormalize: bool = False  # re-normalise clipped embeddings (the reference does not)

    def __post_init__(self) -> None:
        unknown = set(self.metrics) - set(METRIC_GROUPS)
        if unknown:
            raise ValueError(f"unknown metrics {sorted(unknown)}; choose from {METRIC_GROUPS}")
        check_ks(self.ks)
        if self.clip_m < 0:
            raise ValueError(f"--clip-m must be >= 0, got {self.clip_m}")
        if self.mi_estimator not in MI_ESTIMATORS:
            raise ValueError(
                f"unknown --mi-estimator {self.mi_estimator!r}; choose from {MI_ESTIMATORS}"
            )
        if self.mi_samples < 2:
            raise ValueError(f"--mi-samples must be >= 2, got {self.mi_samples}")

    def mi_params(self) -> dict[str, float | int]:
        """Keyword arguments of the chosen estimator (:func:`xmr.debias.mutual_information`)."""
        if self.mi_estimator == "ksg":
            return {"neighbors": self.mi_neighbors}
        return {"bins": self.mi_bins, "sigma": self.mi_sigma}

    def encoding(self) -> EvalConfig:
        """This config with the scoring-only fields (CLIP-clip) reset: configs with the same
        ``encoding()`` can share one :func:`encode` (``mi_split`` and ``mi_samples`` are kept:
        they choose which images are encoded)."""
        return replace(
            self,
            clip_m=0,
            mi_estimator="histogram",
            mi_bins=64,
            mi_sigma=1.0,
            mi_neighbors=3,
            clip_renormalize=False,
        )

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
            "clip.m": str(self.clip_m),
            "clip.mi_estimator": self.mi_estimator,
            "clip.mi_split": self.mi_split,
            "clip.mi_samples": str(self.mi_samples),
            "clip.mi_params": ",".join(f"{k}={v}" for k, v in self.mi_params().items()),
            "clip.renormalize": str(self.clip_renormalize),
        }


def eval_config(
    *,
    model: str | None = None,
    arch: str | None = None,
    pretrained: str | None = "none",
    checkpoint: Path | str | None = None,
    metrics: str | Sequence[str] = METRIC_GROUPS,
    **fields: Any,
) -> EvalConfig:
    """An :class:`EvalConfig` from ``xmr eval``'s options (the names of its flags).

    The family and architecture default to the checkpoint's, else ``clip`` / ``xmr-tiny``;
    ``pretrained="none"`` (or None) means random init; ``metrics`` may be comma-separated.
    """
    checkpoint = Path(checkpoint) if checkpoint is not None else None
    if checkpoint is not None and (model is None or arch is None):
        saved = ModelSpec.from_checkpoint(checkpoint)
        model, arch = model or saved.family, arch or saved.arch
    spec = ModelSpec(
        model or "clip",
        arch or "xmr-tiny",
        None if pretrained in (None, "none") else pretrained,
        checkpoint,
    )
    if isinstance(metrics, str):
        metrics = [m.strip() for m in metrics.split(",") if m.strip()]
    if fields.get("data") is not None:
        fields["data"] = Path(fields["data"])
    return EvalConfig(model=spec, metrics=tuple(metrics), **fields)


@dataclass
class RetrievalExample:
    """One ODmAP query with its top retrieved captions, for the example grid."""

    query: ImageQuery
    removed: list[str]
    present: list[str]
    captions: list[str]
    relevant: list[bool]


@dataclass
class ClippedDims:
    """What CLIP-clip removed: the dimensions (highest MI first) and every dimension's MI."""

    indices: np.ndarray  # int64 [m]
    mutual_information: np.ndarray  # float64 [D], nats
    estimator: str
    params: dict[str, float | int]
    mi_split: str
    mi_images: int
    mi_genders: dict[str, int]  # images per gender label among them

    def to_json(self) -> dict:
        return {
            "m": len(self.indices),
            "indices": self.indices.tolist(),
            "estimator": self.estimator,
            "params": self.params,
            "mi_split": self.mi_split,
            "mi_images": self.mi_images,
            "mi_genders": self.mi_genders,
            "mutual_information_nats": self.mutual_information.round(6).tolist(),
        }


@dataclass
class EvalResult:
    """Metrics (MLflow names), counts, skipped items and timings (seconds) of one evaluation."""

    metrics: dict[str, float]
    counts: dict[str, int]
    skipped: list[DataIssue]
    timings: dict[str, float]
    data_root: Path
    examples: list[RetrievalExample] = field(default_factory=list)
    clip: ClippedDims | None = None

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
            **({"clip": self.clip.to_json()} if self.clip else {}),
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
        keys = [(row["path"], row["inpaint"]) for row in rows]
        position = {key: i for i, key in enumerate(dict.fromkeys(keys))}  # encode each once
        unique = [dict(zip(("path", "inpaint"), key, strict=True)) for key in position]
        out = self._run(EncodeImages, unique)
        index = [position[key] for key in keys]
        return out["embedding"][index], [str(out["error"][i]) for i in index]

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


@dataclass
class EncodedSplit:
    """A split encoded once (:func:`encode`), ready for :func:`score` under any CLIP-clip.

    ``image_emb`` ``[len(image_queries), D]`` holds the split's images first, then the ODmAP
    queries; ``text_emb`` ``[T, D]`` the ODmAP gallery (or the split's captions) followed by the
    gender-neutral Bias@K queries. ``mi_emb`` ``[M, D]`` are the images that estimate the mutual
    information with their ``mi_genders`` (empty unless asked for). Rows that failed to encode
    are zero and have a reason in ``image_errors``.
    """

    config: EvalConfig
    root: Path
    records: list[ImageRecord]
    retrieval: RetrievalSet
    odmap: ODmAPSet | None
    bias_texts: list[str]
    genders: list[str]
    image_queries: list[ImageQuery]
    image_emb: np.ndarray
    image_errors: list[str]
    text_emb: np.ndarray
    mi_emb: np.ndarray
    mi_genders: list[str]
    issues: list[DataIssue]
    timings: dict[str, float]
    device: str


def encode(
    config: EvalConfig,
    *,
    address: str | None = None,
    model: RetrievalModel | None = None,
    mi_features: bool | None = None,
) -> EncodedSplit:
    """Read ``config``'s split and encode everything its metrics need.

    ``mi_features``: also encode the ``mi_split`` images for CLIP-clip (default: when
    ``config.clip_m > 0``). By default the model of ``config.model`` is built in Ray actors
    (``address``: the cluster); with ``model`` everything is encoded in this process.
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
    with_mi = config.clip_m > 0 if mi_features is None else mi_features
    mi_records = _mi_records(config, root, records) if with_mi else []
    timings["prepare_s"] = time.perf_counter() - start

    if model is None:
        init_ray(address)
    encoder = _Encoder(config, model)
    t0 = time.perf_counter()
    image_queries = [ImageQuery(r.path) for r in records] + (odmap.queries if odmap else [])
    mi_queries = [ImageQuery(r.path) for r in mi_records]
    all_emb, all_errors = encoder.images(image_queries + mi_queries)
    n_queries = len(image_queries)
    image_emb, image_errors = all_emb[:n_queries], all_errors[:n_queries]
    mi_ok = [not e for e in all_errors[n_queries:]]
    mi_emb = all_emb[n_queries:][np.array(mi_ok, dtype=bool)]
    mi_genders = [record_gender(r) for r, ok in zip(mi_records, mi_ok, strict=True) if ok]
    timings["encode_images_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    # The test captions come first in the ODmAP gallery, so they are encoded once.
    gallery_texts = odmap.gallery if odmap else retrieval.captions
    text_emb = encoder.texts(gallery_texts + bias_texts)
    timings["encode_texts_s"] = time.perf_counter() - t0
    for query, error in zip(image_queries, image_errors, strict=True):
        if error:
            issues.append(DataIssue(str(query.path), error))
    timings["total_s"] = time.perf_counter() - start
    return EncodedSplit(
        config, Path(root), records, retrieval, odmap, bias_texts, genders, image_queries,
        image_emb, image_errors, text_emb, mi_emb, mi_genders, issues, timings, encoder.device,
    )  # fmt: skip


def _mi_records(config: EvalConfig, root: Path, records: list[ImageRecord]) -> list[ImageRecord]:
    """A seeded sample of at most ``mi_samples`` images of ``mi_split``."""
    pool = records
    if config.mi_split != config.split:
        pool = read_dataset(config.dataset, root, config.mi_split)
        if not pool:
            raise ValueError(f"{root}: --mi-split {config.mi_split!r} has no usable images")
    if len(pool) <= config.mi_samples:
        return list(pool)
    rng = np.random.default_rng(config.seed)
    return [pool[i] for i in np.sort(rng.choice(len(pool), config.mi_samples, replace=False))]


def clip_embeddings(encoded: EncodedSplit, config: EvalConfig) -> ClippedDims:
    """CLIP-clip's dimensions for ``config`` (``clip_m``, estimator) from ``encoded``'s MI images.

    Raises ValueError when ``encoded`` holds no MI images, or ``clip_m`` is not below the
    embedding size.
    """
    if not len(encoded.mi_emb):
        raise ValueError(
            "CLIP-clip needs image features to estimate the mutual information: encode with "
            "mi_features=True"
        )
    scores = clip_scores(
        encoded.mi_emb, encoded.mi_genders, config.mi_estimator, **config.mi_params()
    )
    return ClippedDims(
        indices=top_dims(scores, config.clip_m),
        mutual_information=scores,
        estimator=config.mi_estimator,
        params=config.mi_params(),
        mi_split=config.mi_split,
        mi_images=len(encoded.mi_emb),
        mi_genders={g: encoded.mi_genders.count(g) for g in ("male", "female", "neutral")},
    )


def score(
    encoded: EncodedSplit, config: EvalConfig | None = None, *, model: RetrievalModel | None = None
) -> EvalResult:
    """The metrics of ``encoded`` under ``config`` (default: the config it was encoded with).

    ``config`` may differ from ``encoded.config`` only in its CLIP-clip fields. With
    ``clip_m > 0`` the chosen dimensions are removed from every image and text embedding before
    ranking, and BLIP's ITM re-ranking is off (it would rank by the unclipped model).
    """
    config = config or encoded.config
    if config.encoding() != encoded.config.encoding():
        raise ValueError("score() with a config that changes more than CLIP-clip: encode again")
    start = time.perf_counter()
    image_emb, text_emb = encoded.image_emb, encoded.text_emb
    clipped = None
    if config.clip_m:
        clipped = clip_embeddings(encoded, config)
        image_emb = apply_clip(image_emb, clipped.indices, renormalize=config.clip_renormalize)
        text_emb = apply_clip(text_emb, clipped.indices, renormalize=config.clip_renormalize)
    records, retrieval, odmap = encoded.records, encoded.retrieval, encoded.odmap
    image_errors = encoded.image_errors
    n_img = len(records)
    ok_images = np.array([not e for e in image_errors[:n_img]])
    kmax = max(config.ks)
    prefix = f"{config.split}/"
    metrics: dict[str, float] = {}
    counts = {"images": int(ok_images.sum()), "captions": len(retrieval.captions)}
    timings = dict(encoded.timings)

    img = image_emb[:n_img][ok_images]
    image_index = np.cumsum(ok_images) - 1  # old image index -> row of ``img``
    if "recall" in config.metrics:
        cap = text_emb[: len(retrieval.captions)]
        owner = np.asarray(retrieval.caption_image)
        positives_i2t = [set(np.flatnonzero(owner == i)) for i in np.flatnonzero(ok_images)]
        keep = ok_images[owner]
        positives_t2i = [{int(image_index[o])} for o in owner[keep]]
        rerank_k = 0 if config.clip_m else _rerank_depth(config)
        depth = max(kmax, rerank_k)
        i2t_ranking = topk_similarity(img, cap, depth)
        t2i_ranking = topk_similarity(cap[keep], img, depth)
        if rerank_k:
            t0_rerank = time.perf_counter()
            scorer_model = model or create_model(
                config.model, device=encoded.device, seed=config.seed
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
        gallery_len = len(odmap.gallery) if odmap else len(retrieval.captions)
        bias_emb = text_emb[gallery_len:]
        gallery_gender = [g for g, ok in zip(encoded.genders, ok_images, strict=True) if ok]
        bias = bias_at_k(topk_similarity(bias_emb, img, kmax), gallery_gender, config.ks)
        for k in config.ks:
            metrics[f"{prefix}bias_at_{k}"] = bias[k]
        counts["bias_queries"] = len(encoded.bias_texts)
        for gender in ("male", "female", "neutral"):
            counts[f"images_{gender}"] = gallery_gender.count(gender)
    if clipped:
        counts["clip_m"] = config.clip_m
        counts["mi_images"] = clipped.mi_images
    timings["metrics_s"] = time.perf_counter() - start
    timings["total_s"] = encoded.timings["total_s"] + timings["metrics_s"]
    counts["skipped"] = len(encoded.issues)
    return EvalResult(
        metrics, counts, list(encoded.issues), timings, encoded.root, examples, clipped
    )


def evaluate(
    config: EvalConfig, *, address: str | None = None, model: RetrievalModel | None = None
) -> EvalResult:
    """Run one evaluation: :func:`encode`, then :func:`score`. Bad images are skipped and
    reported in ``EvalResult.skipped``.

    By default the model of ``config.model`` is built in Ray actors (``address``: the cluster).
    With ``model`` (a training worker's model, on its device) everything is encoded in this
    process and Ray is not used; ``config.model`` then only names it in the params.
    """
    return score(encode(config, address=address, model=model), config, model=model)


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
