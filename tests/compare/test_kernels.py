"""The compare fast paths give the library's own bits: gguf-py's dequantizers, NumPy's float16
cast, the quantizer's 16-bit re-encoding."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from dflash_gguf.compare import kernels
from dflash_gguf.quants import _numba, quantize


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
def test_reencode16_is_the_quantizer_on_every_finite_value(src, dst):
    bits = np.arange(1 << 16, dtype=np.uint16)
    mask = 0x7F80 if src == Q.BF16 else 0x7C00
    finite = bits[(bits & mask) != mask]
    if src == Q.F16:
        values = finite.view(np.float16).astype(np.float32)
    else:
        values = (finite.astype(np.uint32) << 16).view(np.float32)
    want = quantize(values, dst, threads=1).reshape(-1)
    for known_finite in (None, True):
        e, d = kernels.reencode16(finite.view(np.uint8), src, dst, finite=known_finite)
        assert np.array_equal(e.view(np.uint8), want)
        # the error that comes with it: NumPy's subtraction of the value from e read back
        back = kernels.values16(e, dst)
        assert np.array_equal(d.view(np.uint32), np.subtract(back, values).view(np.uint32))
    with_inf = np.concatenate([finite[:5], np.array([mask], np.uint16)])
    assert kernels.reencode16(with_inf.view(np.uint8), src, dst) is None  # the quantizer names it
    assert kernels.reencode16(finite.view(np.uint8), src, Q.Q8_0) is None
    assert kernels.reencode16(finite.view(np.uint8), src, src) is None


@pytest.mark.parametrize("outtype", ["bf16", "f16"])
def test_a_16_bit_file_does_not_start_numba(tmp_path, outtype):
    """Comparing a checkpoint with its BF16 or F16 GGUF needs no kernel (F16 goes through
    tables): numba (~1 s to start) stays unloaded (a fresh process: this one may have loaded
    it already)."""
    import os
    import subprocess
    import sys

    from dflash_gguf.convert import convert
    from tests.conftest import DRAFTERS, ROOT

    out = tmp_path / f"{outtype}.gguf"
    convert(DRAFTERS / "qwen3-flat", out, format="lucebox", outtype=outtype)
    code = ("import sys; from dflash_gguf.compare import compare_weights as c; "
            f"r = c({str(DRAFTERS / 'qwen3-flat')!r}, {str(out)!r}); "
            "assert r.passed, r.summary; print('numba' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False"


@pytest.mark.skipif(not _numba.AVAILABLE, reason="numba is not installed")
@pytest.mark.parametrize("bs", [32, 256])
def test_block_check_kernel_is_numpys(bs):
    """Counts, worst ratio and where, with what garbage brings: NaN/inf errors, all-zero and
    NaN reference blocks, ties (the first block and value win, as NumPy's argmax)."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(64 * bs) * 0.02).astype(np.float32)
    d = (x * rng.uniform(-0.05, 0.05, x.size)).astype(np.float32)
    x[:bs] = 0  # a zero block: ratio inf where d != 0
    d[2 * bs + 3] = np.nan
    d[3 * bs + 1] = np.inf
    x[4 * bs:5 * bs] = np.nan
    d[6 * bs + 7] = d[6 * bs + 9] = 0.5  # a tie inside the worst finite block
    d[7 * bs:8 * bs] = d[6 * bs:7 * bs]  # and the same block again later
    x[7 * bs:8 * bs] = x[6 * bs:7 * bs]
    prev = _numba.set_enabled(True)
    try:
        for limit in (0.0, 0.3, 1e30):
            for dd in (d, np.where(np.isfinite(d), d, 0).astype(np.float32)):
                assert kernels.block_check(dd, x, bs, limit) == kernels.block_check_numpy(dd, x, bs, limit)
    finally:
        _numba.set_enabled(prev)


def _report(r) -> str:
    """Every number and word of each row, as text (so that NaN equals NaN)."""
    return repr([(t.name, t.status, t.flags, t.detail, t.rel_rms, t.max_abs, t.max_abs_index, t.cosine, t.norm_ratio,
             t.expected_rel_rms, t.expected_max_abs, t.deviation_from_ggml, t.bytes_differing, t.limit) for t in r.tensors])


@pytest.mark.skipif(not _numba.AVAILABLE, reason="numba is not installed")
@pytest.mark.parametrize("outtype", ["q8_0", "q4_k_m", "f16", "bf16"])
@pytest.mark.parametrize("damaged", [False, True], ids=["clean", "damaged"])
def test_fast_paths_give_the_simple_report(converted, tmp_path, outtype, damaged):
    """The compiled kernels, table lookups and shortcuts give exactly the report of the plain
    path (numba off: NumPy quantizers, gguf-py's dequantizers, NumPy block maxima), with the
    bit-identical check and without it, on a file as converted and on one with damaged bytes."""
    from dflash_gguf.compare import compare_weights

    from tests.compare.conftest import rewrite
    from tests.conftest import DRAFTERS

    path = converted("qwen3-flat", "llama.cpp", outtype)
    if damaged:
        def corrupt(name, typ, shape, data):
            if name in ("blk.0.ffn_up.weight", "fc.weight"):
                data[len(data) // 3: len(data) // 3 + 5] ^= 0x5A
            return [(name, typ, shape, data)]

        path = rewrite(path, tmp_path / "damaged.gguf", corrupt)
    for requantize in (True, False):
        prev = _numba.set_enabled(False)
        try:
            simple = compare_weights(DRAFTERS / "qwen3-flat", path, requantize=requantize)
        finally:
            _numba.set_enabled(prev)
        fast = compare_weights(DRAFTERS / "qwen3-flat", path, requantize=requantize)
        assert _report(fast) == _report(simple)
        assert fast.passed is (not damaged)
