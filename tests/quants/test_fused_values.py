"""quantize_finite_with_values: the K-quant kernels' bytes, and what those bytes dequantize to
written by the same kernel pass (a compare's y without a second pass over the bytes).

The values must be dequantize()'s bit for bit (compared as uint32, so -0.0 and NaN payloads
count) and the bytes quantize_finite's, on the adversarial sub-blocks of the live-ggml tests
plus all-zero blocks and group tails, with the `if (!d)` branch (levels kept from the search,
d * sc == 0) shown to run.
"""
from __future__ import annotations

import numpy as np
import pytest

from dflash_gguf.compare.kernels import dequantize as fast_dequantize
from dflash_gguf.quants import _numba, dequantize, quantize_finite, quantize_finite_with_values, resolve_qtype

from .test_k_quants_live import _bf16, _cases, _subblock_scales

pytestmark = pytest.mark.skipif(not _numba.AVAILABLE, reason="numba is not installed")

TYPES = {"q4_K": 15, "q5_K": 31, "q6_K": 32}  # type -> nmax of its levels (for _cases' grids)


def _extra_cases(rng: np.random.Generator):
    """What _cases lacks: whole zero blocks (Q6_K's memset block), Gaussian and heavy-tailed rows."""
    z = rng.standard_normal((4, 1024)).astype(np.float32)
    z[0] = 0  # four whole zero blocks
    z[2, 256:512] = 0
    yield "zero blocks", z
    yield "all zero", np.zeros((2, 1024), np.float32)
    yield "gaussian", rng.standard_normal((16, 1024))
    yield "heavy-tailed", rng.standard_t(1.5, (16, 1024))
    yield "bf16 gaussian", _bf16(rng.standard_normal((16, 1024)) * 0.02)


def _q6_subblock_d(y: np.ndarray) -> np.ndarray:
    """d * scale per sub-block (nb, 16) of Q6_K blocks y (nb, 210), as dequantize reads them."""
    d = y[:, 208:210].copy().view(np.float16).astype(np.float32)
    with np.errstate(invalid="ignore"):
        return d * y[:, 192:208].view(np.int8).astype(np.float32)


def _fused(x: np.ndarray, qtype: str) -> tuple[np.ndarray, np.ndarray]:
    out = np.full(x.size + 7, np.float32(1.5))  # longer than needed: the tail stays untouched
    q = quantize_finite_with_values(x, qtype, out)
    assert q is not None and q.dtype == np.uint8 and q.ndim == 1
    assert np.all(out[x.size:] == np.float32(1.5))
    return q, out[:x.size]


def _check(x: np.ndarray, qtype: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    x = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    q, vals = _fused(x, qtype)
    assert np.array_equal(q, quantize_finite(x, qtype)), f"{qtype} {name}: bytes differ"
    with np.errstate(all="ignore"):  # inf scales (huge values) give inf * 0 = NaN, as in ggml
        want = dequantize(q, qtype, x.shape).reshape(-1)
    bad = np.flatnonzero(vals.view(np.uint32) != want.view(np.uint32))
    assert bad.size == 0, f"{qtype} {name}: {bad.size} values differ, first at {bad[0]}: {vals[bad[0]]!r} vs {want[bad[0]]!r}"
    t = resolve_qtype(qtype)
    if x.shape[-1] % 256 == 0:  # the compare's own kernels (what the fused path replaces) agree too
        rows = x.size // x.shape[-1]
        ours = fast_dequantize(q, t, rows, x.shape[-1])
        if ours is not None:
            assert np.array_equal(ours.reshape(-1).view(np.uint32), vals.view(np.uint32))
    return q, vals


@pytest.mark.parametrize("qtype", sorted(TYPES))
def test_fused_values_are_the_bytes_dequantized(qtype):
    rng = np.random.default_rng(11)
    kept = signed_zeros = 0
    cases = [*_cases(rng, TYPES[qtype]), *_extra_cases(rng)]
    for name, x in cases:
        x = np.asarray(x, dtype=np.float32).reshape(-1, 1024)
        q, vals = _check(x, qtype, name)
        nb = x.size // 256
        y = q.reshape(nb, -1)
        # the `if (!d)` branch: sub-blocks whose read-back d * scale is 0 (kept levels), in
        # blocks with a nonzero d
        if qtype == "q6_K":
            sub = _q6_subblock_d(y)
            hit = (sub == 0) & (y[:, 208:210].view(np.uint16) != 0)
            v = vals.reshape(nb, 16, 16)[hit]
            signed_zeros += int(np.any(np.signbit(v)) and np.any(~np.signbit(v)))  # kept levels < 32 give -0.0
        else:
            sub, dm = _subblock_scales(y)
            hit = (sub == 0) & (y[:, 0:2].view(np.uint16) != 0)
            signed_zeros += int(np.any(vals.reshape(nb, 8, 32)[hit & (dm != 0)] != 0))
        kept += int(hit.sum())
    assert kept > 0, "no sub-block took the `if (!d)` branch: the cases lost their edge"
    assert signed_zeros > 0, "the `if (!d)` sub-blocks never had values that tell their levels apart"


@pytest.mark.parametrize("qtype", sorted(TYPES))
@pytest.mark.parametrize("shape", [(256,), (1, 256), (3, 256), (1, 1280), (5, 512), (2, 2304)])
def test_sizes_and_group_tails(qtype, shape):
    # one block, and block counts around the kernels' groups of 4 super-blocks (tails of lanes)
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * rng.uniform(1e-3, 10)).astype(np.float32)
    _check(x, qtype, str(shape))


def test_no_fused_path_says_none():
    x = np.random.default_rng(0).standard_normal((2, 256)).astype(np.float32)
    out = np.full(x.size, np.float32(7))
    for qtype in ("q8_0", "f16", "bf16", "q4_0"):  # types without the fused kernel
        assert quantize_finite_with_values(x, qtype, out) is None
    assert quantize_finite_with_values(x[:, :128].copy(), "q4_K", out) is None  # a partial block
    assert quantize_finite_with_values(x.astype(np.float64), "q4_K", out) is None
    assert quantize_finite_with_values(np.asfortranarray(np.ones((256, 2), np.float32)), "q6_K", out) is None
    prev = _numba.set_enabled(False)
    try:  # the numpy path has no fused variant
        assert quantize_finite_with_values(x, "q4_K", out) is None
    finally:
        _numba.set_enabled(prev)
    assert np.all(out == 7)
    for bad in (np.empty(x.size, np.float64), np.empty(x.size - 1, np.float32), np.empty((2, 256), np.float32),
                np.empty(2 * x.size, np.float32)[::2]):
        with pytest.raises(ValueError):
            quantize_finite_with_values(x, "q4_K", bad)
    ro = np.empty(x.size, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        quantize_finite_with_values(x, "q6_K", ro)


def test_read_only_input_reuses_the_kernel():
    # a memmap's chunk is read-only: copied rather than compiled for, as _numba.run does
    x = np.random.default_rng(1).standard_normal((4, 256)).astype(np.float32)
    x.flags.writeable = False
    kernel = _numba.kernel("q4_k_values")
    _check(x, "q4_K", "read-only")
    assert all(sig[0].mutable for sig in kernel.signatures)
