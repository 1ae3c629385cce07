"""Reading the sides: every type our tools read dequantizes exactly as ggml does, bit for bit:
against gguf-py, and for every type ``quantize`` writes against ggml's own ``to_float`` (the
live libggml-base of llama-cpp-python; skipped where it is not built)."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

from dflash_gguf.compare import sides
from dflash_gguf.quants import QUANTIZE_TYPES, dequantize, quantize, quantize_finite_with_values


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.Q5_0])
def test_dequantizers_match_gguf_py_bit_for_bit(qtype):
    x = (np.random.default_rng(3).standard_normal((8, 256)) * 0.05).astype(np.float32)
    raw = quantize(x, qtype).reshape(-1)
    ours = sides.dequantize_rows(raw, qtype, 8, 256)
    ref = np.asarray(gguf.dequantize(raw.reshape(8, -1), qtype), dtype=np.float32).reshape(8, 256)
    assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32))


# --- every written type against ggml's to_float --------------------------------------------------
WRITTEN = sorted(QUANTIZE_TYPES, key=lambda t: t.name)
ROWS, COLS = 16, 1024


@pytest.fixture(scope="module")
def ggml():
    from tests.quants.test_quants import _ggml_base

    return _ggml_base()


def ggml_values(lib, raw: np.ndarray, t: Q, n: int) -> np.ndarray:
    """What ggml reads ``raw`` as: its type traits' to_float (F32 has none: its bytes are its values)."""
    from tests.quants.test_q3_k import ggml_to_float

    if t == Q.F32:
        return raw.view("<f4").astype(np.float32)
    return ggml_to_float(lib, raw, t.name, n)


def finite_garbage(lib, t: Q, rng: np.random.Generator) -> np.ndarray:
    """Random bytes of ROWS x COLS values of type ``t`` that ggml decodes to finite values: a
    block decoding to inf/NaN (a scale or value with an all-ones exponent) is drawn again, so
    every other bit pattern can occur -- every quant code, subnormal and negative-zero scales,
    the largest finite ones."""
    bs, ts = GGML_QUANT_SIZES[t]
    raw = rng.integers(0, 256, ROWS * COLS // bs * ts, dtype=np.uint8)
    blocks = raw.reshape(-1, ts)
    for _ in range(50):
        bad = ~np.isfinite(ggml_values(lib, raw, t, ROWS * COLS).reshape(-1, bs)).all(axis=1)
        if not bad.any():
            return raw
        blocks[bad] = rng.integers(0, 256, (int(bad.sum()), ts), dtype=np.uint8)
    raise AssertionError(f"{t.name}: could not draw finite blocks")


def edge_values(rng: np.random.Generator) -> np.ndarray:
    """ROWS rows of data at the edges of the encoders (all finite, all within F16's range):
    zeros, a constant, f32 subnormals, tiny and large scales, sparse, one value per 32,
    exact halves, one sign, one outlier per block, mixed magnitudes inside a block."""
    n = rng.standard_normal(COLS)
    sparse = n * 0.02
    sparse[rng.random(COLS) < 0.9] = 0
    outliers = n * 0.02
    outliers[::97] *= 200
    mixed = n * np.exp(rng.uniform(-30, 8, COLS))
    rows = [np.zeros(COLS), np.full(COLS, -0.37), n * 1e-42, n * 1e-30, n * 1e-6, n * 0.02, n * 1e4, sparse,
            np.repeat(rng.standard_normal(COLS // 32), 32), np.round(n * 4) / 2, np.abs(n) + 3, -np.abs(n) * 0.02,
            outliers, mixed, np.where(np.arange(COLS) % 2, 1e-38, -6e4), np.full(COLS, -0.0)]
    return np.stack(rows).astype(np.float32)


def assert_same_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    g, w = got.reshape(-1).view(np.uint32), want.reshape(-1).view(np.uint32)
    bad = np.flatnonzero(g != w)
    assert bad.size == 0, (f"{what}: {bad.size} values differ from ggml's to_float, first at {bad[0]}: "
                           f"{got.reshape(-1)[bad[0]]!r} vs {want.reshape(-1)[bad[0]]!r}")


@pytest.mark.parametrize("qtype", WRITTEN, ids=lambda t: t.name)
def test_every_written_type_reads_as_ggml_to_float(ggml, numba_mode, qtype):
    """The compare's reader (``sides.dequantize_rows``, into a fresh array and into a reused
    buffer), the library's ``dequantize`` (parity's GGUF loader reads through it) and the values
    the compare's re-encoding hands over with its bytes (``quantize_finite_with_values``) are
    ggml's to_float of the same bytes, bit for bit: on random blocks and on the (ggml-exact)
    encodings of edge data, with the numba kernels and on the NumPy path."""
    rng = np.random.default_rng(int(qtype))
    x = edge_values(rng)
    encoded = quantize(x, qtype, threads=1).reshape(-1)
    for name, raw in (("random blocks", finite_garbage(ggml, qtype, rng)), ("edge data", encoded)):
        want = ggml_values(ggml, raw, qtype, ROWS * COLS)
        assert np.isfinite(want).all()
        assert_same_bits(sides.dequantize_rows(raw, qtype, ROWS, COLS), want, f"{name}, compare")
        buf = np.full(ROWS * COLS + 7, np.nan, np.float32)
        assert_same_bits(sides.dequantize_rows(raw, qtype, ROWS, COLS, buf), want, f"{name}, compare into a buffer")
        assert_same_bits(dequantize(raw, qtype, (ROWS, COLS)), want, f"{name}, quants.dequantize")
    values = np.full(ROWS * COLS, np.nan, np.float32)
    fused = quantize_finite_with_values(x, qtype, values)
    if fused is not None:  # the type has a fused path in this mode
        assert np.array_equal(fused, encoded)
        assert_same_bits(values, ggml_values(ggml, fused, qtype, ROWS * COLS), "quantize_finite_with_values")
