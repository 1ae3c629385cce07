"""quants/q4_k.py (the numpy path of Q4_K / Q5_K): against a scalar line-by-line port of
ggml-quants.c (tests/quants/c_ports.py), itself held against ggml's golden bytes."""
from __future__ import annotations

import numpy as np
import pytest

from dflash_gguf.quants.q4_k import Q4_K, Q5_K, make_qkx2_quants, pack_k4_scales, qkx2_levels
from tests.conftest import SHARED

from . import c_ports

F32 = np.float32
GOLDEN = SHARED / "golden" / "ggml_quant_golden.npz"
PORTS = {"q4_K": (Q4_K, c_ports.quantize_row_q4_K), "q5_K": (Q5_K, c_ports.quantize_row_q5_K)}


def _fresh_blocks(rng: np.random.Generator) -> np.ndarray:
    """Six super-blocks built to reach every branch: Gaussian, positive only (min > 0 -> 0),
    flat and zero sub-blocks, bf16-rounded heavy tails, subnormal (the literal level path) and huge."""
    x = rng.standard_normal((6, 256)).astype(np.float32)
    x[1] = np.abs(x[1]) + 0.5
    x[2, :32] = 0
    x[2, 32:64] = -1.25
    x[2, 64:96] = 0.75
    x[3] = (rng.standard_t(2, 256).astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)
    x[4] *= F32(1e-39)
    x[5] *= F32(1e30)
    return x


def _sub_blocks(rng: np.random.Generator) -> np.ndarray:
    """Position-major (32, n) sub-blocks: columns of different scales, offsets and shapes."""
    x = (rng.standard_normal((32, 40)) * np.exp(rng.uniform(-8, 8, 40))).astype(np.float32)
    x[:, 0] = 3.0  # constant but positive: min > 0 becomes 0, so not flat
    x[:, 1] = 0.0  # flat
    x[:, 2] = -2.0  # flat and negative
    x[:, 3] = np.abs(x[:, 3]) + 10  # positive only
    x[:, 4] = rng.integers(0, 16, 32)  # on the level grid
    return x


@pytest.mark.parametrize("nmax,rmin,rdelta,nstep", [(15, -1.0, 0.1, 20), (31, -0.5, 0.1, 15)])
def test_make_qkx2_quants_is_the_c_loop(nmax, rmin, rdelta, nstep):
    x = _sub_blocks(np.random.default_rng(nmax))
    w = (np.sqrt((x * x).sum(axis=0) / 32)[None, :] + np.abs(x)).astype(np.float32)  # any weights do
    with np.errstate(all="ignore"):  # D = 0 trials divide by zero, as in C (and are never accepted)
        fit = make_qkx2_quants(x, w, nmax, rmin, rdelta, nstep)
    levels = qkx2_levels(x, fit, np.arange(x.shape[1]), nmax)
    for c in range(x.shape[1]):
        scale, the_min, L = c_ports.make_qkx2_quants(32, nmax, list(x[:, c]), list(w[:, c]), rmin, rdelta, nstep)
        assert F32(fit.scale[c]).view(np.uint32) == F32(scale).view(np.uint32), c
        assert F32(fit.the_min[c]).view(np.uint32) == F32(the_min).view(np.uint32), c
        assert levels[:, c].tolist() == L, c
    assert fit.flat.tolist()[:3] == [False, True, True]


def test_pack_k4_scales_is_get_scale_min_k4_inverted():
    rng = np.random.default_rng(0)
    ls = rng.integers(0, 64, (500, 8)).astype(np.uint8)
    lm = rng.integers(0, 64, (500, 8)).astype(np.uint8)
    ls[0], lm[0] = 63, 0
    ls[1], lm[1] = 0, 63
    packed = pack_k4_scales(ls, lm)
    assert packed.shape == (500, 12)
    for b in range(500):
        q = packed[b].tolist()
        got = [c_ports.get_scale_min_k4(j, q) for j in range(8)]
        assert got == list(zip(ls[b].tolist(), lm[b].tolist())), b


@pytest.mark.parametrize("qtype", sorted(PORTS))
def test_blocks_match_the_c_port_on_fresh_data(qtype):
    cls, port = PORTS[qtype]
    x = _fresh_blocks(np.random.default_rng(len(qtype) + ord(qtype[1])))
    with np.errstate(all="ignore"):
        got = cls.quantize_blocks(x)
    want = port(x)
    bad = np.flatnonzero((got != want).any(axis=1))
    assert bad.size == 0, f"{qtype}: blocks {bad.tolist()} differ from the C port"


@pytest.mark.parametrize("qtype", sorted(PORTS))
def test_the_c_port_reproduces_ggml_golden_bytes(qtype):
    # what makes the port a reference: ggml's own bytes, on the first row of some golden cases
    if not GOLDEN.is_file():
        pytest.skip(f"golden file {GOLDEN} not found (it lives in the shared/ checkout next to the repo)")
    _, port = PORTS[qtype]
    with np.load(GOLDEN) as z:
        for case in ("normal_w", "edge"):
            x = z[f"{case}/input"][:1]
            ts = 144 if qtype == "q4_K" else 176
            assert np.array_equal(port(x).reshape(-1), z[f"{case}/{qtype}/bytes"][:4 * ts]), case
