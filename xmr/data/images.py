"""Image decoding that fails loudly: a missing, corrupt or truncated file is a :class:`DataError`.

Pillow only decodes pixel data on ``load()``; ``Image.open`` alone reads the header. Both helpers
here force a full decode, and rely on ``PIL.ImageFile.LOAD_TRUNCATED_IMAGES`` staying ``False``
(Pillow's default), so a truncated file is an error rather than a silently grey-padded image.
"""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

from xmr.data.errors import DataError

# What Pillow raises for unreadable files (UnidentifiedImageError is an OSError).
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)


def load_image(path: str | Path) -> Image.Image:
    """Decode ``path`` fully into an RGB image.

    Raises :class:`DataError` naming the file when it is missing, not an image, corrupt or
    truncated.
    """
    path = Path(path)
    try:
        with Image.open(path) as image:
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


def image_size(path: str | Path) -> tuple[int, int]:
    """``(width, height)`` from the image header, without decoding the pixels.

    Raises :class:`DataError` naming the file when it is missing or its header is unreadable.
    """
    path = Path(path)
    try:
        with Image.open(path) as image:
            return image.size
    except FileNotFoundError as exc:
        raise DataError(f"{path}: image file not found") from exc
    except _DECODE_ERRORS as exc:
        raise DataError(f"{path}: cannot read image header ({exc})") from exc
