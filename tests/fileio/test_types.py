"""fileio/types.py: the KV pair (its JSON form, the helpers that build one) and TensorInfo's
shapes and extents, the latter against gguf-py's GGUFReader on a file its GGUFWriter wrote."""
from __future__ import annotations

import json

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFWriter

from dflash_gguf.fileio.gguf_constants import GGUFValueType as V
from dflash_gguf.fileio.gguf_header import read_header
from dflash_gguf.fileio.types import KV, NumberArray, TensorInfo, kv_array, kv_bool, kv_str, kv_u32, type_name


def test_type_names():
    assert type_name(V.UINT32) == "UINT32"
    assert type_name(V.ARRAY, V.STRING) == "ARRAY[STRING]"


def test_to_json_shortens_long_arrays_at_every_level():
    long = list(range(100))
    doc = KV("k", [long, [1, 2], b"ab\xff"], V.ARRAY, V.ARRAY).to_json()
    assert doc == {"key": "k", "type": "ARRAY[ARRAY]",
                   "value": [{"length": 100, "head": list(range(8))}, [1, 2], "ab\ufffd"]}
    assert KV("n", list(range(64)), V.ARRAY, V.INT32).to_json()["value"] == list(range(64))  # 64 is shown whole
    assert KV("s", "text", V.STRING).to_json() == {"key": "s", "type": "STRING", "value": "text"}
    json.dumps(doc)


def test_builders_coerce_their_values():
    assert kv_u32("a", np.int64(5)) == KV("a", 5, V.UINT32) and type(kv_u32("a", np.int64(5)).value) is int
    assert kv_str("b", 7) == KV("b", "7", V.STRING)
    assert kv_bool("c", 1) == KV("c", True, V.BOOL)
    arr = kv_array("d", (x for x in "xy"), V.STRING)
    assert arr == KV("d", ["x", "y"], V.ARRAY, V.STRING) and arr.offset is None


def test_number_array_is_a_tuple_with_its_bytes():
    a = NumberArray([1, 2, 3], V.UINT16, b"\x01\x00\x02\x00\x03\x00")
    assert a == (1, 2, 3) and a[1:] == (2, 3) and len(a) == 3
    assert a.item == V.UINT16 and a.packed == b"\x01\x00\x02\x00\x03\x00"
    assert KV("k", a, V.ARRAY, V.UINT16).to_json()["value"] == [1, 2, 3]


def test_tensor_info_shapes_and_extent():
    t = TensorInfo("w", (64, 3, 2), Q.F32, offset_abs=128, nbytes=64 * 3 * 2 * 4)
    assert t.shape == (2, 3, 64) and t.n_elements == 384 and t.end == 128 + 1536
    assert TensorInfo("s", (), Q.F32, 0, 4).n_elements == 1  # a scalar: the empty product


def test_tensor_infos_read_from_a_file_agree_with_gguf_py(tmp_path):
    path = tmp_path / "t.gguf"
    w = GGUFWriter(path, "llama")
    w.add_tensor("a", np.ones((5, 7, 64), np.float32))
    w.add_tensor("b", np.zeros((3, 34 * 2), np.uint8), raw_dtype=Q.Q8_0)  # (3, 64) Q8_0
    w.add_tensor("c", np.zeros(96, np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = GGUFReader(path)
    for mine, theirs in zip(read_header(path).tensors, r.tensors):
        assert mine.name == theirs.name
        assert mine.shape_ne == tuple(int(d) for d in theirs.shape)  # gguf-py's shape is ne order
        assert mine.shape == tuple(reversed(mine.shape_ne))
        assert mine.n_elements == theirs.n_elements
        assert (mine.offset_abs, mine.end) == (theirs.data_offset, theirs.data_offset + theirs.n_bytes)
