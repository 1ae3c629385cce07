"""quants/_numba/iq4.py: the compiled IQ4_NL and IQ4_XS against the numpy path (quants/iq4.py),
the scalar port of the C in tests/quants/test_iq4.py and, where llama-cpp-python loads, the live
ggml (``ggml_quantize_chunk`` with imatrix NULL, which is what llama-quantize runs)."""
from __future__ import annotations


import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: the numpy path runs instead")

from dflash_gguf.quants import _numba, quantize  # noqa: E402
from dflash_gguf.quants._numba import iq4  # noqa: E402
from dflash_gguf.quants.iq4 import (  # noqa: E402
    GROUP_MAX_EPS,
    IQ4_NL,
    IQ4_XS,
    KVALUES,
    best_index_int8,
    fit_scales,
)

from ..test_iq4 import (  # noqa: E402
    MIDPOINTS,
    _cases,
    _nl_final_ties,
    _rows,
    _tie_blocks,
    c_best_index_int8,
    c_iq4_impl,
)
from ..test_q3_k import ggml_quantize  # noqa: E402
from ..test_quants import _ggml_base, describe_mismatch  # noqa: E402
from .fresh import backends_agree  # noqa: E402

F32 = np.float32
CLASSES = {"iq4_nl": IQ4_NL, "iq4_xs": IQ4_XS}
TYPES = sorted(CLASSES)


def _numpy(name: str, blocks: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return CLASSES[name].quantize_blocks(blocks)


def _kernel(name: str, blocks: np.ndarray) -> np.ndarray:
    return _numba.run(getattr(iq4, name), blocks)


def _blocks(name: str, values: np.ndarray) -> np.ndarray:
    return _rows(values, CLASSES[name].block_size)


def _extreme_values(rng: np.random.Generator, n: int = 1 << 18) -> np.ndarray:
    """n float32 values (a multiple of 256) in 32-value sub-blocks, each of one kind, shuffled
    so that the kernel's lane groups and IQ4_XS's super-blocks mix kinds: scales from subnormal
    to near FLT_MAX (sums that underflow to a 0 scale, or overflow: +-inf and NaN scales, whose
    NaN levels and IQ4_XS's -inf*0 = NaN dl C handles), amax just below, at and above
    GROUP_MAX_EPS, constant, all-zero (both signs) and one-signed sub-blocks, ties of +-max in
    either order, bf16-representable values, outliers, and exact level ties (in the search and
    in the final levels) from test_iq4's generators. (1/scale cannot overflow here: a kept
    sub-block has amax >= 1e-15, so its scale is either 0 or far above 2^-128.)"""
    ns = n // 32
    k = ns // 16
    normal = rng.standard_normal((ns, 32))
    x = (normal * np.exp(rng.uniform(-100, 88, (ns, 1)))).clip(-3.4e38, 3.4e38).astype(F32)
    x[0 * k:1 * k] = (normal[:k] * np.exp(rng.uniform(25, 45, (k, 1)))).astype(F32)  # sums overflow: inf/NaN scales
    sub = rng.integers(0, 1 << 23, (k, 32), dtype=np.uint32) >> rng.integers(0, 23, (k, 1), dtype=np.uint32)
    x[1 * k:2 * k] = (sub | (rng.integers(0, 2, (k, 32), dtype=np.uint32) << 31)).view(F32)  # subnormals
    eps = np.array([np.nextafter(GROUP_MAX_EPS, F32(0)), GROUP_MAX_EPS, np.nextafter(GROUP_MAX_EPS, F32(1))], F32)
    e = rng.choice(eps, (k, 1)) * rng.choice(F32([1, -1]), (k, 1))
    x[2 * k:3 * k] = (rng.uniform(-1, 1, (k, 32)) * e).astype(F32)
    x[2 * k:3 * k, 7] = e[:, 0]
    x[3 * k:4 * k] = (normal[:k] * np.exp(rng.uniform(-35, -33, (k, 1)))).astype(F32)  # w*q*x subnormal
    vals = F32([0, -0.0, 1e-45, -1e-45, 1e-40, 1e-30, 1e-15, -2.5, 65504, 1e12, -3e13, 1e20, -3.4e38, 3.4e38])
    x[4 * k:5 * k] = rng.choice(vals, (k, 32))
    x[5 * k:6 * k] = rng.choice(F32([0, -0.0, 1, -1, 2]), (k, 32))
    x[6 * k:7 * k] = x[6 * k:7 * k, :1]  # constant
    x[7 * k:8 * k] = rng.choice(F32([0, -0.0]), (k, 1))  # all zeros, either sign
    t = np.clip(normal[:k] * 0.5, -0.99, 0.99).astype(F32)  # +-max ties, either order
    t[:, 3], t[:, 20] = 1, -1
    t[::2, 3], t[::2, 20] = -1, 1
    x[8 * k:9 * k] = t * np.exp2(rng.integers(-120, 120, (k, 1))).astype(F32)
    x[9 * k:10 * k] = ((normal[:k] * 0.02).astype(F32).view(np.uint32) & 0xFFFF0000).view(F32)  # bf16
    out = (normal[:k] * 0.02).astype(F32)
    out[rng.random((k, 32)) < 0.03] *= F32(300)
    x[10 * k:11 * k] = out
    x[11 * k:12 * k] = np.abs(x[11 * k:12 * k])
    x[12 * k:13 * k] = -np.abs(x[12 * k:13 * k])
    x[13 * k:14 * k] = _nl_final_ties(rng, k)
    # sub-blocks shuffled, then whole super-blocks of exact ties (IQ4_XS's final levels tie
    # only within _tie_blocks' super-blocks) shuffled in among them
    x = x[rng.permutation(ns)][: ns - 2 * k]
    groups = np.concatenate([x.reshape(-1, 8, 32), _tie_blocks(rng, 2 * k // 8)])
    return np.ascontiguousarray(groups[rng.permutation(groups.shape[0])].reshape(-1))


def test_extreme_values_reach_the_edges():
    # what makes the comparison on _extreme_values mean something: scales of every kind (+-inf,
    # NaN, tiny), amax on both sides of GROUP_MAX_EPS, exact ties at midpoints
    x = _extreme_values(np.random.default_rng(1)).reshape(-1, 32)
    with np.errstate(all="ignore"):
        s = fit_scales(np.ascontiguousarray(x.T))
        amax = np.abs(x).max(axis=1)
        y = (F32(1) / s)[:, None] * x
    kept = amax >= GROUP_MAX_EPS
    assert np.isnan(s).sum() > 10 and (np.isinf(s) & (s > 0)).any() and (np.isinf(s) & (s < 0)).any()
    assert (amax == GROUP_MAX_EPS).any() and ((amax < GROUP_MAX_EPS) & (amax > 0)).any()
    assert (kept & (s != 0) & (np.abs(s) < F32(1e-16))).any()  # scales near the smallest a kept one has
    assert np.isin(y[np.isfinite(s) & (s != 0)], MIDPOINTS).sum() > 100
    # IQ4_XS: super-blocks whose d is -inf (an infinite scale is the first absmax), so every
    # l is 0 and dl = -inf*0 = NaN
    assert np.isinf(s.reshape(-1, 8)).any(axis=1).sum() > 3
    assert x.shape[0] % 256 == 0


@pytest.mark.parametrize("name", TYPES)
def test_kernel_matches_numpy_on_extremes(name):
    for seed in (5, np.random.SeedSequence().entropy):  # a fixed case and a fresh one each run
        x = _blocks(name, _extreme_values(np.random.default_rng(seed)))
        x = x[: x.shape[0] - 3]  # not a whole number of lane groups
        got, want = _kernel(name, x), _numpy(name, x)
        assert got.shape == want.shape == (x.shape[0], CLASSES[name].type_size)
        assert np.array_equal(got, want), f"seed {seed}: " + describe_mismatch(x, got, want, name)


@pytest.mark.parametrize("name", TYPES)
def test_kernel_matches_numpy_on_test_iq4_cases(name):
    for case, values in _cases(np.random.default_rng(2024)):
        x = _blocks(name, values)
        got, want = _kernel(name, x), _numpy(name, x)
        assert np.array_equal(got, want), f"{case}: " + describe_mismatch(x, got, want, name)


@pytest.mark.parametrize("name", TYPES)
def test_kernel_matches_the_scalar_c_port(name):
    # a few sub-blocks of each extreme kind against test_iq4's line-by-line port of the C
    bs = CLASSES[name].block_size
    x = _blocks(name, _extreme_values(np.random.default_rng(9), 1 << 15))
    x = x[np.random.default_rng(3).choice(x.shape[0], 48 if bs == 256 else 384, replace=False)]
    got = _kernel(name, x)
    with np.errstate(all="ignore"):
        want = np.frombuffer(b"".join(c_iq4_impl(row, bs) for row in x), np.uint8).reshape(got.shape)
    assert np.array_equal(got, want), describe_mismatch(x, got, want, name)


@pytest.mark.parametrize("name", TYPES)
def test_kernel_matches_numpy_by_hand(name):
    # first-occurrence of +-max (sets the scale's sign), zero blocks of either sign, amax at the
    # GROUP_MAX_EPS edge, a NaN scale (IQ4_NL: fp16 0xFE00, every level 15)
    x = np.zeros((8, 256), F32)
    x[0, :2] = [3, -3]
    x[1, :2] = [-3, 3]
    x[2] = -0.0
    x[3, 5] = GROUP_MAX_EPS
    x[4, 5] = -np.nextafter(GROUP_MAX_EPS, F32(0))
    x[5] = F32(1e18) * np.random.default_rng(0).standard_normal(256).astype(F32)
    x[6] = np.tile(KVALUES, 16) * F32(0.25)
    x[7] = np.tile(MIDPOINTS, 18)[:256] * F32(2) ** -20
    b = _blocks(name, x)
    got, want = _kernel(name, b), _numpy(name, b)
    assert np.array_equal(got, want), describe_mismatch(b, got, want, name)
    if name == "iq4_nl":
        assert got[0, 1] != got[1, 1]
        assert (got[5 * 8:6 * 8, :2] == [0x00, 0xFE]).all() and (got[5 * 8:6 * 8, 2:] == 0xFF).all()


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("nb", [0, 1, 3, 4, 5, 31, 32, 33, 95])
def test_group_tails(name, nb):
    bs = CLASSES[name].block_size
    x = (np.random.default_rng(nb).standard_normal((nb, bs)) * 0.02).astype(F32)
    got = _kernel(name, x)
    assert got.shape == (nb, CLASSES[name].type_size)
    if nb:
        assert np.array_equal(got, _numpy(name, x))


def test_best_index_without_a_table():
    # the kernels' best_index_int8 (a count of midpoints) and the search's value of it, against
    # the C search: every midpoint and its float32 neighbours, table values, ends, +-0, +-inf,
    # NaN (15, as C's search ends), random values
    around = np.concatenate([MIDPOINTS, KVALUES, F32([-127.5, 113.5, -1e30, 1e30, 0, -0.0, 1e-45])])
    x = np.concatenate([around, np.nextafter(around, F32(np.inf)), np.nextafter(around, F32(-np.inf)),
                        F32([np.inf, -np.inf, np.nan]), np.random.default_rng(1).uniform(-140, 130, 2000)])
    for v in x.astype(F32):
        want = c_best_index_int8(v)
        assert iq4._index(v) == want, v
        if np.isfinite(v):
            assert iq4._value(v) == KVALUES[want], v


def test_best_index_near_every_midpoint():
    # where the C's two float32 subtractions could round: every float within 2^16 ulps of each
    # midpoint, and 2^20 values across the table, against the numpy path's literal
    # `x - val[mu-1] < val[mu] - x` (itself checked against the C search in test_iq4.py)
    import numba

    @numba.njit
    def both(x):
        idx = np.empty(x.size, np.int32)
        val = np.empty(x.size, np.float32)
        for i in range(x.size):
            idx[i] = iq4._index(x[i])
            val[i] = iq4._value(x[i])
        return idx, val

    steps = np.arange(-(1 << 16), 1 << 16, dtype=np.int32)
    near = (MIDPOINTS.view(np.int32)[:, None] + steps).reshape(-1).view(F32)
    x = np.concatenate([near, np.random.default_rng(2).uniform(-135, 120, 1 << 20).astype(F32)])
    idx, val = both(x)
    want = best_index_int8(x)
    assert np.array_equal(idx, want) and np.array_equal(val, KVALUES[want])


@pytest.mark.parametrize("name", TYPES)
def test_backends_agree_on_fresh_data(name):
    backends_agree(name)


@pytest.mark.parametrize("name", TYPES)
def test_quantize_runs_the_kernel(name):
    x = (np.random.default_rng(4).standard_normal((8, 512)) * 0.02).astype(F32)
    prev = _numba.set_enabled(True)
    try:
        assert CLASSES[name]._kernel() is getattr(iq4, name)
        got = quantize(x, name)
    finally:
        _numba.set_enabled(prev)
    want = _numpy(name, _blocks(name, x))
    assert np.array_equal(got.reshape(want.shape), want)


@pytest.mark.slow
@pytest.mark.parametrize("name", TYPES)
def test_live_ggml(name):
    lib = _ggml_base()
    rng = np.random.default_rng()
    datasets = [("extremes", _extreme_values(rng)),
                ("normal", rng.standard_normal(1 << 20) * np.exp(rng.uniform(-8, 3, 256)).repeat(4096))]
    datasets += list(_cases(np.random.default_rng(2024)))
    for case, values in datasets:
        x = _rows(values, 4096)
        want = ggml_quantize(lib, x, name)
        got = _kernel(name, _blocks(name, x))
        assert np.array_equal(got.reshape(-1), want), f"{case}: " + describe_mismatch(x, got, want, name)
