"""The compare fast paths give the library's own bits: gguf-py's dequantizers, NumPy's float16
cast, the quantizer's 16-bit re-encoding."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from dflash_gguf.compare import kernels
from dflash_gguf.quants import _numba, quantize


@pytest.fixture(params=[True, False], ids=["numba", "numpy"])
def numba_mode(request):
    if request.param and not _numba.AVAILABLE:
        pytest.skip("numba is not installed")
    prev = _numba.set_enabled(request.param)
    yield request.param
    _numba.set_enabled(prev)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.F16])
def test_dequantize_is_gguf_py_bit_for_bit(numba_mode, qtype):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((6, 512)) * 0.05).astype(np.float32)
    x[0, :40] = 0  # zero blocks: d = 0
    encoded = quantize(x, qtype).reshape(-1)
    garbage = rng.integers(0, 256, encoded.size, dtype=np.uint8)  # inf/NaN scales, every code
    for raw in (encoded, garbage):
        ours = kernels.dequantize(raw, qtype, 6, 512)
        if ours is None:  # no kernel in this mode: the caller's NumPy path runs
            assert not numba_mode and qtype != Q.F16
            continue
        with np.errstate(all="ignore"):
            ref = np.asarray(gguf.dequantize(raw.reshape(6, -1), qtype), dtype=np.float32).reshape(6, 512)
        assert same_bits(ours, ref)


def test_dequantize_leaves_other_types_and_odd_sizes_to_the_caller():
    assert kernels.dequantize(np.zeros(22 * 2, np.uint8), Q.Q5_0, 2, 32) is None
    assert kernels.dequantize(np.zeros(64, np.uint8), Q.BF16, 1, 32) is None  # NumPy's shift is as fast
    if _numba.enabled():
        assert kernels.dequantize(np.zeros(33, np.uint8), Q.Q8_0, 1, 32) is None  # wrong byte count


@pytest.mark.parametrize("src, dst", [(Q.BF16, Q.F16), (Q.F16, Q.BF16)])
def test_reencode16_is_the_quantizer_on_every_finite_value(numba_mode, src, dst):
    bits = np.arange(1 << 16, dtype=np.uint16)
    mask = 0x7F80 if src == Q.BF16 else 0x7C00
    finite = bits[(bits & mask) != mask]
    if src == Q.F16:
        values = finite.view(np.float16).astype(np.float32)
    else:
        values = (finite.astype(np.uint32) << 16).view(np.float32)
    want = quantize(values, dst, threads=1).reshape(-1)
    assert np.array_equal(kernels.reencode16(finite.view(np.uint8), src, dst), want)
    with_inf = np.concatenate([finite[:5], np.array([mask], np.uint16)])
    assert kernels.reencode16(with_inf.view(np.uint8), src, dst) is None  # the quantizer names it
    assert kernels.reencode16(finite.view(np.uint8), src, Q.Q8_0) is None
    assert kernels.reencode16(finite.view(np.uint8), src, src) is None


def test_a_bf16_file_does_not_start_numba(tmp_path):
    """Comparing a checkpoint with its BF16 GGUF needs no kernel: numba (~1 s to start) stays
    unloaded (a fresh process: this one may have loaded it already)."""
    import os
    import subprocess
    import sys

    from dflash_gguf.convert import convert
    from tests.conftest import DRAFTERS, ROOT

    out = tmp_path / "bf16.gguf"
    convert(DRAFTERS / "qwen3-flat", out, format="lucebox", outtype="bf16")
    code = ("import sys; from dflash_gguf.compare import compare_weights as c; "
            f"r = c({str(DRAFTERS / 'qwen3-flat')!r}, {str(out)!r}); "
            "assert r.passed, r.summary; print('numba' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False"
