"""The training table: D's image–caption pairs, optionally mixed with a sample of D′.

One row per pair (:data:`PAIR_SCHEMA`); images travel as a file path (D) or PNG bytes (D′) and
are decoded in the training worker by :func:`collate`, with the model's own train transform and
tokenizer. The labels FairSample needs ride along: the image's gender and whether the caption
is gender-neutral.

D′ is mixed at ratio ``R`` (odmap paper §4.1): a seeded random subset of ``R·|D|`` pairs of D′
(all of D′ when ``R`` is omitted or D′ is smaller: then the ratio trained on is below ``R``, and
:func:`ratio_shortfall` says so). A BiAug D′ (``xmr synth --mode biaug``) is sampled by whole
hard-negative pairs, never half of one, and its rows keep their ``group_id``
(:mod:`xmr.train.batching` keeps a pair in one batch).

The training table numbers its pairs (:data:`ROW_COLUMN`). A random training transform (VSE++'s
crop and flip) draws each pair's randomness from :func:`augment_seeds` of the run's seed, the
epoch and that number, so an epoch's images are the same whichever process, thread or worker
count decodes them.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch
from PIL import Image

from xmr.data.errors import DataError
from xmr.data.images import decode_image, load_image
from xmr.data.records import ImageRecord
from xmr.data.synthetic import read_manifest, synthetic_mode, synthetic_table
from xmr.eval.protocol import record_gender
from xmr.metrics.gender_bias import gender_codes
from xmr.models.base import Corpus, RetrievalModel
from xmr.models.batch import TrainBatch
from xmr.storage import StoragePath
from xmr.text.gender import caption_gender
from xmr.train.batching import groups_of

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
        ("group_id", pa.string()),  # BiAug D′: the positive and its hard negative share it; else ""
    ]
)

ROW_COLUMN = "row"
"""The column of :attr:`TrainingData.table` numbering its pairs 0..N-1 (after the schema's)."""
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment


@dataclass(frozen=True)
class TrainingData:
    """The pairs to train on and where they came from.

    Attributes:
        table: :data:`PAIR_SCHEMA` rows, D first then the D′ sample, in a fixed order, and
            their numbers (:data:`ROW_COLUMN`).
        original: number of pairs from D.
        synthetic: number of pairs from D′ (0 without ``--synth``).
        synthetic_available: pairs in D′ before sampling.
        dprime_digest: the D′ manifest's config hash ("" without D′).
        synth_mode: how D′ was built, ``removal`` or ``biaug`` ("" without D′).
    """

    table: pa.Table
    original: int
    synthetic: int
    synthetic_available: int
    dprime_digest: str
    synth_mode: str

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
                    "group_id": "",
                }
            )
    return rows


def sample_groups(group_ids: Sequence[str], count: int | None, seed: int) -> np.ndarray:
    """Row indices of a seeded sample of at most ``count`` rows made of whole groups (all rows
    when ``None``), in row order.

    The groups (:func:`~xmr.train.batching.groups_of`) are drawn in a random order from
    ``seed`` and taken while they fit in ``count``: a pair is never halved, so a sample may
    hold one row less than ``count``.
    """
    if count is None or count >= len(group_ids):
        return np.arange(len(group_ids))
    groups = groups_of(group_ids)
    taken: list[int] = []
    for n in np.random.default_rng(seed).permutation(len(groups)):
        if len(taken) + len(groups[n]) <= count:
            taken += groups[n]
        if len(taken) == count:
            break
    return np.sort(np.asarray(taken, dtype=np.int64))


def synthetic_pairs(
    root: StoragePath, count: int | None, seed: int, genders: Mapping[int, str]
) -> tuple[pa.Table, int, str, str]:
    """A seeded sample of ``count`` pairs of the D′ build at ``root`` (a folder or an object
    store's prefix; all pairs when ``count`` is ``None``).

    ``genders`` maps source image ids to their gender; a synthetic image keeps its source's
    gender unless its persons were removed (then it is neutral). A BiAug D′ is sampled by
    whole groups (:func:`sample_groups`) and keeps its ``group_id``. Returns ``(rows,
    available, config hash, mode)``; the sample is in D′'s key order.

    Raises:
        DataError: a BiAug group with more rows than a positive and its hard negative.
    """
    manifest = read_manifest(root)
    mode = synthetic_mode(root)
    table = synthetic_table(root)
    available = table.num_rows
    if mode == "biaug":
        group_ids = _pair_ids(root, table.column("group_id").to_pylist())
        take = sample_groups(group_ids, count, seed)
    else:
        group_ids = [""] * available
        take = np.arange(available)
        if count is not None and count < available:
            take = np.sort(np.random.default_rng(seed).choice(available, size=count, replace=False))
    table = table.take(pa.array(take, pa.int64()))
    sources = table.column("source_image_id").to_pylist()
    if mode == "biaug":  # an object's attribute was repainted: whoever is in the image stays
        image_genders = [genders.get(source, "neutral") for source in sources]
    else:  # an image whose persons were removed is neutral
        image_genders = [
            "neutral" if "person" in gone else genders.get(source, "neutral")
            for source, gone in zip(
                sources, table.column("removed_classes").to_pylist(), strict=True
            )
        ]
    captions = table.column("caption").to_pylist()
    rows = {
        "image_id": [-(1 + int(i)) for i in take],
        "image_path": [""] * len(take),
        "image_png": table.column("image"),
        "caption": captions,
        "image_gender": image_genders,
        "caption_neutral": [caption_gender(c) == "neutral" for c in captions],
        "source": ["D′"] * len(take),
        "entities": [[] for _ in take],
        "group_id": [group_ids[i] for i in take],
    }
    digest = str(manifest.get("config_hash", ""))
    return pa.table(rows, schema=PAIR_SCHEMA), available, digest, mode


def _pair_ids(root: StoragePath, group_ids: Sequence[str]) -> list[str]:
    """The group ids of a BiAug D′'s rows, "" for a row whose partner is absent (it trains
    as a row of no pair).

    Raises:
        DataError: a row without a group id, or a group of more than two rows.
    """
    sizes = Counter(group_ids)
    for group_id, size in sizes.items():
        if not group_id:
            raise DataError(f"{root}: a BiAug D′ row has an empty group_id")
        if size > 2:
            raise DataError(
                f"{root}: group_id {group_id!r} has {size} rows; a BiAug group is one positive "
                "and its hard negative"
            )
    return [group_id if sizes[group_id] == 2 else "" for group_id in group_ids]


def training_data(
    records: Sequence[ImageRecord],
    synth: StoragePath | None = None,
    synth_ratio: float | None = None,
    seed: int = 0,
    synth_only: bool = False,
) -> TrainingData:
    """D's pairs, plus ``synth_ratio·|D|`` pairs of D′ (all of it when the ratio is ``None``);
    with ``synth_only`` the D′ sample alone (``original`` is then 0)."""
    original = pa.Table.from_pylist(original_pairs(records), schema=PAIR_SCHEMA)
    if synth is None:
        return TrainingData(_numbered(original), original.num_rows, 0, 0, "", "")
    if synth_ratio is not None and synth_ratio < 0:
        raise ValueError(f"--synth-ratio must be >= 0, got {synth_ratio}")
    count = None if synth_ratio is None else round(synth_ratio * original.num_rows)
    genders = {record.image_id: record_gender(record) for record in records}
    synthetic, available, digest, mode = synthetic_pairs(synth, count, seed, genders)
    if synth_only:
        return TrainingData(_numbered(synthetic), 0, synthetic.num_rows, available, digest, mode)
    table = _numbered(pa.concat_tables([original, synthetic]))
    return TrainingData(table, original.num_rows, synthetic.num_rows, available, digest, mode)


def _numbered(table: pa.Table) -> pa.Table:
    return table.append_column(ROW_COLUMN, pa.array(np.arange(table.num_rows), pa.int64()))


def ratio_shortfall(data: TrainingData, synth_ratio: float | None) -> str | None:
    """What to tell the user when D′ held fewer than ``synth_ratio·|D|`` pairs (then all of D′
    is used, at a lower ratio); None when D′ had enough (a BiAug sample of whole pairs may
    still hold one row less)."""
    if synth_ratio is None or data.synthetic_available >= round(synth_ratio * data.original):
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


def augment_seeds(seed: int, epoch: int, rows: Sequence[int] | np.ndarray) -> np.ndarray:
    """``[N]`` int64 seeds of the training transforms of pairs ``rows`` in ``epoch`` (0-based)
    of a run seeded ``seed``: SplitMix64 outputs of a stream keyed by (seed, epoch), at the
    rows' positions, so every (seed, epoch, row) gets its own well-mixed 63-bit seed."""
    key = np.random.SeedSequence([seed, epoch]).generate_state(1, np.uint64)[0]
    with np.errstate(over="ignore"):
        z = key + (np.asarray(rows, dtype=np.uint64) + np.uint64(1)) * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return (z >> np.uint64(1)).astype(np.int64)


def collate(
    rows: Mapping[str, Sequence | np.ndarray],
    model: RetrievalModel,
    *,
    seed: int | None = None,
    epoch: int = 0,
) -> TrainBatch:
    """Decode, transform and tokenise a batch of :data:`PAIR_SCHEMA` rows (columns as numpy
    arrays or lists).

    With ``seed``, each row's train transform draws from torch's global generator seeded by
    :func:`augment_seeds` (``seed``, ``epoch``, the row's :data:`ROW_COLUMN`), and the
    generator's state is restored afterwards; without it, from the generator as it stands.

    Raises ``DataError`` naming the image when one cannot be read.
    """
    sources = zip(rows["image_path"], rows["image_png"], strict=True)
    if seed is None:
        images = [model.train_transform(_image(str(path), bytes(png))) for path, png in sources]
    else:
        images, state = [], torch.get_rng_state()
        try:
            for (path, png), row_seed in zip(
                sources, augment_seeds(seed, epoch, rows[ROW_COLUMN]), strict=True
            ):
                torch.default_generator.manual_seed(int(row_seed))
                images.append(model.train_transform(_image(str(path), bytes(png))))
        finally:
            torch.set_rng_state(state)
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
