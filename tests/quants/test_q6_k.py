"""quants/q6_k.py (the numpy path of Q6_K): against a scalar line-by-line port of ggml-quants.c
(tests/quants/c_ports.py), itself held against ggml's golden bytes."""
from __future__ import annotations

import numpy as np
import pytest

from dflash_gguf.quants.base import nearest_int
from dflash_gguf.quants.q6_k import Q6_K, _first_absmax_scales, make_qx_quants
from tests.conftest import SHARED

from . import c_ports

F32 = np.float32
GOLDEN = SHARED / "golden" / "ggml_quant_golden.npz"


def _fresh_blocks(rng: np.random.Generator) -> np.ndarray:
    """Six super-blocks: Gaussian, one-signed, zero and constant sub-blocks, a whole zero block
    (stored as zeros), bf16-rounded heavy tails, subnormal and huge values."""
    x = rng.standard_normal((6, 256)).astype(np.float32)
    x[1] = -np.abs(x[1])
    x[1, :16] = 0
    x[1, 16:32] = 0.5
    x[2] = 0
    x[3] = (rng.standard_t(2, 256).astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)
    x[4] *= F32(1e-39)
    x[5] *= F32(1e30)
    return x


def test_make_qx_quants_is_the_c_loop():
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((16, 48)) * np.exp(rng.uniform(-10, 10, 48))).astype(np.float32)
    x[:, 0] = 0  # all zero: scale 0, L = 0
    x[:, 1] = -3  # constant
    x[:, 2] = np.abs(x[:, 2])
    x[:, 3] = rng.integers(-32, 32, 16)  # on the level grid
    x[:, 4] = [3, -3] + [1] * 14  # +-max tie: the first one is max
    with np.errstate(all="ignore"):
        scale, l_iscale, zero = make_qx_quants(x, 32)
    levels = np.clip(nearest_int(x * l_iscale), -32, 31) + 32
    levels[:, zero] = 0
    for c in range(x.shape[1]):
        want_scale, want_L = c_ports.make_qx_quants(16, 32, list(x[:, c]))
        assert F32(scale[c]).view(np.uint32) == F32(want_scale).view(np.uint32), c
        assert levels[:, c].tolist() == want_L, c
    assert zero.tolist()[:2] == [True, False]


def test_first_absmax_scales_skips_nan_like_the_c_comparison():
    # `if (abs_scale > max_abs_scale)` from 0: NaN never compares greater; the first of equal magnitudes wins
    s = F32([[0.5, np.nan, -2.0, 2.0], [np.nan, np.nan, np.nan, np.nan], [-1.0, 1.0, 0.0, -0.5]])
    amax, mx = _first_absmax_scales(s)
    assert amax.tolist() == [2.0, 0.0, 1.0] and mx.tolist() == [-2.0, 0.0, -1.0]


def test_blocks_match_the_c_port_on_fresh_data():
    x = _fresh_blocks(np.random.default_rng(66))
    with np.errstate(all="ignore"):
        got = Q6_K.quantize_blocks(x)
    want = c_ports.quantize_row_q6_K(x)
    bad = np.flatnonzero((got != want).any(axis=1))
    assert bad.size == 0, f"blocks {bad.tolist()} differ from the C port"
    assert not got[2].any()  # memset(&y[i], 0, sizeof(block_q6_K))


def test_the_c_port_reproduces_ggml_golden_bytes():
    if not GOLDEN.is_file():
        pytest.skip(f"golden file {GOLDEN} not found (it lives in the shared/ checkout next to the repo)")
    with np.load(GOLDEN) as z:
        for case in ("normal_w", "edge"):
            x = z[f"{case}/input"][:1]
            assert np.array_equal(c_ports.quantize_row_q6_K(x).reshape(-1), z[f"{case}/q6_K/bytes"][:4 * 210]), case
