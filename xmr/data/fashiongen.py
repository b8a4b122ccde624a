"""Fashion-Gen reader: product photos with one description and metadata entities per image.

The public release is two HDF5 files, ``fashiongen_256_256_train.h5`` (260,490 images) and
``fashiongen_256_256_validation.h5`` (32,528 images), in ``root``. What we confirmed of their
layout from public loaders (EI-CLIP-style FashionGen dataset classes, facebookresearch
pytorch_GAN_zoo's ``datasets.py``, README notes of several Fashion-Gen projects):

- ``input_image``: ``(N, 256, 256, 3)`` uint8 RGB.
- One row per image; strings are byte strings in ``(N, 1)`` datasets, read as ``f[key][row][0]``
  and decoded as latin-1 by most loaders (``"appliqué"`` is byte ``0xE9``, lost by a UTF-8
  decode with ``errors="ignore"``): ``input_description``, ``input_concat_description``,
  ``input_name``, ``input_brand``, ``input_category`` (e.g. ``SWEATERS``, ``JACKETS & COATS``),
  ``input_subcategory``, ``input_composition``, ``input_season`` (e.g. ``SS2017``),
  ``input_gender``, ``input_department`` (``CLOTHING``, ...), ``input_pose``
  (``id_gridfs_1`` .. ``id_gridfs_6``).
- ``input_productID`` ``(N, 1)`` integers: the 1-6 views of a product are separate rows sharing
  the description; ``input_msrpUSD`` ``(N, 1)`` float; ``index``, ``index_2`` integers.

Not confirmed: the fixed string lengths (the reader takes any ``S`` length and variable-length
strings too). There is no public test file: FashionBERT, Kaleido-BERT and EI-CLIP test on the
validation file.

Records: ``image_id = ID_BASE[split] + row + 1`` (ids unique across both files), ``path`` is
``<file>::<row>`` (see :mod:`xmr.data.images`), one :class:`Caption` (id = image id) holding the
cleaned ``input_description``, no objects, and :attr:`ImageRecord.entities` from
:data:`ENTITY_DATASETS` in :func:`~xmr.data.records.normalise_entity` form (an empty value leaves
its group out). Strings decode as UTF-8 when valid, else latin-1; descriptions lose HTML tags and
entities (``&amp;``) and odd whitespace. Reading touches metadata only: every string dataset is
read in one go, no pixels.

Bad input follows :func:`xmr.data.errors.report`: a row with an empty description or without an
image row (``input_image`` shorter than the metadata) is reported naming file and row; a missing
file, a missing ``input_description`` / ``input_image`` dataset or metadata datasets of different
lengths raise :class:`DataError`. The files are read from a local or shared filesystem: a root in
an object store (``s3://…``) is refused (:func:`check_fashiongen_root`).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np

from xmr.data.coco import has_words
from xmr.data.errors import DataError, DataIssue, report
from xmr.data.images import H5_IMAGE_DATASET, h5_image_dataset, h5_image_path
from xmr.data.records import Caption, ImageRecord, normalise_entity
from xmr.storage import ObjectPath, is_uri

SPLITS = ("train", "validation")
#: Other names a caller may use for a split: ``val`` is the validation file.
SPLIT_ALIASES = {"val": "validation"}
#: Added to ``row + 1`` to make image ids unique across the two files (at most ``MAX_ROWS`` each).
ID_BASE = {"train": 0, "validation": 1_000_000}
MAX_ROWS = 1_000_000
DESCRIPTION_DATASET = "input_description"
PRODUCT_DATASET = "input_productID"
#: Entity group -> the HDF5 dataset holding it (a group whose dataset is absent is left out).
ENTITY_DATASETS = {
    "brand": "input_brand",
    "category": "input_category",
    "subcategory": "input_subcategory",
    "season": "input_season",
    "composition": "input_composition",
    "gender": "input_gender",
}

_TAG = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")


def check_fashiongen_root(root: str | Path | ObjectPath) -> None:
    """Refuse a Fashion-Gen root in an object store (``ValueError`` naming ``--data``): its
    images are rows of HDF5 files, which every process opens and reads in place."""
    if is_uri(root):
        raise ValueError(
            f"--data {root}: Fashion-Gen's HDF5 files are read from a local or shared "
            "filesystem, not an object store"
        )


def fashiongen_file(root: str | Path | ObjectPath, split: str) -> Path:
    """``root/fashiongen_256_256_{split}.h5`` for ``split`` (or an alias in :data:`SPLIT_ALIASES`).

    Raises ``ValueError`` for any other split, saying why there is no ``test``, or for a root
    in an object store (:func:`check_fashiongen_root`).
    """
    check_fashiongen_root(root)
    name = SPLIT_ALIASES.get(split, split)
    if name not in SPLITS:
        raise ValueError(
            f"Fashion-Gen has no split {split!r}: choose train or validation (alias val); its test "
            "set is not public and the papers (FashionBERT, EI-CLIP) test on validation"
        )
    return Path(root) / f"fashiongen_256_256_{name}.h5"


def fashiongen_splits(root: str | Path | ObjectPath) -> list[str]:
    """The splits whose file exists under ``root``, sorted."""
    return sorted(s for s in SPLITS if fashiongen_file(root, s).is_file())


def decode_text(value: object) -> str:
    """An HDF5 string cell as ``str``: bytes as UTF-8 when valid, else latin-1 (never fails)."""
    if isinstance(value, bytes):  # numpy.bytes_ too (fixed-length "S" cells)
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value.decode("latin-1")
    return str(value)


def clean_description(text: str) -> str:
    """``text`` without HTML tags and entities, whitespace runs collapsed, stripped."""
    return _SPACE.sub(" ", html.unescape(_TAG.sub(" ", text))).strip()


def _column(file: h5py.File, key: str, path: Path) -> np.ndarray:
    """All rows of a per-row dataset as a 1-D array: ``(N, 1)`` and ``(N,)`` both accepted."""
    data = file[key]
    if data.ndim == 2 and data.shape[1] == 1:
        return data[:, 0]
    if data.ndim == 1:
        return data[:]
    raise DataError(f"{path}: dataset {key!r} must be (N, 1) or (N,), got {data.shape}")


def _strings(file: h5py.File, key: str, path: Path, clean: Callable[[str], str]) -> list[str]:
    """Every row of string dataset ``key`` decoded and passed through ``clean`` (memoised)."""
    cache: dict[object, str] = {}
    out = []
    for raw in _column(file, key, path).tolist():
        text = cache.get(raw)
        if text is None:
            text = cache[raw] = clean(decode_text(raw))
        out.append(text)
    return out


def _open(path: Path) -> h5py.File:
    if not path.is_file():
        raise DataError(f"{path}: Fashion-Gen file not found")
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise DataError(f"{path}: cannot open HDF5 file ({exc})") from exc


def read_fashiongen(
    root: str | Path | ObjectPath, split: str, *, issues: list[DataIssue] | None = None
) -> list[ImageRecord]:
    """Read one Fashion-Gen split (``train``, ``validation`` or ``val``), in row order.

    Each record's ``split`` is ``split`` as given. ``issues=None`` raises :class:`DataError` on
    the first bad row; a list collects the skipped rows instead (see the module docstring).
    """
    path = fashiongen_file(root, split)
    base = ID_BASE[SPLIT_ALIASES.get(split, split)]
    with _open(path) as file:
        if DESCRIPTION_DATASET not in file:
            raise DataError(f"{path}: no {DESCRIPTION_DATASET!r} dataset")
        images = h5_image_dataset(file, path)
        n_images, height, width = images.shape[:3]
        descriptions = _strings(file, DESCRIPTION_DATASET, path, clean_description)
        entities = {
            group: _strings(file, key, path, normalise_entity)
            for group, key in ENTITY_DATASETS.items()
            if key in file
        }
    if len(descriptions) > MAX_ROWS:
        raise DataError(f"{path}: more than {MAX_ROWS} rows would overlap the image ids")
    for group, values in entities.items():
        if len(values) != len(descriptions):
            raise DataError(
                f"{path}: {ENTITY_DATASETS[group]!r} has {len(values)} rows, "
                f"{DESCRIPTION_DATASET!r} {len(descriptions)}"
            )

    records = []
    for row, description in enumerate(descriptions):
        image_id = base + row + 1
        item = f"{path}: row {row}"
        if row >= n_images:
            reason = f"no image: {H5_IMAGE_DATASET!r} has only {n_images} rows"
            report(DataIssue(item, reason, image_id), issues)
            continue
        if not has_words(description):
            report(DataIssue(item, f"description {description!r} has no words", image_id), issues)
            continue
        records.append(
            ImageRecord(
                image_id=image_id,
                path=h5_image_path(path, row),
                width=int(width),
                height=int(height),
                captions=(Caption(id=image_id, text=description),),
                objects=(),
                split=split,
                entities={g: v[row] for g, v in entities.items() if v[row]},
            )
        )
    return records


def read_product_ids(root: str | Path | ObjectPath, split: str) -> dict[int, int]:
    """Image id -> Fashion-Gen product id (``input_productID``) for every row of ``split``.

    The views of one product share its description: retrieval that counts any view of the right
    product as a hit groups images by this id. Raises :class:`DataError` when the dataset is
    missing.
    """
    path = fashiongen_file(root, split)
    base = ID_BASE[SPLIT_ALIASES.get(split, split)]
    with _open(path) as file:
        if PRODUCT_DATASET not in file:
            raise DataError(f"{path}: no {PRODUCT_DATASET!r} dataset")
        products = _column(file, PRODUCT_DATASET, path)
    return {base + row + 1: int(p) for row, p in enumerate(products.tolist())}
