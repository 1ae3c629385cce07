"""quants/_numba/decode.py: BF16 -> float32 with the inf/NaN scan fused in."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: the numpy path runs instead")

from dflash_gguf.quants import _numba, dequantize  # noqa: E402


def test_numba_bf16_decode_every_pattern():
    # quants/gguf_file.py's BF16 input path: every one of the 2^16 patterns becomes the top half
    # of its float32, and the first inf/NaN (exponent all ones) is found wherever it is.
    decode = _numba.kernel("bf16_to_f32")
    h = np.arange(1 << 16, dtype=np.uint16)
    finite = h[(h & 0x7F80) != 0x7F80]
    x = np.empty(finite.size, np.float32)
    assert decode(finite, x.view(np.uint32)) == -1
    assert np.array_equal(x.view(np.uint32), finite.astype(np.uint32) << 16)
    assert np.array_equal(x, dequantize(finite.view(np.uint8), "bf16", finite.shape).view(np.float32))
    for bad in (0x7F80, 0xFF80, 0x7FC0, 0xFFFF, 0x7F81):
        y = finite[:5000].copy()
        y[4321], y[4900] = bad, 0x7F80
        assert decode(y, np.empty(y.size, np.uint32)) == 4321


def test_decode_of_nothing_and_a_bad_last_value():
    decode = _numba.kernel("bf16_to_f32")
    assert decode(np.empty(0, np.uint16), np.empty(0, np.uint32)) == -1
    y = np.array([0x3F80, 0x4000, 0xFF80], np.uint16)  # 1.0, 2.0, -inf
    out = np.zeros(3, np.uint32)
    assert decode(y, out) == 2
    assert out.view(np.float32)[:2].tolist() == [1.0, 2.0]  # the values are written whatever the scan finds
