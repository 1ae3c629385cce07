"""fileio/header_records.py: the header's records parsed by ``_Parser`` over a ``_Cursor``, on a
file gguf-py's GGUFWriter wrote, against what gguf-py's GGUFReader reads from it. Each record
keeps where it starts, and a numeric array keeps its stored bytes."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFValueType, GGUFWriter

from dflash_gguf.fileio import header_records as hr
from dflash_gguf.fileio.header_errors import TruncatedError
from dflash_gguf.fileio.types import NumberArray

SCALARS = {
    "u8": (7, GGUFValueType.UINT8), "i8": (-7, GGUFValueType.INT8), "u16": (65535, GGUFValueType.UINT16),
    "i16": (-300, GGUFValueType.INT16), "u32": (1 << 31, GGUFValueType.UINT32), "i32": (-(1 << 30), GGUFValueType.INT32),
    "f32": (0.5, GGUFValueType.FLOAT32), "b": (True, GGUFValueType.BOOL), "u64": (1 << 40, GGUFValueType.UINT64),
    "i64": (-(1 << 40), GGUFValueType.INT64), "f64": (0.1, GGUFValueType.FLOAT64), "s": ("héllo", GGUFValueType.STRING),
}
ARRAYS = {
    "a.i32": ([1, -2, 3], GGUFValueType.INT32), "a.f32": ([0.25, -1.5], GGUFValueType.FLOAT32),
    "a.str": (["a", "", "ü" * 300, "tok"] * 50, GGUFValueType.STRING), "a.bool": ([True, False, True], GGUFValueType.BOOL),
    "a.u8": (list(range(200)), GGUFValueType.UINT8),
}
TENSORS = {"w": (np.ones((3, 64), np.float32), None), "v": (np.zeros(32, np.float16), None),
           "q": (np.zeros((2, 34), np.uint8), Q.Q8_0)}


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("records") / "r.gguf"
    w = GGUFWriter(path, "llama")
    for k, (v, t) in SCALARS.items():
        w.add_key_value(k, v, t)
    for k, (v, t) in ARRAYS.items():
        w.add_key_value(k, v, GGUFValueType.ARRAY, sub_type=t)
    for name, (arr, raw) in TENSORS.items():
        w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _parse(path, mapped: bool):
    data = path.read_bytes()
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    with open(path, "rb") as f:
        cur = hr._Cursor(f, len(data), "r.gguf", memoryview(data) if mapped else None)
        cur.take(24, "the counts")
        p = hr._Parser(cur)
        kv, order = p.kv_pairs(n_kv)
        infos = p.tensor_infos(n_tensors, p.alignment(kv))
    return data, kv, order, infos


@pytest.mark.parametrize("mapped", [False, True])
def test_records_are_what_gguf_py_reads(gguf_file, monkeypatch, mapped):
    monkeypatch.setattr(hr, "_FIRST_READ", 64)  # many buffer refills on the read path
    data, kv, order, infos = _parse(gguf_file, mapped)
    r = GGUFReader(gguf_file)
    fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    assert order == list(fields)
    for k, f in fields.items():
        got = kv[k]
        assert got.type == f.types[0] and got.sub_type == (f.types[1] if len(f.types) > 1 else None), k
        want = f.contents()
        if isinstance(want, float):
            assert got.value == pytest.approx(want, rel=1e-7), k
        elif got.sub_type == GGUFValueType.FLOAT32:
            assert list(got.value) == pytest.approx(want), k
        elif got.sub_type == GGUFValueType.STRING:
            assert list(got.value) == want, k
        else:
            assert (list(got.value) if isinstance(got.value, tuple) else got.value) == want, k
        # the record starts with its key: u64 length, then the key's bytes
        (n,) = struct.unpack_from("<Q", data, got.offset)
        assert data[got.offset + 8:got.offset + 8 + n] == k.encode(), k
    assert [i[0] for i in infos] == [t.name for t in r.tensors]
    for (name, ne, qtype, offset, nbytes, at), t in zip(infos, r.tensors):
        assert ne == tuple(int(d) for d in t.shape) and qtype == t.tensor_type and nbytes == t.n_bytes
        assert offset == t.data_offset - r.data_offset
        (n,) = struct.unpack_from("<Q", data, at)
        assert data[at + 8:at + 8 + n] == name.encode()


def test_a_numeric_array_keeps_its_stored_bytes(gguf_file):
    data, kv, _, _ = _parse(gguf_file, mapped=False)
    a = kv["a.i32"].value
    assert isinstance(a, NumberArray) and a.item == GGUFValueType.INT32 and a == (1, -2, 3)
    assert bytes(a.packed) == struct.pack("<3i", 1, -2, 3) and bytes(a.packed) in data
    assert isinstance(kv["a.bool"].value, tuple) and not isinstance(kv["a.bool"].value, NumberArray)
    mapped = _parse(gguf_file, mapped=True)[1]["a.u8"].value
    assert isinstance(mapped.packed, memoryview) and bytes(mapped.packed) == bytes(range(200))  # a view, not a copy


def test_the_cursor_refuses_to_read_past_the_end(gguf_file):
    data = gguf_file.read_bytes()
    with open(gguf_file, "rb") as f:
        cur = hr._Cursor(f, 100, "cut.gguf")
        cur.take(90, "the start")
        with pytest.raises(TruncatedError, match=r"cut.gguf: the next part needs bytes up to 101 but the file ends at 100") as e:
            cur.take(11, "the next part")
    assert e.value.offset == 100
    assert bytes(cur.copy(0, 4)) == data[:4] == b"GGUF"


def test_show_escapes_control_characters():
    assert hr.show("a\tb\nc") == "a\\tb\\nc"
    assert hr.show("ok.weight") == "ok.weight"
    assert hr.show("x" * 100, limit=10) == "x" * 9 + "…"
