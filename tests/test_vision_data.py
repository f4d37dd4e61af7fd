"""A data file's ``images`` column (rlvr.vision.images): read into ``Example.images``, hostile rows
refused with the row and column named, before any pixels are decoded."""

from __future__ import annotations

import base64
import io
import json
import struct
import zlib

import pytest
from PIL import Image

from rlvr.data.file_source import load_file
from rlvr.errors import RlvrError
from rlvr.vision.images import MAX_IMAGES_PER_ROW


def _png(colour=(255, 0, 0), size=(8, 6)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, "PNG")
    return out.getvalue()


def _bomb(side: int) -> bytes:
    """A valid tiny PNG whose header declares ``side`` x ``side`` pixels."""
    data = bytearray(_png())
    ihdr = bytes(data[12:16]) + struct.pack(">II", side, side) + bytes(data[24:29])
    data[16:24] = struct.pack(">II", side, side)
    data[29:33] = struct.pack(">I", zlib.crc32(ihdr))
    return bytes(data)


def _write(tmp_path, rows) -> str:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_images_are_read_from_paths_bytes_and_a_single_image_column(tmp_path) -> None:
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "a.png").write_bytes(_png((255, 0, 0)))
    encoded = base64.b64encode(_png((0, 0, 255), (4, 4))).decode()
    rows = [
        {"question": "What colour?", "answer": "red", "images": ["pics/a.png"]},
        {"question": "What colour?", "answer": "blue", "images": [{"bytes": encoded}, "pics/a.png"]},
        {"question": "What colour?", "answer": "red", "image": "pics/a.png"},
        {"question": "No image", "answer": "x"},
    ]
    examples = load_file(_write(tmp_path, rows))
    assert [len(e.images) for e in examples] == [1, 2, 1, 0]
    assert examples[0].images[0].getpixel((0, 0)) == (255, 0, 0)
    assert examples[1].images[0].size == (4, 4) and examples[1].images[0].getpixel((0, 0)) == (0, 0, 255)
    assert all("images" not in e.metadata and "image" not in e.metadata for e in examples)


@pytest.mark.parametrize(
    ("images", "match"),
    [
        (["../outside.png"], "outside the data file's directory"),
        (["/etc/hostname"], "outside the data file's directory"),
        (["missing.png"], "not found"),
        ([{"bytes": base64.b64encode(b"not an image").decode()}], "not a readable"),
        ([{"bytes": "%%%"}], "not base64"),
        ([{"bytes": base64.b64encode(_bomb(5000)).decode()}], "5000 x 5000 pixels"),
        ([{"bytes": base64.b64encode(_bomb(100_000)).decode()}], "decompression bomb"),
        (["ok.png"] * (MAX_IMAGES_PER_ROW + 1), "more than"),
        ([{"url": "http://example.com/a.png"}], "needs 'bytes' or 'path'"),
        ([3], "not int"),
    ],
)
def test_a_hostile_image_is_refused_naming_the_row(tmp_path, images, match) -> None:
    (tmp_path.parent / "outside.png").write_bytes(_png())
    (tmp_path / "ok.png").write_bytes(_png())
    path = _write(
        tmp_path,
        [
            {"question": "q", "answer": "a", "images": ["ok.png"]},
            {"question": "q", "answer": "a", "images": images},
        ],
    )
    with pytest.raises(RlvrError, match=match) as err:
        load_file(path)
    assert "data.jsonl line 2" in str(err.value) and "'images'" in str(err.value)


def test_images_from_parquet_and_an_hf_dataset_with_an_image_feature(tmp_path) -> None:
    """TRL's form: an ``images`` column of HF ``Image`` features, stored as {"bytes", "path"} in
    Parquet and decoded to PIL images by ``datasets``."""
    import datasets

    from rlvr.data.hf_source import load_hf_dataset

    pngs = [_png((255, 0, 0)), _png((0, 255, 0), (5, 5))]
    features = datasets.Features(
        {
            "question": datasets.Value("string"),
            "answer": datasets.Value("string"),
            "images": [datasets.Image()],
        }
    )
    rows = {
        "question": ["What colour?", "And this one?"],
        "answer": ["red", "green"],
        "images": [[{"bytes": pngs[0], "path": None}], [{"bytes": pngs[1], "path": None}]],
    }
    dataset = datasets.Dataset.from_dict(rows, features=features)
    dataset.to_parquet(tmp_path / "rows.parquet")
    dataset.save_to_disk(tmp_path / "hf")
    from_parquet = load_file(tmp_path / "rows.parquet")
    from_hf = load_hf_dataset(str(tmp_path / "hf"), split="train")
    for examples in (from_parquet, from_hf):
        assert [e.images[0].getpixel((0, 0)) for e in examples] == [(255, 0, 0), (0, 255, 0)]
        assert examples[1].images[0].size == (5, 5)
