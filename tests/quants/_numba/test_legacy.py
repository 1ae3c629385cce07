"""quants/_numba/legacy.py: the compiled Q4_0, Q5_0, Q4_1 and Q5_1 against the numpy path
(quants/legacy.py), ggml's golden bytes and, where llama-cpp-python loads, the live ggml."""
from __future__ import annotations


import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: the numpy path runs instead")

from dflash_gguf.quants import _numba, quantize, resolve_qtype, row_nbytes  # noqa: E402
from dflash_gguf.quants._numba import legacy  # noqa: E402
from dflash_gguf.quants.base import trunc_to_int8_bits  # noqa: E402
from dflash_gguf.quants.legacy import Q4_0, Q4_1, Q5_0, Q5_1  # noqa: E402

from ..test_quants import CASES, _ggml_base, describe_mismatch  # noqa: E402
from .fresh import backends_agree  # noqa: E402

F32 = np.float32
CLASSES = {"q4_0": Q4_0, "q5_0": Q5_0, "q4_1": Q4_1, "q5_1": Q5_1}
TYPES = sorted(CLASSES)


def _numpy(name: str, blocks: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return CLASSES[name].quantize_blocks(blocks)


def _kernel(name: str, blocks: np.ndarray) -> np.ndarray:
    return _numba.run(getattr(legacy, name), blocks)


def _extreme_blocks(rng: np.random.Generator, n: int = 65536) -> np.ndarray:
    """(n, 32) finite blocks where every rounding and cast of the C matters: scales from the
    smallest subnormal to near FLT_MAX (so d is an fp16 subnormal, 0 or inf, and 1/d inexact,
    inf, or 0*inf = NaN in x*id), constant and zero blocks with both zero signs, ties of +-max,
    exact halves, mixed and one-signed blocks. Groups of 32 blocks (the kernel's lanes) get
    mixed kinds, and n need not be a multiple of 32."""
    k = n // 16
    normal = rng.standard_normal((n, 32))
    x = np.clip(normal * np.exp(rng.uniform(-105, 89, (n, 1))), -3.4e38, 3.4e38).astype(F32)
    x[0 * k:1 * k] = (normal[:k] * 1e-30).astype(F32)
    x[1 * k:2 * k] = (normal[:k] * 1e30).astype(F32)
    x[2 * k:3 * k] = (normal[:k] * 3e37).astype(F32)  # max - min overflows (Q4_1/Q5_1)
    sub = rng.integers(0, 1 << 23, (k, 32), dtype=np.uint32) >> rng.integers(0, 23, (k, 1), dtype=np.uint32)
    x[3 * k:4 * k] = (sub | (rng.integers(0, 2, (k, 32), dtype=np.uint32) << 31)).view(F32)  # subnormals
    vals = np.array([0, -0.0, 1e-45, -1e-45, 3e-45, 1e-40, -1e-39, 1e-30, 0.5, -2.5, 8.5, -16, 65504, 1e30, -3.4e38,
                     3.4e38], F32)
    x[4 * k:5 * k] = rng.choice(vals, (k, 32))
    x[5 * k:6 * k] = rng.choice(np.array([0, -0.0, 1, -1, 2], F32), (k, 32))  # zero extremes, both signs
    x[6 * k:7 * k] = x[6 * k:7 * k, :1]  # constant blocks
    x[7 * k:8 * k] = 0
    x[7 * k:8 * k:2] = -0.0
    # exact halves: multiples of 1/2 (times a power of two) with extremes that make d a power of two
    grid = rng.integers(-32, 33, (k, 32)).astype(F32) * F32(0.5)
    grid[:, 0] = rng.choice(np.array([-8, -16, 8, 16, 15, 31], F32), k)
    grid[::2, 1] = grid[::2, 0] - rng.choice(np.array([15, 31], F32), (k + 1) // 2)
    x[8 * k:9 * k] = grid * np.exp2(rng.integers(-140, 110, (k, 1))).astype(F32)
    # ties: +-m both of largest magnitude, in either order
    t = np.clip(normal[:k] * 0.5, -0.99, 0.99).astype(F32)
    t[:, 3], t[:, 20] = 1, -1
    t[::2, 3], t[::2, 20] = -1, 1
    x[9 * k:10 * k] = t * np.exp2(rng.integers(-130, 120, (k, 1))).astype(F32)
    x[10 * k:11 * k] = np.abs(x[10 * k:11 * k])
    x[11 * k:12 * k] = -np.abs(x[11 * k:12 * k])
    perm = rng.permutation(n)  # kinds mixed within the kernel's groups of lanes
    return np.ascontiguousarray(x[perm[: n - 7]])


def test_extreme_blocks_reach_the_casts_edges():
    # what makes the comparison on _extreme_blocks mean something: x*id + 8.5 (Q4_0) is NaN
    # (0 * an inf id) or inf, and exactly whole; d is an fp16 inf, 0 and subnormal; Q4_1's
    # max - min overflows. (|x*id| <= 8(1 + 2^-22) wherever id is finite: id is inf for d below
    # 2^-128, and d is at most 2^-22 off above it, so no finite level leaves int8.)
    x = _extreme_blocks(np.random.default_rng(1))
    with np.errstate(all="ignore"):
        amax = np.abs(x).max(axis=1)
        m = np.where(np.abs(x.max(axis=1)) >= amax, x.max(axis=1), x.min(axis=1))
        d = m / F32(-8)
        inv = np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0))
        v = x * inv[:, None] + F32(8.5)
        span = x.max(axis=1) - x.min(axis=1)
        d16 = d.astype(np.float16)
    assert np.isnan(v).any() and np.isinf(v).any()  # cast to INT32_MIN: level 0
    assert (trunc_to_int8_bits(v) == 0).sum() > (v < 1).sum()
    assert ((v == np.floor(v)) & (v > 0) & (v < 16)).any()  # a half before the + 8.5
    assert np.isinf(d16).any() and ((d16 == 0) & (d != 0)).any() and ((np.abs(d16) < 6.1e-5) & (d16 != 0)).any()
    assert np.isinf(span).any()
    assert x.shape[0] % legacy.LANES


@pytest.mark.parametrize("name", TYPES)
def test_kernel_matches_numpy_on_extremes(name):
    for seed in (5, np.random.SeedSequence().entropy):  # a fixed case and a fresh one each run
        x = _extreme_blocks(np.random.default_rng(seed))
        got, want = _kernel(name, x), _numpy(name, x)
        assert got.shape == want.shape == (x.shape[0], CLASSES[name].type_size)
        assert np.array_equal(got, want), f"seed {seed}: " + describe_mismatch(x, got, want, name)


@pytest.mark.parametrize("name", TYPES)
def test_kernel_matches_numpy_by_hand(name):
    # C's first-occurrence rules, which a max/min reduction would not see: of +-3 the first is
    # max (sets the sign of d); the first zero reached is min/max (its sign goes to fp16 m)
    x = np.zeros((6, 32), F32)
    x[0, :2] = [3, -3]
    x[1, :2] = [-3, 3]
    x[2, :3] = [1, -0.0, 0.0]
    x[3, :3] = [1, 0.0, -0.0]
    x[4, :3] = [-1, -0.0, 0.0]
    x[5] = -0.0
    got, want = _kernel(name, x), _numpy(name, x)
    assert np.array_equal(got, want), describe_mismatch(x, got, want, name)
    if name.endswith("_0"):
        assert got[0, 1] != got[1, 1]  # d = -max/8 (or /16): opposite signs
    else:
        assert got[2, 2:4].tolist() == [0x00, 0x80] and got[3, 2:4].tolist() == [0x00, 0x00]


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("nb", [0, 1, 31, 32, 33, 95])
def test_group_tails(name, nb):
    x = (np.random.default_rng(nb).standard_normal((nb, 32)) * 0.02).astype(F32)
    got = _kernel(name, x)
    assert got.shape == (nb, CLASSES[name].type_size)
    if nb:
        assert np.array_equal(got, _numpy(name, x))


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("case", CASES)
def test_golden_bytes(golden, case, name):
    # numba == numpy == ggml's bytes, the kernel both called directly and as quantize() runs it
    x = golden[f"{case}/input"]
    want = golden[f"{case}/{name}/bytes"].reshape(-1, CLASSES[name].type_size)
    blocks = x.reshape(-1, 32)
    assert np.array_equal(_numpy(name, blocks), want), describe_mismatch(x, _numpy(name, blocks), want, name)
    got = _kernel(name, blocks)
    assert np.array_equal(got, want), describe_mismatch(x, got, want, name)
    prev = _numba.set_enabled(True)
    try:
        assert CLASSES[name]._kernel() is getattr(legacy, name)
        got = quantize(x, name)
    finally:
        _numba.set_enabled(prev)
    assert np.array_equal(got.reshape(want.shape), want), describe_mismatch(x, got, want, name)


@pytest.mark.parametrize("name", TYPES)
def test_backends_agree_on_fresh_data(name):
    backends_agree(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", TYPES)
def test_live_ggml(name):
    lib = _ggml_base()
    t = resolve_qtype(name)
    rng = np.random.default_rng()
    for x in (_extreme_blocks(rng, 65536 + 7).reshape(-1, 1024),
              (rng.standard_normal((2048, 1024)) * np.exp(rng.uniform(-8, 3, (2048, 1)))).astype(F32)):
        want = np.zeros(x.shape[0] * row_nbytes(t, x.shape[1]), np.uint8)
        lib.ggml_quantize_init(int(t))
        lib.ggml_quantize_chunk(int(t), x.ctypes.data, want.ctypes.data, 0, x.shape[0], x.shape[1], None)
        got = _kernel(name, x.reshape(-1, 32))
        assert np.array_equal(got.reshape(-1), want), describe_mismatch(x, got, want, name)
