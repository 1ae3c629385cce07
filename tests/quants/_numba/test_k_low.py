"""quants/_numba/k_low.py: the compiled Q3_K and Q2_K against the numpy path (quants/q3_k.py,
quants/q2_k.py), the scalar ports of ggml-quants.c in test_q3_k.py / test_q2_k.py and, where
llama-cpp-python loads, the live ggml."""
from __future__ import annotations


import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: the numpy path runs instead")

from dflash_gguf.quants import _numba, quantize  # noqa: E402
from dflash_gguf.quants._numba import k_low  # noqa: E402
from dflash_gguf.quants.q2_k import Q2_K  # noqa: E402
from dflash_gguf.quants.q3_k import Q3_K  # noqa: E402

from ..test_q2_k import _q2_decode, _q2_edges, c_quantize_row_q2_K  # noqa: E402
from ..test_q3_k import (  # noqa: E402
    _bf16, _q3_edges, _q3_subblock_d, c_quantize_row_q3_K, cases, ggml_quantize, rows,
)
from ..test_quants import _ggml_base, describe_mismatch  # noqa: E402
from .fresh import backends_agree  # noqa: E402

F32 = np.float32
CLASSES = {"q3_k": Q3_K, "q2_k": Q2_K}
QTYPES = {"q3_k": "q3_K", "q2_k": "q2_K"}
LEVELS = {"q3_k": range(-4, 4), "q2_k": range(4)}
TYPES = sorted(CLASSES)
PER_GROUP = k_low._LANES // 16  # super-blocks fitted together


def _numpy(name: str, blocks: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return CLASSES[name].quantize_blocks(blocks)


def _kernel(name: str, blocks: np.ndarray) -> np.ndarray:
    return _numba.run(getattr(k_low, name), blocks)


def _edge_blocks(rng: np.random.Generator, nb: int = 8192) -> np.ndarray:
    """nb - 3 finite blocks of 256 on the C's edges (not a whole number of the kernels' lane
    groups). Most blocks get a scale from 2^-130 to 2^120 (fp16 d over- and underflows, squares
    overflow to inf and products to NaN, subnormals), a third of them spread over 2^30 between
    sub-blocks (small codes: the `if (!d)` path keeps the fit's levels). Then half the
    sub-blocks (16 values) are replaced by a kind: zeros of both signs, constants, subnormal bit
    patterns, a set of awkward values, a single non-zero value (make_qkx2_quants' D = 0 trials),
    values on the level grid and on its ties, one-signed, amax around GROUP_MAX_EPS
    (make_q3_quants returns early), bf16-representable, an outlier, far below zero. The kinds
    are shuffled across the lane groups."""
    n = nb * 16
    k = n // 24  # sub-blocks of each kind
    log2 = np.where(rng.random(nb) < 0.4, F32(-6), rng.uniform(-130, 120, nb))[:, None]
    spread = np.where(rng.random((nb, 1)) < 0.35, rng.uniform(-30, 0, (nb, 16)), 0)
    scale = np.exp2((log2 + spread).reshape(n, 1))
    normal = rng.standard_normal((n, 16))
    x = np.clip(normal * scale, -3.4e38, 3.4e38).astype(F32)
    x[0 * k:1 * k] = 0
    x[0 * k:1 * k:2] = -0.0
    x[1 * k:2 * k] = rng.choice(np.array([1, -3.5, 0.02, -1e-20, 7e4, 1e-40, 3e38, -0.0], F32), (k, 1))
    sub = rng.integers(0, 1 << 23, (k, 16), dtype=np.uint32) >> rng.integers(0, 23, (k, 1), dtype=np.uint32)
    x[2 * k:3 * k] = (sub | (rng.integers(0, 2, (k, 16), dtype=np.uint32) << 31)).view(F32)
    vals = np.array([0, -0.0, 1e-45, -1e-45, 1e-40, 1e-30, 0.5, -2.5, 3, -4, 65504, 1e20, -3.4e38, 3.4e38], F32)
    x[3 * k:4 * k] = rng.choice(vals, (k, 16))
    one = np.where(rng.random((k, 1)) < 0.5, F32(0), F32(-0.0)) * np.ones((k, 16), F32)
    one[np.arange(k), rng.integers(0, 16, k)] = normal[:k, 0] * np.exp(rng.uniform(-30, 30, k))
    x[4 * k:5 * k] = one
    grid = rng.integers(-4, 4, (k, 16)).astype(F32)
    grid[::2] += F32(0.5)  # ties
    x[5 * k:6 * k] = grid * np.exp2(rng.integers(-120, 100, (k, 1))).astype(F32)
    x[6 * k:7 * k] = np.abs(x[6 * k:7 * k])
    x[7 * k:8 * k] = -np.abs(x[7 * k:8 * k])
    x[8 * k:9 * k] = (normal[:k] * 1e-15 * rng.uniform(0.02, 4, (k, 1))).astype(F32)  # amax ~ GROUP_MAX_EPS
    x[9 * k:10 * k] = _bf16(normal[:k] * 0.02)
    out = (normal[:k] * 0.02).astype(F32)
    out[np.arange(k), rng.integers(0, 16, k)] *= F32(1e4)  # an outlier per sub-block
    x[10 * k:11 * k] = out
    # far below zero: the mins dwarf the scales (Q2_K's dmin overflows fp16 where d does not)
    x[11 * k:12 * k] = -(np.abs(normal[:k]) + 50) * np.exp2(rng.uniform(-20, 30, (k, 1)))
    x[: 12 * k] = x[rng.permutation(12 * k)]
    x = x[rng.permutation(n)].reshape(nb, 256)
    return np.ascontiguousarray(x[: nb - 3])


def test_edge_blocks_reach_the_c_edges():
    # what makes the comparison on _edge_blocks mean something, read off the C's bytes (the
    # numpy path's, proven equal to the C's): sub-blocks keeping the fit's own levels (d == 0)
    # while not all zero; requantizations past nearest_int's fast range (a NaN d: an fp16 inf
    # times a 0 code; Q2_K's dm inf where d is finite); make_q3_quants' early return on
    # non-zero values; make_qkx2_quants trials with D = 0 (a single non-zero value:
    # D = sum_w*sum_l2 - sum_l*sum_l = w*(w*l*l) - (w*l)*(w*l))
    x = _edge_blocks(np.random.default_rng(1))
    xs = x.reshape(-1, 16)
    amax = np.abs(xs).max(axis=1)
    with np.errstate(all="ignore"):
        d3 = _q3_subblock_d(_numpy("q3_k", x)).reshape(-1)
        d2, dm2 = (v.reshape(-1) for v in _q2_decode(_numpy("q2_k", x)))
        for d in (d3, d2):
            assert ((d == 0) & (amax > 0)).sum() > 1000
            assert np.isnan(d).sum() > 100
        assert (np.isfinite(d2) & (d2 != 0) & ~np.isfinite(dm2)).sum() > 20
        assert ((amax > 0) & (amax < F32(1e-15))).sum() > 1000
        single = (xs != 0).sum(axis=1) == 1
        w = amax[single]
        assert (w * ((w * F32(3)) * F32(3)) - (w * F32(3)) * (w * F32(3)) == 0).sum() > 1000  # l = 3
    assert x.shape[0] % PER_GROUP


@pytest.mark.parametrize("name", TYPES)
def test_kernel_matches_numpy_on_edges(name):
    for seed in (5, np.random.SeedSequence().entropy):  # a fixed case and a fresh one each run
        x = _edge_blocks(np.random.default_rng(seed))
        got, want = _kernel(name, x), _numpy(name, x)
        assert got.shape == want.shape == (x.shape[0], CLASSES[name].type_size)
        assert np.array_equal(got, want), f"seed {seed}: " + describe_mismatch(x, got, want, name)


@pytest.mark.parametrize("name", TYPES)
def test_kernel_matches_numpy_on_the_c_edges(name):
    # the cases and the built edges of test_q3_k.py / test_q2_k.py: grids, exact requantization
    # ties, d = fp16(1/iscale) and d = fp16(max_scale/15) taken literally
    edges = _q3_edges() if name == "q3_k" else _q2_edges()
    sets = [*cases(np.random.default_rng(31), LEVELS[name], 16 * 4096), *edges]
    for label, v in sets:
        x = rows(v, 256)
        got, want = _kernel(name, x), _numpy(name, x)
        assert np.array_equal(got, want), f"{label}: " + describe_mismatch(x, got, want, name)


@pytest.mark.parametrize("name", TYPES)
def test_kernel_matches_the_c_port(name):
    # a whole lane group and a partial one, mixing zero, tiny and huge sub-blocks
    x = _edge_blocks(np.random.default_rng(44), 64)[: PER_GROUP + 1]
    port = c_quantize_row_q3_K if name == "q3_k" else c_quantize_row_q2_K
    got, want = _kernel(name, x), port(x)
    bad = np.flatnonzero((got != want).any(axis=1))
    assert bad.size == 0, f"blocks {bad.tolist()} differ from the C port"


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("nb", [0, 1, PER_GROUP - 1, PER_GROUP, PER_GROUP + 1, 3 * PER_GROUP + 2])
def test_group_tails(name, nb):
    x = (np.random.default_rng(nb).standard_normal((nb, 256)) * 0.02).astype(F32)
    got = _kernel(name, x)
    assert got.shape == (nb, CLASSES[name].type_size)
    if nb:
        assert np.array_equal(got, _numpy(name, x))


@pytest.mark.parametrize("name", TYPES)
def test_zero_signs_and_zero_blocks(name):
    x = np.zeros((2 * PER_GROUP + 1, 256), F32)  # two lane groups and a partial one
    x[1] = -0.0
    x[2, ::2] = -0.0
    x[3, 5] = F32(1e-16)  # below GROUP_MAX_EPS (Q3_K), but not flat (Q2_K)
    got = _kernel(name, x)
    assert np.array_equal(got, _numpy(name, x))
    assert not got[:3].any()


@pytest.mark.parametrize("name", TYPES)
def test_quantize_runs_the_kernel(name):
    x = (np.random.default_rng(7).standard_normal((8, 512)) * 0.02).astype(F32)
    prev = _numba.set_enabled(True)
    try:
        assert CLASSES[name]._kernel() is getattr(k_low, name)
        got = quantize(x, QTYPES[name])
    finally:
        _numba.set_enabled(prev)
    assert np.array_equal(got.reshape(-1, CLASSES[name].type_size), _numpy(name, x.reshape(-1, 256)))


@pytest.mark.parametrize("qtype", ["q3_K", "q2_K"])
def test_backends_agree_on_fresh_data(qtype):
    backends_agree(qtype)


@pytest.mark.slow
@pytest.mark.parametrize("name", TYPES)
def test_live_ggml(name):
    lib = _ggml_base()
    rng = np.random.default_rng()
    for x in (_edge_blocks(rng, 4102),  # rows of one block, 4099 of them
              (rng.standard_normal((2048, 1024)) * np.exp(rng.uniform(-8, 3, (2048, 1)))).astype(F32)):
        want = ggml_quantize(lib, x, QTYPES[name])
        got = _kernel(name, x.reshape(-1, 256))
        assert np.array_equal(got.reshape(-1), want), describe_mismatch(x, got, want, name)
