"""Fresh data for holding a compiled kernel against the numpy path (two independent
implementations of the same C): rows of very different scales, bf16-representable rows, zero
and constant sub-blocks, positive-only rows; 2^20 new values each run."""
from __future__ import annotations

import numpy as np

from dflash_gguf.quants import _numba, quantize

from ..test_quants import describe_mismatch


def fresh_rows() -> np.ndarray:
    rng = np.random.default_rng()
    x = (rng.standard_normal((256, 4096)) * np.exp(rng.uniform(-25, 8, (256, 1)))).astype(np.float32)
    x[::5] = (x[::5].view(np.uint32) & 0xFFFF0000).view(np.float32)
    x[1::7, 64:96] = 0
    x[2::7, :256] = 0.25
    x[3::7] = np.abs(x[3::7])
    return x


def backends_agree(qtype: str) -> None:
    x = fresh_rows()
    prev = _numba.set_enabled(False)
    try:
        want = quantize(x, qtype)
        _numba.set_enabled(True)
        got = quantize(x, qtype)
    finally:
        _numba.set_enabled(prev)
    assert np.array_equal(got, want), describe_mismatch(x, got, want, qtype)
