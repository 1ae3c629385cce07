"""fileio/bf16.py: bfloat16 -> float32 (ggml_compute_bf16_to_fp32), with and without numpy,
against gguf-py's BF16 dequantizer and torch's bfloat16 on every one of the 2^16 patterns."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants as gguf_quants

from dflash_gguf.fileio.bf16 import bf16_bytes_to_f32_bytes, bf16_to_f32

ALL = np.arange(1 << 16, dtype=np.uint16)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(np.asarray(a, np.float32).view(np.uint32), np.asarray(b, np.float32).view(np.uint32))


def test_every_pattern_is_gguf_pys_dequantization():
    got = bf16_to_f32(ALL)
    want = gguf_quants.dequantize(ALL.view(np.uint8), Q.BF16)
    assert got.dtype == np.float32 and _same_bits(got, want)  # NaN payloads and -0.0 included


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed (the [torch] extra)")
def test_every_pattern_is_torchs_bfloat16():
    import torch

    want = torch.from_numpy(ALL.view(np.int16).copy()).view(torch.bfloat16).float().numpy()
    assert _same_bits(bf16_to_f32(ALL), want)


def test_bytes_in_any_shape_and_into_a_buffer():
    bits = ALL[::256].reshape(4, -1).copy()  # 4 x 64
    want = (bits.astype(np.uint32) << 16).view(np.float32)
    assert _same_bits(bf16_to_f32(bits.view(np.uint8)), want)  # little-endian bytes, last axis doubled
    out = np.full(bits.shape, 7, np.float32)
    got = bf16_to_f32(bits, out)
    assert np.shares_memory(got, out) and _same_bits(out, want)


def test_by_hand():
    # 0x3f80 = 1.0, 0xc040 = -3.0, 0x0001 = the smallest bf16 subnormal 2^-133, 0x8000 = -0.0
    got = bf16_to_f32(np.array([0x3F80, 0xC040, 0x0001, 0x8000], np.uint16))
    assert got[:3].tolist() == [1.0, -3.0, 2.0**-133] and np.signbit(got[3]) and got[3] == 0


def test_bytes_to_bytes_without_numpy_is_the_same():
    raw = ALL.tobytes()
    out = bf16_bytes_to_f32_bytes(raw)
    assert isinstance(out, bytearray) and len(out) == 2 * len(raw)
    assert bytes(out) == bf16_to_f32(ALL).tobytes()
    assert bf16_bytes_to_f32_bytes(b"") == bytearray()
