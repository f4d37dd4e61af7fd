"""Reading a data row's images (an ``images`` column, TRL's convention), as untrusted input.

A row may give each image as a file path (relative to the data file's directory and inside it), as
``{"bytes": ..., "path": ...}`` (Hugging Face datasets' ``Image`` feature, bytes raw or base64 text),
as a decoded ``PIL.Image`` (an HF dataset's ``Image`` column) or as an ``H x W x 3`` uint8 array.
Every image is checked before its pixels are decoded: a known raster format, at most
:data:`MAX_IMAGE_BYTES` encoded and :data:`MAX_IMAGE_PIXELS` pixels (a "decompression bomb" of a few
kilobytes declaring a gigapixel is refused from its header), at most :data:`MAX_IMAGES_PER_ROW` a
row. Errors name the row and the column.
"""

from __future__ import annotations

import base64
import binascii
import io
from pathlib import Path
from typing import Any

from rlvr.errors import RlvrError

MAX_IMAGES_PER_ROW = 16
MAX_IMAGE_BYTES = 32 * 2**20
MAX_IMAGE_PIXELS = 4096 * 4096
FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")


def load_images(value: Any, where: str, column: str, base_dir: Path | None) -> list[Any]:
    """The RGB PIL images of one row's ``column`` (one image or a list of them)."""
    items = value if isinstance(value, (list, tuple)) else [value]
    if len(items) > MAX_IMAGES_PER_ROW:
        raise RlvrError(f"{where}: column {column!r} has {len(items)} images, more than {MAX_IMAGES_PER_ROW}")
    return [
        _load_one(item, f"{where}: column {column!r}, image {i}", base_dir) for i, item in enumerate(items)
    ]


def _load_one(item: Any, where: str, base_dir: Path | None) -> Any:
    from PIL import Image

    if isinstance(item, Image.Image):
        return checked_image(item, where)
    if isinstance(item, dict):
        data = item.get("bytes")
        if data is not None:
            return _decode(_raw_bytes(data, where), where)
        if item.get("path"):
            return _decode(_read_file(item["path"], where, base_dir), where)
        raise RlvrError(f"{where}: an image given as an object needs 'bytes' or 'path'")
    if isinstance(item, str):
        return _decode(_read_file(item, where, base_dir), where)
    if hasattr(item, "__array_interface__"):
        return _from_array(item, where)
    raise RlvrError(
        f"{where}: an image must be a file path, {{'bytes'|'path': ...}}, a PIL image or an H x W x 3 "
        f"uint8 array, not {type(item).__name__}"
    )


def _raw_bytes(data: Any, where: str) -> bytes:
    if isinstance(data, str):
        if len(data) > MAX_IMAGE_BYTES * 4 // 3 + 4:
            raise RlvrError(f"{where}: the image is larger than {MAX_IMAGE_BYTES // 2**20} MiB")
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise RlvrError(f"{where}: 'bytes' is text but not base64") from None
    if isinstance(data, (bytes, bytearray)):
        return bytes(data)
    raise RlvrError(f"{where}: 'bytes' must be bytes or base64 text, not {type(data).__name__}")


def _read_file(name: str, where: str, base_dir: Path | None) -> bytes:
    if base_dir is None:
        raise RlvrError(f"{where}: image paths are read relative to a data file; this source has none")
    path = Path(name)
    root = base_dir.resolve()
    full = (root / path).resolve()
    if path.is_absolute() or not full.is_relative_to(root):
        raise RlvrError(f"{where}: image path {name!r} is outside the data file's directory {root}")
    if not full.is_file():
        raise RlvrError(f"{where}: image file {name!r} not found in {root}")
    if full.stat().st_size > MAX_IMAGE_BYTES:
        raise RlvrError(f"{where}: image file {name!r} is larger than {MAX_IMAGE_BYTES // 2**20} MiB")
    return full.read_bytes()


def _decode(data: bytes, where: str) -> Any:
    from PIL import Image, UnidentifiedImageError

    if len(data) > MAX_IMAGE_BYTES:
        raise RlvrError(f"{where}: the image is larger than {MAX_IMAGE_BYTES // 2**20} MiB")
    try:
        image = Image.open(io.BytesIO(data), formats=FORMATS)  # reads the header only
        _check_size(image.width, image.height, where)
        image.load()
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
        raise RlvrError(f"{where}: not a readable {'/'.join(FORMATS)} image ({err})") from None
    except Image.DecompressionBombError as err:
        raise RlvrError(f"{where}: {err}") from None
    return image.convert("RGB")


def _check_size(width: int, height: int, where: str) -> None:
    if width * height > MAX_IMAGE_PIXELS or width < 1 or height < 1:
        raise RlvrError(
            f"{where}: the image is {width} x {height} pixels; at most {MAX_IMAGE_PIXELS:,} are read"
        )


def checked_image(image: Any, where: str) -> Any:
    """``image`` (a PIL image) in RGB, refused when it is not one or has too many pixels."""
    from PIL import Image

    if not isinstance(image, Image.Image):
        raise RlvrError(f"{where}: an image must be a PIL image, not {type(image).__name__}")
    _check_size(image.width, image.height, where)
    return image.convert("RGB")


def _from_array(array: Any, where: str) -> Any:
    import numpy as np
    from PIL import Image

    pixels = np.asarray(array)
    if pixels.ndim != 3 or pixels.shape[2] != 3 or pixels.dtype != np.uint8:
        raise RlvrError(f"{where}: an image array must be H x W x 3 uint8, not {pixels.shape} {pixels.dtype}")
    _check_size(pixels.shape[1], pixels.shape[0], where)
    return Image.fromarray(pixels, "RGB")
