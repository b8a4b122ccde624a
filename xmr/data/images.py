"""Image decoding that fails loudly: a missing, corrupt or truncated file is a :class:`DataError`.

Pillow only decodes pixel data on ``load()``; ``Image.open`` alone reads the header. Both helpers
here force a full decode, and rely on ``PIL.ImageFile.LOAD_TRUNCATED_IMAGES`` staying ``False``
(Pillow's default), so a truncated file is an error rather than a silently grey-padded image.

Images stored inside an HDF5 file (Fashion-Gen) have paths of the form ``<file>.h5::<row>``
(also ``.hdf5``): row ``row`` (0-based) of the file's ``input_image`` dataset, ``(N, H, W, 3)``
uint8 RGB. Each process opens such a file once, read-only, and keeps the handle. HDF5 files are
read from a local or shared filesystem only.

An image path may also be in an object store (an :class:`~xmr.storage.ObjectPath`, or its URI
as a string: what records' paths become in Ray Data rows): its bytes are read through pyarrow's
filesystem, with the credentials and endpoint of the process's environment (``AWS_*``), and
decoded the same way.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import h5py
import numpy as np
from PIL import Image

from xmr.data.errors import DataError
from xmr.storage import ObjectPath, as_path, is_uri

#: The HDF5 dataset ``<file>.h5::<row>`` paths index (Fashion-Gen's image dataset).
H5_IMAGE_DATASET = "input_image"

_H5_PATH = re.compile(r"(?P<file>.+\.(?:h5|hdf5))::(?P<row>.*)", re.IGNORECASE)
_ROW = re.compile(r"[0-9]+")
# Open HDF5 files of this process: (pid, path) -> handle. The pid keeps a forked child from
# using its parent's handle (HDF5 handles do not survive fork).
_H5_FILES: dict[tuple[int, str], h5py.File] = {}


def h5_image_path(file: str | Path, row: int) -> Path:
    """The path of row ``row`` of ``file``'s image dataset: ``<file>::<row>``."""
    file = Path(file)
    return file.with_name(f"{file.name}::{row}")


def _split_h5_path(path: str | Path | ObjectPath) -> tuple[Path, str] | None:
    """``(file, row text)`` of a local ``<file>.h5::<row>`` path, None for an ordinary path."""
    match = _H5_PATH.fullmatch(str(path))
    if match and is_uri(path):
        raise DataError(f"{path}: HDF5 images are read from a local or shared filesystem only")
    return (Path(match["file"]), match["row"]) if match else None


def _h5_images(file: Path) -> h5py.Dataset:
    """The image dataset of ``file``, opening the file on this process's first use."""
    key = (os.getpid(), str(file))
    handle = _H5_FILES.get(key)
    if handle is None or not handle.id.valid:
        if not file.is_file():
            raise DataError(f"{file}: HDF5 file not found")
        try:
            handle = h5py.File(file, "r")
        except OSError as exc:
            raise DataError(f"{file}: cannot open HDF5 file ({exc})") from exc
        _H5_FILES[key] = handle
    return h5_image_dataset(handle, file)


def h5_image_dataset(handle: h5py.File, file: Path) -> h5py.Dataset:
    """The ``(N, H, W, 3)`` uint8 image dataset of an open HDF5 file. Raises ``DataError``."""
    if H5_IMAGE_DATASET not in handle:
        raise DataError(f"{file}: no {H5_IMAGE_DATASET!r} dataset")
    images = handle[H5_IMAGE_DATASET]
    if images.ndim != 4 or images.shape[3] != 3 or images.dtype != np.uint8:
        raise DataError(
            f"{file}: {H5_IMAGE_DATASET!r} must be (N, H, W, 3) uint8, "
            f"got {images.shape} {images.dtype}"
        )
    return images


def _h5_row(file: Path, row_text: str, images: h5py.Dataset) -> int:
    """The row index of ``row_text``; raises :class:`DataError` naming file and row if invalid."""
    if not _ROW.fullmatch(row_text) or int(row_text) >= images.shape[0]:
        raise DataError(
            f"{file}: row {row_text!r} is not an image row (the file has {len(images)} rows, "
            "numbered from 0)"
        )
    return int(row_text)


def _load_h5_image(file: Path, row_text: str) -> Image.Image:
    images = _h5_images(file)
    row = _h5_row(file, row_text, images)
    try:
        pixels = images[row]
    except (OSError, RuntimeError) as exc:  # HDF5 read / decompression failure
        raise DataError(f"{file}: row {row}: cannot read image ({exc})") from exc
    return Image.fromarray(pixels, "RGB")


# What Pillow raises for unreadable files (UnidentifiedImageError is an OSError).
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)


def _open(path: str | Path | ObjectPath) -> Path | io.BytesIO:
    """What ``Image.open`` reads: a local path, or an object's bytes (read whole).

    Raises :class:`DataError` naming the object when it is missing or cannot be read.
    """
    if not is_uri(path):
        return Path(path)
    try:
        return io.BytesIO(as_path(path).read_bytes())
    except FileNotFoundError as exc:
        raise DataError(f"{path}: image file not found") from exc
    except OSError as exc:
        raise DataError(f"{path}: cannot read image ({exc})") from exc


def load_image(path: str | Path | ObjectPath) -> Image.Image:
    """Decode ``path`` fully into an RGB image.

    Raises :class:`DataError` naming the file when it is missing, not an image, corrupt or
    truncated. ``<file>.h5::<row>`` reads that row of the file's ``input_image`` dataset (a bad
    row is a :class:`DataError` naming file and row). A URI's object is read through pyarrow.
    """
    if h5 := _split_h5_path(path):
        return _load_h5_image(*h5)
    path = as_path(path)
    source = _open(path)
    try:
        with Image.open(source) as image:
            image.load()
            return image.convert("RGB")
    except FileNotFoundError as exc:
        raise DataError(f"{path}: image file not found") from exc
    except _DECODE_ERRORS as exc:
        raise DataError(f"{path}: cannot decode image ({exc})") from exc


def decode_image(data: bytes, name: str = "image bytes") -> Image.Image:
    """Decode encoded image ``data`` (PNG, JPEG, ...) fully into an RGB image.

    Raises :class:`DataError` naming ``name`` when the bytes are not a readable image.
    """
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            return image.convert("RGB")
    except _DECODE_ERRORS as exc:
        raise DataError(f"{name}: cannot decode image ({exc})") from exc


def image_size(path: str | Path | ObjectPath) -> tuple[int, int]:
    """``(width, height)`` from the image header, without decoding the pixels.

    Raises :class:`DataError` naming the file when it is missing or its header is unreadable.
    ``<file>.h5::<row>``: the size from the ``input_image`` dataset's shape, row checked.
    """
    if h5 := _split_h5_path(path):
        file, row_text = h5
        images = _h5_images(file)
        _h5_row(file, row_text, images)
        return (int(images.shape[2]), int(images.shape[1]))
    path = as_path(path)
    source = _open(path)
    try:
        with Image.open(source) as image:
            return image.size
    except FileNotFoundError as exc:
        raise DataError(f"{path}: image file not found") from exc
    except _DECODE_ERRORS as exc:
        raise DataError(f"{path}: cannot read image header ({exc})") from exc
