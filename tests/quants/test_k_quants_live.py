"""Q4_K / Q5_K against the live C library on data built to break shortcuts.

The numba kernels take float shortcuts where a range check allows and ggml's literal integer
arithmetic otherwise (the fit's levels, the super-block's requantized levels), and move data
in 8x8 register tiles where a group of sub-blocks is whole. The rows here sit on those edges:
values on level grids and half-way between levels (ties), flat sub-blocks, single outliers,
many equal values, subnormal, tiny and huge magnitudes, offsets that overflow the fp16 dmin,
plus a few MB of random data. Each case is held against ggml_quantize_chunk from
llama-cpp-python's libggml-base.so, and the test checks that the literal requantization path
really ran (ggml's bytes say which sub-blocks take it).
"""
from __future__ import annotations

import numpy as np
import pytest

from dflash_gguf.quants import quantize, resolve_qtype, row_nbytes

from .test_quants import _ggml_base, describe_mismatch

# common.NEAREST_INT_LIMIT: beyond it the requantized level is nearest_int's bit trick, literally
_LIMIT = np.float32(4194303.0)


def _ggml(lib, x: np.ndarray, qtype: str) -> np.ndarray:
    t = resolve_qtype(qtype)
    want = np.zeros(x.shape[0] * row_nbytes(t, x.shape[1]), np.uint8)
    lib.ggml_quantize_init(int(t))
    lib.ggml_quantize_chunk(int(t), x.ctypes.data, want.ctypes.data, 0, x.shape[0], x.shape[1], None)
    return want


def _subblock_scales(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(d*ls, dmin*lm) per sub-block (nb, 8) of Q4_K/Q5_K blocks y (nb, type_size), as the
    requantization reads them back (get_scale_min_k4, fp16 d and dmin)."""
    d = y[:, 0:2].copy().view(np.float16).astype(np.float32)  # may be inf: fp16 overflow
    dmin = y[:, 2:4].copy().view(np.float16).astype(np.float32)
    q = y[:, 4:16].astype(np.int32)
    ls = np.concatenate([q[:, 0:4] & 63, (q[:, 8:12] & 0xF) | ((q[:, 0:4] >> 6) << 4)], axis=1)
    lm = np.concatenate([q[:, 4:8] & 63, (q[:, 8:12] >> 4) | ((q[:, 4:8] >> 6) << 4)], axis=1)
    with np.errstate(invalid="ignore"):  # inf * 0
        return d * ls.astype(np.float32), dmin * lm.astype(np.float32)


def _literal_requant(x: np.ndarray, y: np.ndarray) -> int:
    """How many sub-blocks the kernel requantizes with nearest_int literally: d != 0 and
    (x + dm)/d beyond NEAREST_INT_LIMIT (or NaN) at the sub-block's smallest or largest x."""
    xs = x.reshape(-1, 8, 32)
    d, dm = _subblock_scales(y.reshape(xs.shape[0], -1))
    with np.errstate(all="ignore"):
        lo = (xs.min(axis=2) + dm) / d
        hi = (xs.max(axis=2) + dm) / d
        fast = (np.abs(lo) <= _LIMIT) & (np.abs(hi) <= _LIMIT)
    return int(((d != 0) & ~fast).sum())


def _bf16(v: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(v, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)


def _cases(rng: np.random.Generator, nmax: int):
    """(name, rows of 1024 float32): every sub-block of 32 built to one pattern."""
    n = 48 * 1024
    sub = (n // 32, 32)
    k = rng.integers(0, nmax + 1, sub).astype(np.float32)
    step = np.exp2(rng.integers(-20, 20, (sub[0], 1))).astype(np.float32)
    yield "on the level grid", k * step - rng.integers(0, 4, (sub[0], 1)) * step
    yield "half-way between levels", (k + np.float32(0.5)) * step
    yield "half-integers", rng.integers(-16, 17, sub) / np.float32(2)
    yield "flat sub-blocks", np.repeat(rng.choice([0, 1, -3.5, 1e-40, -7e30, 0.02], (sub[0], 1)), 32, axis=1)
    outlier = np.zeros(sub, np.float32)
    outlier[np.arange(sub[0]), rng.integers(0, 32, sub[0])] = rng.choice([1, -1, 1e20, -3e-39], sub[0])
    yield "one outlier", outlier + rng.choice([0, 1e-3], (sub[0], 1)) * rng.standard_normal(sub)
    yield "few distinct values", rng.choice(rng.standard_normal(3), sub)
    normal = rng.standard_normal(sub)
    yield "subnormal", normal * 1e-40
    yield "tiny", normal * 1e-33
    yield "huge", normal * 1e30
    yield "extremes", rng.choice(np.array([3e38, -3e38, 1e-45, 0, 1]), sub)
    yield "offset overflowing dmin", -5e6 + normal
    yield "positive offset", 5e6 + normal
    yield "a scale per sub-block", normal * np.exp(rng.uniform(-40, 40, (sub[0], 1)))
    yield "bf16 weights", _bf16(normal * 0.02)
    big = 1 << 20  # 4 MiB of float32: Gaussian, heavy-tailed, bf16-rounded, uniform rows
    mix = np.concatenate([
        rng.standard_normal(big // 4), rng.standard_t(2, big // 4),
        _bf16(rng.standard_normal(big // 4) * 0.02), rng.uniform(-1, 1, big // 4),
    ])
    yield "4 MiB random", mix


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["numba", "numpy"], indirect=True)
@pytest.mark.parametrize("qtype,nmax", [("q4_K", 15), ("q5_K", 31)])
def test_live_ggml_on_adversarial_subblocks(qtype, nmax, backend):
    lib = _ggml_base()
    literal = 0
    for name, x in _cases(np.random.default_rng(2024), nmax):
        x = np.ascontiguousarray(np.asarray(x, dtype=np.float32).reshape(-1, 1024))
        want = _ggml(lib, x, qtype)
        got = quantize(x, qtype)
        assert np.array_equal(got.reshape(-1), want), f"{name}: " + describe_mismatch(x, got, want, qtype)
        literal += _literal_requant(x, want.reshape(got.shape[0] * 4, -1))
    assert literal > 0, "no sub-block reached the literal requantization: the cases lost their edge"


