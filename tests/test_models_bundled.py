"""The bundled model's conversion parses its GGUF file once (rlvr.models.bundled._gguf_parsed_once)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from rlvr.models import bundled


def _small_gguf(path) -> None:  # noqa: ANN001
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_tensor("token_embd.weight", np.zeros((4, 3), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_each_file_is_parsed_once_and_gguf_is_restored_afterwards(tmp_path) -> None:
    path = tmp_path / "small.gguf"
    _small_gguf(path)
    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with bundled._gguf_parsed_once():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(str(path)) is first  # transformers passes str, Path or os.PathLike
        assert "token_embd.weight" in {t.name for t in first.tensors}
        arch = gguf.MODEL_ARCH.LLAMA
        assert gguf.get_tensor_name_map(arch, 2) is gguf.get_tensor_name_map(arch, 2)
        assert gguf.get_tensor_name_map(arch, 2).get_name("model.layers.1.mlp.up_proj") == "blk.1.ffn_up"
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader_class, name_map)
    assert gguf.GGUFReader(path) is not gguf.GGUFReader(path)


def test_gguf_is_restored_when_the_conversion_fails(tmp_path) -> None:
    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with pytest.raises(RuntimeError), bundled._gguf_parsed_once():
        raise RuntimeError("conversion failed")
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader_class, name_map)
