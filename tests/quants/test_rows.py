"""quants/rows.py: one task of a whole-file quantize, on a GGUF written by gguf-py's GGUFWriter.
The rows it reads, decodes and quantizes must be the bytes ``quantize`` gives for the same
values decoded independently here (a BF16 value is the top half of its float32; F16 through
NumPy; an already-quantized input through gguf-py's dequantizer)."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter
from gguf import quants as gguf_quants

from dflash_gguf.errors import QuantizationError
from dflash_gguf.fileio.gguf_reader import TensorReader, read_gguf
from dflash_gguf.quants import quantize
from dflash_gguf.quants.rows import quantize_rows
from dflash_gguf.quants.scratch import Scratch

ROWS, COLS = 12, 512


def _values(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((ROWS, COLS)) * rng.uniform(0.01, 3, (ROWS, 1))).astype(np.float32)


def _write(path, nan_at=None):
    """A GGUF with the same kind of values stored as F32, F16, BF16 and Q8_0; returns what each
    tensor's values are, decoded independently of the code under test."""
    x = _values(0)
    if nan_at is not None:
        x[nan_at] = np.nan
    bf16_bits = (x.view(np.uint32) >> 16).astype(np.uint16)  # truncated: any bf16 pattern will do
    with np.errstate(invalid="ignore"):
        q8 = gguf_quants.quantize(np.nan_to_num(x), Q.Q8_0)
    w = GGUFWriter(path, "llama")
    w.add_tensor("f32", x)
    w.add_tensor("f16", x.astype(np.float16))
    w.add_tensor("bf16", bf16_bits.view(np.uint8).reshape(ROWS, COLS * 2), raw_dtype=Q.BF16)
    w.add_tensor("q8_0", q8, raw_dtype=Q.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"f32": x, "f16": x.astype(np.float16).astype(np.float32),
            "bf16": (bf16_bits.astype(np.uint32) << 16).view(np.float32),
            "q8_0": gguf_quants.dequantize(q8, Q.Q8_0).astype(np.float32)}


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_K, Q.F16])
@pytest.mark.parametrize("backend", ["numpy", "numba"], indirect=True)
def test_rows_are_quantize_of_the_decoded_values(tmp_path, backend, qtype):
    want_values = _write(tmp_path / "in.gguf")
    f = read_gguf(tmp_path / "in.gguf")
    scratch = Scratch()
    with TensorReader(f.path) as reader:
        for t in f.tensors:
            for r0, n in ((0, ROWS), (3, 4), (11, 1)):
                got = quantize_rows(reader, t, r0, n, qtype, scratch)
                want = quantize(want_values[t.name][r0:r0 + n], qtype, threads=1).reshape(-1)
                assert np.array_equal(got, want), (t.name, r0, n)


@pytest.mark.parametrize("name", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("backend", ["numpy", "numba"], indirect=True)
def test_a_non_finite_value_is_named_by_its_index_in_the_whole_tensor(tmp_path, backend, name):
    _write(tmp_path / "nan.gguf", nan_at=(7, 300))
    f = read_gguf(tmp_path / "nan.gguf")
    t = next(t for t in f.tensors if t.name == name)
    with TensorReader(f.path) as reader:
        quantize_rows(reader, t, 0, 7, Q.Q8_0, Scratch())  # rows 0..6 are clean
        with pytest.raises(QuantizationError, match=rf"'{name}' has a non-finite value \(nan\) at index \(7, 300\)"):
            quantize_rows(reader, t, 5, 4, Q.Q8_0, Scratch())
