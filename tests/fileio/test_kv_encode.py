"""Bulk array encoding: the bytes gguf-py's item-by-item packing writes, or a hand-back to it."""
from __future__ import annotations

import math

import numpy as np
import pytest
from gguf import GGUFValueType as T
from gguf import GGUFWriter

from dflash_gguf.fileio.gguf_header import parse_header_bytes
from dflash_gguf.fileio.kv_encode import encode_array
from dflash_gguf.fileio.string_array import StringArray


def gguf_py(values, sub_type) -> bytes:
    """What GGUFWriter packs for an array value (without the leading value type)."""
    return GGUFWriter.__new__(GGUFWriter)._pack_val(values, T.ARRAY, add_vtype=False, sub_type=sub_type)


def _writer_endianness(monkeypatch):
    # _pack reads self.endianess; a bare instance has none.
    from gguf.constants import GGUFEndian

    monkeypatch.setattr(GGUFWriter, "endianess", GGUFEndian.LITTLE, raising=False)


CASES = [
    (["a", "b c", "", "é中\ufffd", "Ġthe"], T.STRING),
    (["ok", b"\xff\xfe-raw", b""], T.STRING),
    ([0, 1, 255], T.UINT8), ([-128, 0, 127], T.INT8), ([0, 65535], T.UINT16), ([-32768, 32767], T.INT16),
    ([0, 2**32 - 1, 7], T.UINT32), ([-(2**31), 2**31 - 1, 3], T.INT32),
    ([0, 2**64 - 1], T.UINT64), ([-(2**63), 2**63 - 1], T.INT64),
    ([0.0, -1.5, 3.25, -1e-8, -10000.0, 1 / 3, 2, 1e-45, -0.0], T.FLOAT32),
    ([0.1, -2.5e300, 7], T.FLOAT64),
    ([True, False, 1, 0, "x"], T.BOOL),
]


@pytest.mark.parametrize("values, sub_type", CASES, ids=[f"{t.name}-{i}" for i, (_, t) in enumerate(CASES)])
def test_same_bytes_as_gguf_py(monkeypatch, values, sub_type):
    _writer_endianness(monkeypatch)
    ours = encode_array(values, sub_type)
    assert ours is not None and ours == gguf_py(values, sub_type)
    assert encode_array(tuple(values), sub_type) == ours  # arrays read from a file are tuples


@pytest.mark.parametrize("values, sub_type", [
    ([1, 2**32], T.UINT32), ([-1], T.UINT64), ([2**31], T.INT32),   # out of range: struct.error there
    ([1e39], T.FLOAT32),                                              # overflows float32: OverflowError there
    ([math.inf, 1.0], T.FLOAT32), ([math.nan], T.FLOAT32),           # non-finite: packed by gguf-py
    ([1, 2.5], T.INT32), ([np.int32(3)], T.INT32), ([True], T.INT32),  # not plain ints
    ([np.float32(1.5)], T.FLOAT32), (["1.5"], T.FLOAT32),
    (["\ud800"], T.STRING), ([1], T.STRING),                          # unencodable / not text
    ([[1, 2]], T.ARRAY), ([], T.UINT32), ("abc", T.STRING), ([1], None),
])
def test_anything_unusual_is_left_to_gguf_py(values, sub_type):
    assert encode_array(values, sub_type) is None


def test_string_array_from_a_file_is_copied_as_stored(monkeypatch):
    _writer_endianness(monkeypatch)
    items = ["<unk>", "a", "b\ufffdc", b"\xff\xfe-raw", ""]
    blob = bytearray(b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little") + (1).to_bytes(8, "little"))
    key = b"tokenizer.ggml.tokens"
    blob += len(key).to_bytes(8, "little") + key + int(T.ARRAY).to_bytes(4, "little") + gguf_py(items, T.STRING)
    arr = parse_header_bytes(bytes(blob)).kv[key.decode()].value
    assert isinstance(arr, StringArray)
    assert encode_array(arr, T.STRING) == encode_array(arr.exact(), T.STRING) == gguf_py(items, T.STRING)


def _array_file(key: str, body: bytes) -> bytes:
    head = b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little") + (1).to_bytes(8, "little")
    k = key.encode()
    return head + len(k).to_bytes(8, "little") + k + int(T.ARRAY).to_bytes(4, "little") + body


def test_number_array_from_a_file_is_copied_as_stored(monkeypatch):
    _writer_endianness(monkeypatch)
    from dflash_gguf.fileio.kv_encode import encode_kv_parts
    from dflash_gguf.fileio.types import NumberArray

    types = [1, 3, 6, 1, 2**31 - 1, -(2**31)]
    arr = parse_header_bytes(_array_file("tokenizer.ggml.token_type", gguf_py(types, T.INT32))).kv[
        "tokenizer.ggml.token_type"].value
    assert isinstance(arr, NumberArray) and arr == tuple(types)  # still reads as the tuple it was
    assert encode_array(arr, T.INT32) == gguf_py(types, T.INT32)
    head, items = encode_kv_parts("k", arr, T.ARRAY, T.INT32)
    assert items is arr.packed and head + items == encode_array_kv("k", types, T.INT32)
    # written as another item type: re-packed from the values (and range-checked) as before
    assert encode_array(arr, T.INT64) == gguf_py(types, T.INT64)
    assert encode_array(arr, T.UINT32) is None  # negative items: left to gguf-py, which refuses them

    # a float32 NaN keeps its payload bit for bit (re-packing would go through a Python float)
    nan_bits = (0x7FA00001).to_bytes(4, "little")
    body = int(T.FLOAT32).to_bytes(4, "little") + (2).to_bytes(8, "little") + nan_bits + (0x80000000).to_bytes(4, "little")
    scores = parse_header_bytes(_array_file("tokenizer.ggml.scores", body)).kv["tokenizer.ggml.scores"].value
    assert isinstance(scores, NumberArray) and math.isnan(scores[0]) and math.copysign(1, scores[1]) == -1
    assert encode_array(scores, T.FLOAT32) == body


def test_bool_arrays_are_not_copied_as_stored():
    # GGUF readers treat any nonzero byte as true; writers write 1: a stored 2 is normalised
    body = int(T.BOOL).to_bytes(4, "little") + (2).to_bytes(8, "little") + bytes([2, 0])
    flags = parse_header_bytes(_array_file("a.flags", body)).kv["a.flags"].value
    assert flags == (True, False)
    assert encode_array(flags, T.BOOL) == int(T.BOOL).to_bytes(4, "little") + (2).to_bytes(8, "little") + bytes([1, 0])


def encode_array_kv(key: str, values, sub_type) -> bytes:
    from dflash_gguf.fileio.kv_encode import encode_kv

    return encode_kv(key, list(values), T.ARRAY, sub_type)
