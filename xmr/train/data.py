"""The training table: D's image–caption pairs, optionally mixed with a sample of D′.

One row per pair (:data:`PAIR_SCHEMA`); images travel as a file path (D) or PNG bytes (D′) and
are decoded in the training worker by :func:`collate`, with the model's own train transform and
tokenizer. The labels FairSample needs ride along: the image's gender and whether the caption
is gender-neutral.

D′ is mixed at ratio ``R`` (odmap paper §4.1): a seeded random subset of ``R·|D|`` pairs of D′
(all of D′ when ``R`` is omitted or D′ is smaller: then the ratio trained on is below ``R``, and
:func:`ratio_shortfall` says so).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from PIL import Image

from xmr.data.images import decode_image, load_image
from xmr.data.records import ImageRecord
from xmr.data.synthetic import read_manifest, synthetic_table
from xmr.eval.protocol import record_gender
from xmr.metrics.gender_bias import gender_codes
from xmr.models.base import Corpus, RetrievalModel
from xmr.models.batch import TrainBatch
from xmr.text.gender import caption_gender

PAIR_SCHEMA = pa.schema(
    [
        ("image_id", pa.int64()),  # D: the dataset's id; D′: -(1 + row index in D′), unique
        ("image_path", pa.string()),  # D: the image file ("" for D′)
        ("image_png", pa.binary()),  # D′: the synthetic image (empty for D)
        ("caption", pa.string()),
        ("image_gender", pa.string()),  # male | female | neutral
        ("caption_neutral", pa.bool_()),
        ("source", pa.string()),  # "D" | "D′"
        ("entities", pa.map_(pa.string(), pa.string())),  # EI-CLIP: group -> entity
    ]
)


@dataclass(frozen=True)
class TrainingData:
    """The pairs to train on and where they came from.

    Attributes:
        table: :data:`PAIR_SCHEMA` rows, D first then the D′ sample, in a fixed order.
        original: number of pairs from D.
        synthetic: number of pairs from D′ (0 without ``--synth``).
        synthetic_available: pairs in D′ before sampling.
        dprime_digest: the D′ manifest's config hash ("" without D′).
    """

    table: pa.Table
    original: int
    synthetic: int
    synthetic_available: int
    dprime_digest: str

    @property
    def synth_ratio(self) -> float:
        """|D′ sample| / |D|: the ratio actually trained on (0 without D′)."""
        return self.synthetic / self.original if self.original else 0.0

    def corpus(self) -> Corpus:
        """Captions and entity columns, for families that build vocabularies."""
        entities: dict[str, list[str]] = {}
        rows = self.table.column("entities").to_pylist()
        for n, row in enumerate(rows):
            for group, value in row or []:
                entities.setdefault(group, [""] * len(rows))[n] = value
        return Corpus(self.table.column("caption").to_pylist(), entities)


def original_pairs(records: Sequence[ImageRecord]) -> list[dict]:
    """Every (image, caption) pair of ``records`` as :data:`PAIR_SCHEMA` rows."""
    rows = []
    for record in records:
        gender = record_gender(record)
        entities = list(record.entities.items())
        for caption in record.caption_texts:
            rows.append(
                {
                    "image_id": record.image_id,
                    "image_path": str(record.path),
                    "image_png": b"",
                    "caption": caption,
                    "image_gender": gender,
                    "caption_neutral": caption_gender(caption) == "neutral",
                    "source": "D",
                    "entities": entities,
                }
            )
    return rows


def synthetic_pairs(
    root: Path, count: int | None, seed: int, genders: Mapping[int, str]
) -> tuple[pa.Table, int, str]:
    """A seeded sample of ``count`` pairs of the D′ build at ``root`` (all when ``None``).

    ``genders`` maps source image ids to their gender; a synthetic image keeps its source's
    gender unless its persons were removed (then it is neutral). Returns ``(rows, available,
    config hash)``; the sample is in D′'s key order.
    """
    manifest = read_manifest(root)
    table = synthetic_table(root)
    available = table.num_rows
    take = np.arange(available)
    if count is not None and count < available:
        take = np.sort(np.random.default_rng(seed).choice(available, size=count, replace=False))
    table = table.take(pa.array(take, pa.int64()))
    sources = table.column("source_image_id").to_pylist()
    removed = table.column("removed_classes").to_pylist()
    captions = table.column("caption").to_pylist()
    rows = {
        "image_id": [-(1 + int(i)) for i in take],
        "image_path": [""] * len(take),
        "image_png": table.column("image"),
        "caption": captions,
        "image_gender": [
            "neutral" if "person" in gone else genders.get(source, "neutral")
            for source, gone in zip(sources, removed, strict=True)
        ],
        "caption_neutral": [caption_gender(c) == "neutral" for c in captions],
        "source": ["D′"] * len(take),
        "entities": [[] for _ in take],
    }
    return pa.table(rows, schema=PAIR_SCHEMA), available, str(manifest.get("config_hash", ""))


def training_data(
    records: Sequence[ImageRecord],
    synth: Path | None = None,
    synth_ratio: float | None = None,
    seed: int = 0,
) -> TrainingData:
    """D's pairs, plus ``synth_ratio·|D|`` pairs of D′ (all of it when the ratio is ``None``)."""
    original = pa.Table.from_pylist(original_pairs(records), schema=PAIR_SCHEMA)
    if synth is None:
        return TrainingData(original, original.num_rows, 0, 0, "")
    if synth_ratio is not None and synth_ratio < 0:
        raise ValueError(f"--synth-ratio must be >= 0, got {synth_ratio}")
    count = None if synth_ratio is None else round(synth_ratio * original.num_rows)
    genders = {record.image_id: record_gender(record) for record in records}
    synthetic, available, digest = synthetic_pairs(Path(synth), count, seed, genders)
    table = pa.concat_tables([original, synthetic])
    return TrainingData(table, original.num_rows, synthetic.num_rows, available, digest)


def ratio_shortfall(data: TrainingData, synth_ratio: float | None) -> str | None:
    """What to tell the user when D′ held fewer than ``synth_ratio·|D|`` pairs (then all of D′
    is used, at a lower ratio); None when the ratio asked for is the one trained on."""
    if synth_ratio is None or data.synthetic >= round(synth_ratio * data.original):
        return None
    return (
        f"--synth-ratio {synth_ratio:g} asks for {round(synth_ratio * data.original)} D′ pairs "
        f"({data.original} pairs in D), but D′ has {data.synthetic_available}: training on all "
        f"of them, ratio {data.synth_ratio:.4g}"
    )


def data_digest(table: pa.Table) -> str:
    """A short hash of the pairs (ids, paths, captions; not the pixels), for the MLflow input."""
    h = hashlib.sha256()
    for name in ("image_id", "image_path", "caption", "source"):
        h.update(repr(table.column(name).to_pylist()).encode())
    return h.hexdigest()[:16]


def _image(path: str, png: bytes) -> Image.Image:
    if png:
        return decode_image(png, "D′ image")
    return load_image(path)


def collate(rows: Mapping[str, np.ndarray], model: RetrievalModel) -> TrainBatch:
    """Decode, transform and tokenise a batch of :data:`PAIR_SCHEMA` rows (numpy columns).

    Raises ``DataError`` naming the image when one cannot be read.
    """
    images = [
        model.train_transform(_image(str(path), bytes(png)))
        for path, png in zip(rows["image_path"], rows["image_png"], strict=True)
    ]
    captions = [str(c) for c in rows["caption"]]
    entities: dict[str, list[str]] = {}
    for n, row in enumerate(rows["entities"]):
        for group, value in _pairs(row):
            entities.setdefault(group, [""] * len(captions))[n] = value
    return TrainBatch(
        pixels=torch.stack(images),
        text=model.tokenize(captions),
        image_ids=torch.as_tensor(np.asarray(rows["image_id"], dtype=np.int64)),
        image_gender=torch.as_tensor(gender_codes(rows["image_gender"])),
        caption_neutral=torch.as_tensor(np.asarray(rows["caption_neutral"], dtype=bool)),
        entities=model.entity_ids(entities) if entities else {},
    )


def _pairs(value: object) -> list[tuple[str, str]]:
    """Arrow map values arrive as lists of (key, value) pairs or as dicts."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return list(value.items())
    return [tuple(item) for item in value]  # type: ignore[misc]
