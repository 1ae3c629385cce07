import json
import struct

import numpy as np
import pytest
from safetensors.numpy import save_file

from dflash_gguf.errors import WeightsError
from dflash_gguf.fileio.safetensors import read_header, read_inventory, read_raw, to_f32

from tests.conftest import BROKEN, DRAFTERS


def test_inventory_of_fixture():
    inv = read_inventory(DRAFTERS / "qwen3-flat")
    assert len(inv) == 11 * 2 + 3
    assert [t.name for t in inv] == sorted(t.name for t in inv)
    fc = next(t for t in inv if t.name == "fc.weight")
    assert fc.dtype == "BF16" and fc.shape == (64, 256)


def test_bf16_to_f32_is_exact():
    import torch
    from safetensors.torch import load_file

    ref = load_file(DRAFTERS / "qwen3-flat" / "model.safetensors")["fc.weight"].float().numpy()
    t = next(t for t in read_inventory(DRAFTERS / "qwen3-flat") if t.name == "fc.weight")
    assert np.array_equal(to_f32(t), ref)
    assert torch is not None


def test_truncated_file_names_tensor_and_offset():
    with pytest.raises(WeightsError, match=r"needs bytes up to [\d,]+ but the file ends at [\d,]+"):
        read_inventory(BROKEN / "truncated")


def raw_file(path, header: bytes, payload: bytes = b""):
    path.write_bytes(struct.pack("<Q", len(header)) + header + payload)
    return path


@pytest.mark.parametrize("blob,needle", [
    (b"\x01\x02", "too short"),
])
def test_too_short(tmp_path, blob, needle):
    p = tmp_path / "model.safetensors"
    p.write_bytes(blob)
    with pytest.raises(WeightsError, match=needle):
        read_header(p)


def test_bad_json_and_huge_length(tmp_path):
    with pytest.raises(WeightsError, match="not valid JSON"):
        read_header(raw_file(tmp_path / "a.safetensors", b"{not json}"))
    p = tmp_path / "b.safetensors"
    p.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(WeightsError, match="exceeds"):
        read_header(p)
    p.write_bytes(struct.pack("<Q", 100) + b"{}")
    with pytest.raises(WeightsError, match="header needs bytes up to 108"):
        read_header(p)


def test_span_and_gap_checks(tmp_path):
    h = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 12]}}).encode()
    with pytest.raises(WeightsError, match="needs 8"):
        read_header(raw_file(tmp_path / "c.safetensors", h, b"\0" * 12))
    h = json.dumps({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}).encode()
    with pytest.raises(WeightsError, match="overlap or gap"):
        read_header(raw_file(tmp_path / "d.safetensors", h, b"\0" * 8))


def test_sharded_index(tmp_path):
    save_file({"a": np.ones(4, np.float32)}, tmp_path / "model-00001-of-00002.safetensors")
    save_file({"b": np.arange(3, dtype=np.float32)}, tmp_path / "model-00002-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    inv = read_inventory(tmp_path)
    assert [t.name for t in inv] == ["a", "b"]
    assert read_raw(inv[1]).tolist() == [0, 1, 2]
    index["weight_map"]["c"] = "model-00003-of-00002.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(WeightsError, match="not found"):
        read_inventory(tmp_path)
