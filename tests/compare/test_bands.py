"""Thresholds: --tolerance parsing and the default bands against ggml's own encodings."""
from __future__ import annotations

import numpy as np
import pytest

from dflash_gguf.compare import BANDS, parse_tolerances
from dflash_gguf.errors import UsageError


def test_parse_tolerances():
    assert parse_tolerances(["q4_K=0.05", "Q8_0=0.01", "0.2"]) == {"Q4_K": 0.05, "Q8_0": 0.01, "*": 0.2}
    for bad in ("q9_X=0.1", "q4_K=abc", "0", "-1", "q4_K=nan", "q4_k_m=0.1"):
        with pytest.raises(UsageError):
            parse_tolerances([bad])


@pytest.mark.parametrize("qtype", ["Q8_0", "Q6_K", "Q5_K", "Q5_1", "Q5_0", "Q4_K", "Q4_1", "Q4_0"])
def test_default_bands_hold_for_ggml_encodings(qtype):
    """ggml's own encoding of weight-like data stays inside the default bands (which the
    docs derive from the same kind of measurement at a larger size)."""
    from dflash_gguf.quants import block_size, dequantize, quantize

    rng = np.random.default_rng(7)
    b = BANDS[qtype]
    for x in (rng.standard_normal((32, 512)) * 0.02, rng.standard_t(3, (32, 512)) * 0.01,
              1 + 0.05 * rng.standard_normal((32, 512))):
        x = x.astype(np.float32)
        y = dequantize(quantize(x, qtype), qtype, x.shape)
        d = (y - x).astype(np.float64)
        assert np.sqrt((d ** 2).sum() / (x.astype(np.float64) ** 2).sum()) < b.rel_rms
        bs = block_size(qtype)
        assert (np.abs(d).reshape(-1, bs).max(1) / np.abs(x).reshape(-1, bs).max(1)).max() < b.block_err
