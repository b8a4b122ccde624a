"""The expensive half of ``xmr eval``: read a split and encode everything its metrics need.

:func:`encode` assembles the inputs of each metric group (:mod:`xmr.eval.protocol`: the split's
images and captions, the ODmAP queries and all-splits caption gallery, the gender-neutral Bias@K
queries, the images that estimate CLIP-clip's mutual information) and encodes them once with the
:class:`Encoder` the command or job hands in, as a function that makes it: on Ray
(:func:`ray_encoder`: one model per actor, the actors started while the rest is prepared) or in
this process with a model already in memory (:func:`local_encoder`). The result, an
:class:`EncodedSplit`, is scored by :func:`xmr.eval.score.score` under any CLIP-clip.

Ray is imported only when encoding on it, so this module (and ``xmr.eval``) loads without it.
"""

from __future__ import annotations

import json
import math
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from xmr.data import (
    DataIssue,
    GenderDesign,
    dataset_splits,
    read_counterfactuals,
    read_dataset,
    read_gender_design,
)
from xmr.data.records import ImageRecord
from xmr.eval.config import EvalConfig
from xmr.eval.encoders import EncodeQueries
from xmr.eval.protocol import (
    ImageQuery,
    ODmAPSet,
    RetrievalSet,
    neutral_queries,
    planned_queries,
    record_gender,
)
from xmr.models import RetrievalModel, check_spec, needs_corpus
from xmr.pipeline import LocalExecutor, Resources
from xmr.pipeline.stage import Batch
from xmr.storage import StoragePath, storage_path
from xmr.text import COCO_CLASS_WORDS, FLICKR30K_ODMAP_CLASSES, caption_mentions
from xmr.toyworld.default_world import default_toyworld

if TYPE_CHECKING:
    from xmr.pipeline.executor import Pool


@dataclass
class EncodedSplit:
    """A split encoded once (:func:`encode`), ready for :func:`~xmr.eval.score.score` under any
    CLIP-clip.

    ``image_emb`` ``[len(image_queries), D]`` holds the split's images first, then the ODmAP
    queries, then the images of ``bias_split`` when that is another split; ``text_emb``
    ``[T, D]`` the ODmAP gallery (or the split's captions) followed by the gender-neutral Bias@K
    queries of each of the ``bias`` rankings (:class:`BiasRanking`; none without Bias@K).
    ``mi_emb`` ``[M, D]`` are the images that estimate
    the mutual information with their ``mi_genders`` (empty unless asked for). Rows that failed
    to encode are zero and have a reason in ``image_errors``.
    """

    config: EvalConfig
    root: StoragePath
    records: list[ImageRecord]
    retrieval: RetrievalSet
    odmap: ODmAPSet | None
    bias: tuple[BiasRanking, ...]
    image_queries: list[ImageQuery]
    image_emb: np.ndarray
    image_errors: list[str]
    text_emb: np.ndarray
    mi_emb: np.ndarray
    mi_genders: list[str]
    issues: list[DataIssue]
    timings: dict[str, float]
    device: str

    @property
    def bias_split(self) -> str:
        """The split whose images Bias@K ranks (the first ranking's)."""
        return self.bias[0].split if self.bias else self.config.split


NATURAL = "natural"
"""The name of the scored split's own ranking beside a gender split's (its metrics:
``{split}/natural/...``; its per-query sets: ``natural_bias...``)."""


@dataclass(frozen=True)
class BiasRanking:
    """One ranking Bias@K is measured on: the gender-neutral caption queries ``texts`` (rows
    ``text_rows``, int ``[Q]``, of :attr:`EncodedSplit.text_emb`) against the images of
    ``split`` at rows ``image_rows`` (int ``[B]``, genders ``genders``) of
    :attr:`EncodedSplit.image_emb`; ``mentions``: the classes each query mentions, for the
    per-class Bias@K of ``classes``.

    ``name`` is ``""`` for Bias@K's own split (``--bias-split``, else a ToyWorld's gender split,
    else the scored split), and ``"natural"`` for the scored split's own images when Bias@K's
    split is another: those hold person-less scenes, as COCO's and Flickr30K's test sets do,
    so Bias@K can fall there through dilution (its ``gendered_share@K``) where the gender
    split, every image of men or women, cannot. Its metrics are ``{split}/natural/...``.
    """

    name: str
    split: str
    texts: list[str]
    genders: list[str]
    image_rows: np.ndarray
    text_rows: np.ndarray
    classes: tuple[str, ...]
    mentions: list[set[str]]

    @property
    def metric_prefix(self) -> str:
        """Of its metric names, after ``{split}/``: ``""`` or ``"natural/"``."""
        return f"{self.name}/" if self.name else ""

    @property
    def set_prefix(self) -> str:
        """Of its per-query sets' names: ``""`` (``bias``, ``bias_cup``) or ``"natural_"``."""
        return f"{self.name}_" if self.name else ""


def encode(
    config: EvalConfig, encoder: EncoderFactory, *, mi_features: bool | None = None
) -> EncodedSplit:
    """Read ``config``'s split and encode everything its metrics need with the encoder that
    ``encoder`` makes (:func:`ray_encoder`, :func:`local_encoder`): it is made (and checks what
    it can) before the split is read, and started (on Ray, its actors) once the split is read.

    ``mi_features``: also encode the ``mi_split`` images for CLIP-clip (default: when
    ``config.clip_m > 0``).
    """
    made = encoder(config)
    _check_bias_classes(config)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    root = config.data or default_toyworld(config.seed)
    issues: list[DataIssue] = []
    records = read_dataset(config.dataset, root, config.split, issues=issues)
    if not records:
        raise ValueError(f"{root}: split {config.split!r} has no usable images")
    design = read_gender_design(root) if config.dataset == "toyworld" else GenderDesign()
    bias_split, bias_records = _bias_records(config, root, records, design, issues)
    with_mi = config.clip_m > 0 if mi_features is None else mi_features
    mi_records = _mi_records(config, root, records) if with_mi else []
    # Every flag and split is read: the encoder's actors start now, while the ODmAP queries,
    # the caption gallery and the class mentions are worked out.
    with made as encoder:
        retrieval = RetrievalSet.from_records(records)
        odmap = (
            _odmap_set(config, root, records, issues, design) if "odmap" in config.metrics else None
        )
        image_queries = [ImageQuery(r.path) for r in records] + (odmap.queries if odmap else [])
        # The test captions come first in the ODmAP gallery, so they are encoded once.
        texts = list(odmap.gallery if odmap else retrieval.captions)
        rankings = []
        if "bias" in config.metrics:
            sets = [("", bias_split, bias_records)]
            if bias_split != config.split:
                sets.append((NATURAL, config.split, records))
            for name, split, ranked in sets:
                if split == config.split:
                    image_rows = np.arange(len(records))
                else:
                    image_rows = np.arange(len(image_queries), len(image_queries) + len(ranked))
                    image_queries += [ImageQuery(r.path) for r in ranked]
                ranking = _bias_ranking(config, name, split, ranked, design, image_rows, len(texts))
                texts += ranking.texts
                rankings.append(ranking)
        mi_queries = [ImageQuery(r.path) for r in mi_records]
        timings["prepare_s"] = time.perf_counter() - start

        t0 = time.perf_counter()
        all_emb, all_errors, text_emb = encoder.encode(image_queries + mi_queries, texts)
        timings["encode_s"] = time.perf_counter() - t0
        timings.update(encoder.timings)
    n_queries = len(image_queries)
    image_emb, image_errors = all_emb[:n_queries], all_errors[:n_queries]
    mi_ok = [not e for e in all_errors[n_queries:]]
    mi_emb = all_emb[n_queries:][np.array(mi_ok, dtype=bool)]
    mi_genders = [record_gender(r) for r, ok in zip(mi_records, mi_ok, strict=True) if ok]
    for query, error in zip(image_queries, image_errors, strict=True):
        if error:
            issues.append(DataIssue(str(query.path), error))
    timings["total_s"] = time.perf_counter() - start
    return EncodedSplit(
        config, storage_path(root), records, retrieval, odmap, tuple(rankings), image_queries,
        image_emb, image_errors, text_emb, mi_emb, mi_genders, issues, timings, encoder.device,
    )  # fmt: skip


def _bias_ranking(
    config: EvalConfig,
    name: str,
    split: str,
    records: list[ImageRecord],
    design: GenderDesign,
    image_rows: np.ndarray,
    first_text_row: int,
) -> BiasRanking:
    """The :class:`BiasRanking` ``name`` of ``split``'s ``records`` (at ``image_rows``): their
    captions made gender-neutral as queries, from row ``first_text_row`` of the encoded texts,
    and the classes each mentions when there are classes to score."""
    classes = design.classes if config.bias_classes is None else config.bias_classes
    texts, genders = neutral_queries(records)
    mentions = caption_mentions(config.dataset, records) if classes else []
    text_rows = np.arange(first_text_row, first_text_row + len(texts))
    return BiasRanking(name, split, texts, genders, image_rows, text_rows, tuple(classes), mentions)


def _bias_records(
    config: EvalConfig,
    root: StoragePath,
    records: list[ImageRecord],
    design: GenderDesign,
    issues: list[DataIssue],
) -> tuple[str, list[ImageRecord]]:
    """Bias@K's split and its records: ``config.bias_split``, else the world's gender split for
    ``config.split`` (:class:`GenderDesign`), else the scored split itself (``records``); no
    records when ``bias`` is not among the metrics."""
    if "bias" not in config.metrics:
        return config.split, []
    split = config.bias_split or design.split_for(config.split) or config.split
    if split == config.split:
        return split, records
    try:
        records = read_dataset(config.dataset, root, split, issues=issues)
    except ValueError as exc:  # a split the dataset lacks: name the flag that asked for it
        raise ValueError(f"--bias-split {split!r}: {exc}") from exc
    if not records:
        raise ValueError(f"{root}: --bias-split {split!r} has no usable images")
    return split, records


def _check_bias_classes(config: EvalConfig) -> None:
    """``--bias-classes`` are class words of the dataset (a world's own classes are)."""
    if "bias" not in config.metrics or not config.bias_classes:
        return
    known = FLICKR30K_ODMAP_CLASSES if config.dataset == "flickr30k" else COCO_CLASS_WORDS
    unknown = [c for c in config.bias_classes if c not in known]
    if unknown:
        raise ValueError(
            f"--bias-classes: unknown {unknown} for {config.dataset}; "
            f"choose from {', '.join(sorted(known))}"
        )


GPU_ENCODER_CPUS = 4
"""Cores an encoder actor on a GPU takes at most: it builds its model on them (a ViT-B/32's
random init takes seconds on one core) and decodes and tokenises its batches there."""


def gpu_encoder_cpus(cpus_per_gpu: int) -> int:
    """Cores for a GPU encoder actor where its node has ``cpus_per_gpu`` cores per GPU: that
    share, at most :data:`GPU_ENCODER_CPUS`, at least one.

    >>> gpu_encoder_cpus(16), gpu_encoder_cpus(2), gpu_encoder_cpus(0)
    (4, 2, 1)
    """
    return max(1, min(GPU_ENCODER_CPUS, cpus_per_gpu))


BATCHES_PER_ACTOR = 2
"""Each encoder actor builds its own model (seconds of loading) before it encodes anything: by
default a small set gets no more actors than it has pairs of batches."""


def encoder_actors(default: int, rows: int, batch_size: int, requested: int | None) -> int:
    """Encoder actors for ``rows`` rows in batches of ``batch_size``: ``requested`` (``--actors``)
    when given, else ``default`` (the cluster's) capped at one per :data:`BATCHES_PER_ACTOR`
    batches, at least one.

    >>> encoder_actors(4, 300, 128, None), encoder_actors(4, 30_000, 128, None)
    (2, 4)
    >>> encoder_actors(4, 10, 128, 3)
    3
    """
    if requested:
        return requested
    return max(1, min(default, math.ceil(rows / (BATCHES_PER_ACTOR * batch_size))))


class Encoder(ABC):
    """Runs the encoding stage over images and texts: :class:`LocalEncoder` (a model in
    memory, in this process) or :class:`RayEncoder` (one model per Ray actor).

    Made, it has checked what it can without starting anything; used as a context manager, it
    starts on entering (the actors, which hold their GPUs until the exit) and ends on exit.
    """

    device: str
    """Where the model runs (``cuda``, ``cpu``; on Ray, known once started)."""

    def __init__(self, config: EvalConfig) -> None:
        self.config = config
        self.device = "cpu"
        self.timings: dict[str, float] = {}
        """Seconds: ``encoder_wait_s`` (:meth:`encode` waiting for its first actor to be
        ready), ``encoder_setup_s`` (the slowest actor's model build, on Ray)."""
        self.rows = 0
        """Rows the last :meth:`encode` ran: its distinct images and distinct texts."""

    def __enter__(self) -> Encoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abstractmethod
    def close(self) -> None:
        """End what the encoder started."""

    @abstractmethod
    def run(self, rows: list[dict]) -> Batch:
        """The encoding stage's output columns (``embedding``, ``error``) for ``rows``."""

    def encode(
        self, queries: list[ImageQuery], texts: list[str]
    ) -> tuple[np.ndarray, list[str], np.ndarray]:
        """Image embeddings ``[len(queries), D]`` with per-image errors ("" when fine), and
        text embeddings ``[len(texts), D]``, from one run of the encoding stage. Repeated
        images and texts are encoded once."""
        image_keys = [
            (
                str(q.path),
                json.dumps(q.inpaint_boxes) if q.inpaint_boxes else "",
                json.dumps(q.crop) if q.crop is not None else "",
            )
            for q in queries
        ]
        images = list(dict.fromkeys(image_keys))
        unique_texts = list(dict.fromkeys(texts))  # captions repeat
        rows = [
            {"path": path, "inpaint": boxes, "crop": crop, "text": ""}
            for path, boxes, crop in images
        ]
        rows += [{"path": "", "inpaint": "", "crop": "", "text": text} for text in unique_texts]
        self.rows = len(rows)
        out = self.run(rows)
        image_index = {key: i for i, key in enumerate(images)}
        index = [image_index[key] for key in image_keys]
        text_index = {text: len(images) + i for i, text in enumerate(unique_texts)}
        embedding = out["embedding"]
        return (
            embedding[index],
            [str(out["error"][i]) for i in index],
            embedding[[text_index[t] for t in texts]],
        )


EncoderFactory = Callable[[EvalConfig], Encoder]
"""Makes the encoder of a config (:func:`ray_encoder`, :func:`local_encoder`): what a command
or job hands to :func:`encode`."""


class LocalEncoder(Encoder):
    """Encodes in this process with ``model`` (a training worker's model, on its device);
    ``config.model`` only names it. Ray is not used."""

    def __init__(self, config: EvalConfig, model: RetrievalModel) -> None:
        super().__init__(config)
        self.device = str(model.device)
        c = config
        stage = EncodeQueries(c.model, self.device, Resources(cpus=1), c.batch_size, c.seed, model)
        self._pool = LocalExecutor().pool(stage)

    def close(self) -> None:
        """Tear the stage down (its image threads); the model is the caller's."""
        self._pool.close()

    def run(self, rows: list[dict]) -> Batch:
        return self._pool.run(rows)


class RayEncoder(Encoder):
    """Builds ``config.model`` in Ray actors (a :class:`~xmr.pipeline.ray_executor.StagePool`)
    on ``address`` (default: ``RAY_ADDRESS`` or a local Ray), on the GPUs when there are some
    (``device="auto"``): ``--actors`` of them, else one per GPU, or one on the CPU (more join in
    :meth:`run` when the rows are many, see :func:`encoder_actors`).

    The actors start on entering, so that their start (a model built, on a GPU its CUDA
    context) overlaps the reading and planning that come before :meth:`encode`.
    """

    def __init__(self, config: EvalConfig, address: str | None = None) -> None:
        """Checks ``config.model`` (its family, arch and checkpoint); starts nothing."""
        super().__init__(config)
        check_spec(config.model)
        if needs_corpus(config.model):  # evaluation has no training captions to build it from
            spec = config.model
            raise ValueError(
                f"--model {spec.family}: {spec.arch!r} learns its word vocabulary in training; "
                "pass --checkpoint PATH of a trained model (e.g. xmr-runs/<run>/last.pt)"
            )
        self.address = address
        self.actors = 0
        self._pool: Pool | None = None

    def __enter__(self) -> RayEncoder:
        """Start or join Ray and start building the model in the first actors."""
        from xmr.pipeline.ray_executor import RayExecutor, cluster_gpus, cpus_per_gpu

        c = self.config
        executor = RayExecutor(self.address)
        gpus = cluster_gpus()
        auto = "cuda" if gpus > 0 else "cpu"
        self.device = auto if c.device == "auto" else c.device
        if self.device == "cuda":
            self.actors = c.actors or max(1, gpus)
            resources = Resources(cpus=gpu_encoder_cpus(cpus_per_gpu()), gpus=1)
        else:
            self.actors = c.actors or max(1, min(4, os.cpu_count() or 1))
            resources = Resources(cpus=1)
        stage = EncodeQueries(c.model, self.device, resources, c.batch_size, c.seed)
        first = c.actors or (self.actors if self.device == "cuda" else 1)
        self._pool = executor.pool(stage, first)
        return self

    def close(self) -> None:
        """End the actors."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def run(self, rows: list[dict]) -> Batch:
        if self._pool is None:
            raise RuntimeError("this encoder is not started, or closed: it has no actors")
        c = self.config
        self._pool.grow(encoder_actors(self.actors, len(rows), c.batch_size, c.actors))
        out = self._pool.run(rows, desc="encode")
        self.timings["encoder_wait_s"] = self._pool.wait_s
        self.timings["encoder_setup_s"] = max(self._pool.setup_s.values())
        return out


def ray_encoder(address: str | None = None) -> EncoderFactory:
    """Encoders on Ray at ``address`` (:class:`RayEncoder`): what ``xmr eval``, the jobs and
    the sweeps encode with."""
    return partial(RayEncoder, address=address)


def local_encoder(model: RetrievalModel) -> EncoderFactory:
    """Encoders in this process with ``model`` (:class:`LocalEncoder`): a training worker's
    evaluations."""
    return partial(LocalEncoder, model=model)


def _odmap_set(
    config: EvalConfig,
    root: StoragePath,
    records: list[ImageRecord],
    issues: list[DataIssue],
    design: GenderDesign,
) -> ODmAPSet:
    """ODmAP queries and the all-splits caption gallery (see :mod:`xmr.eval.protocol`); a
    ToyWorld's gender splits are Bias@K's and stay out of the gallery."""
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
        if split != config.split and split not in design.splits:
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


def _mi_records(
    config: EvalConfig, root: StoragePath, records: list[ImageRecord]
) -> list[ImageRecord]:
    """A seeded sample of at most ``mi_samples`` images of ``mi_split`` (CLIP-clip's MI)."""
    pool = records
    if config.mi_split != config.split:
        try:
            pool = read_dataset(config.dataset, root, config.mi_split)
        except ValueError as exc:
            raise ValueError(f"--mi-split {config.mi_split!r}: {exc}") from exc
        if not pool:
            raise ValueError(f"{root}: --mi-split {config.mi_split!r} has no usable images")
    if len(pool) <= config.mi_samples:
        return list(pool)
    rng = np.random.default_rng(config.seed)
    return [pool[i] for i in np.sort(rng.choice(len(pool), config.mi_samples, replace=False))]
