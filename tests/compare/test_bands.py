"""Thresholds: --tolerance parsing and the default bands against ggml's own encodings."""
from __future__ import annotations

import numpy as np
import pytest

from dflash_gguf.compare import BANDS, parse_tolerances
from dflash_gguf.compare.bands import FALLBACK_BAND, FLOAT_TYPES, band
from dflash_gguf.errors import UsageError


def test_parse_tolerances():
    assert parse_tolerances(["q4_K=0.05", "Q8_0=0.01", "0.2"]) == {"Q4_K": 0.05, "Q8_0": 0.01, "*": 0.2}
    for bad in ("q9_X=0.1", "q4_K=abc", "0", "-1", "q4_K=nan", "q4_k_m=0.1"):
        with pytest.raises(UsageError):
            parse_tolerances([bad])


QUANTIZED = [name for name, b in BANDS.items() if b.block_err is not None]


def test_every_type_quantize_writes_has_its_own_band():
    """One table, BANDS, holds a measured band for every type quantize can write: none of them
    falls back to the generic band, and the float types are judged element by element."""
    from dflash_gguf.quants import QUANTIZE_TYPES

    assert {t.name for t in QUANTIZE_TYPES} == set(BANDS)
    for t in QUANTIZE_TYPES:
        b = band(t)
        assert b is BANDS[t.name] and b is not FALLBACK_BAND
        assert (b.elem_rel is not None) == (t in FLOAT_TYPES) and (b.block_err is None) == (t in FLOAT_TYPES)


@pytest.mark.parametrize("qtype", QUANTIZED)
def test_default_bands_hold_for_ggml_encodings_and_are_not_loose(qtype):
    """ggml's own encoding of weight-like data stays inside the default bands (which the docs
    derive from the same kind of measurement at a larger size), and the bands are no looser
    than a small multiple of what it loses there: 1.5x / 2x the worst of six distributions is
    the rule, so a band over 2.5x (relative RMS) or 3.5x (block error) the worst of these three
    would no longer be telling a faithful file from a damaged one."""
    from dflash_gguf.quants import block_size, dequantize, quantize

    rng = np.random.default_rng(7)
    b = BANDS[qtype]
    worst_rel = worst_block = 0.0
    for x in (rng.standard_normal((32, 512)) * 0.02, rng.standard_t(3, (32, 512)) * 0.01,
              1 + 0.05 * rng.standard_normal((32, 512))):
        x = x.astype(np.float32)
        y = dequantize(quantize(x, qtype), qtype, x.shape)
        d = (y - x).astype(np.float64)
        rel = np.sqrt((d ** 2).sum() / (x.astype(np.float64) ** 2).sum())
        bs = block_size(qtype)
        block = (np.abs(d).reshape(-1, bs).max(1) / np.abs(x).reshape(-1, bs).max(1)).max()
        assert rel < b.rel_rms and block < b.block_err
        worst_rel, worst_block = max(worst_rel, rel), max(worst_block, block)
    assert b.rel_rms <= 2.5 * worst_rel and b.block_err <= 3.5 * worst_block
