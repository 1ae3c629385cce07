"""dflash_gguf.quants against ggml's own bytes (shared/golden/ggml_quant_golden.npz).

The golden file holds, per case, the input rows and what ggml's C reference
(ggml_quantize_chunk, no imatrix, x86-64 without FMA) made of them, plus ggml's
dequantization of those bytes. A quantizer is correct when every case is byte-equal.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

import dflash_gguf
from dflash_gguf.errors import QuantizationError
from dflash_gguf.quants import (
    QUANTIZE_TYPES,
    block_size,
    dequantize,
    quantize,
    resolve_qtype,
    row_nbytes,
    type_size,
)
from dflash_gguf.quants import _numba

GOLDEN = Path(__file__).resolve().parents[2].parent / "shared" / "golden" / "ggml_quant_golden.npz"
TYPES = ["q8_0", "q4_0", "q5_0", "q4_1", "q5_1", "q4_K", "q5_K", "q6_K", "bf16", "f16"]
CASES = ["normal_w", "normal_bf16", "uniform", "heavy_t2", "outliers", "positive", "negative", "norm_like", "edge"]
# Types with a compiled kernel in quants/_numba/; the others run the numpy path on both backends.
NUMBA_KERNELS = {"q8_0": "q8_0", "q4_0": "q4_0", "q5_0": "q5_0", "q4_1": "q4_1", "q5_1": "q5_1", "q4_K": "q4_k",
                 "q5_K": "q5_k", "q6_K": "q6_k"}


def with_backends(types) -> list:
    """(qtype, backend) params: every type on numpy, the types with a kernel on numba too."""
    return [
        pytest.param(t, b, id=f"{t}-{b}")
        for b in ("numpy", "numba")
        for t in types
        if b == "numpy" or t in NUMBA_KERNELS
    ]


def describe_mismatch(x: np.ndarray, got: np.ndarray, want: np.ndarray, qtype: str) -> str:
    """gguf-py's compare_tensors idea: how many blocks differ, and the first and worst of them
    shown with their input values, so a failure points at the rounding that broke."""
    t = resolve_qtype(qtype)
    bs, ts = GGML_QUANT_SIZES[t]
    g = got.reshape(-1, ts)
    w = want.reshape(-1, ts)
    diff = g != w
    bad = np.flatnonzero(diff.any(axis=1))
    if bad.size == 0:
        return "no difference"
    bits = np.unpackbits((g ^ w).view(np.uint8), axis=1).sum(axis=1)
    worst = int(bad[np.argmax(bits[bad])])
    blocks_per_row = x.shape[-1] // bs
    xb = x.reshape(-1, bs)
    lines = [f"{qtype}: {bad.size}/{g.shape[0]} blocks differ ({bits.sum()} bits)"]
    for label, b in (("first", int(bad[0])), ("worst", worst)):
        row, blk = divmod(b, blocks_per_row)
        cols = np.flatnonzero(diff[b])
        lines.append(
            f"  {label} block {b} (row {row}, block {blk}): differing bytes at {cols[:12].tolist()}\n"
            f"    want {w[b, cols[:12]].tolist()}\n    got  {g[b, cols[:12]].tolist()}\n"
            f"    input[:16] {np.array2string(xb[b, :16], precision=9)}"
        )
    return "\n".join(lines)


@pytest.mark.parametrize("qtype,backend", with_backends(TYPES), indirect=["backend"])
@pytest.mark.parametrize("case", CASES)
def test_golden_bytes(golden, case, qtype, backend):
    x = golden[f"{case}/input"]
    want = golden[f"{case}/{qtype}/bytes"]
    got = quantize(x, qtype)
    assert got.shape == (x.shape[0], row_nbytes(qtype, x.shape[1]))
    assert np.array_equal(got.reshape(-1), want), describe_mismatch(x, got, want, qtype)


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("case", CASES)
def test_golden_dequantize(golden, case, qtype):
    x = golden[f"{case}/input"]
    want = golden[f"{case}/{qtype}/dequant"]
    got = dequantize(golden[f"{case}/{qtype}/bytes"], qtype, x.shape)
    assert got.dtype == np.float32 and got.shape == x.shape
    # bitwise, so -0.0 vs 0.0 and every last-ulp difference count
    neq = got.view(np.uint32) != want.view(np.uint32)
    assert not neq.any(), f"{qtype}/{case}: {neq.sum()} values differ, first at {np.argwhere(neq)[0].tolist()}"


def test_golden_file_covers_what_we_claim(golden):
    cases = {k.split("/")[0] for k in golden}
    assert cases == set(CASES)
    assert {resolve_qtype(t) for t in TYPES} <= QUANTIZE_TYPES


@pytest.mark.parametrize("qtype,backend", with_backends(["q8_0", "q4_K", "q6_K"]), indirect=["backend"])
def test_threads_and_chunking_do_not_change_bytes(golden, qtype, backend):
    # Several chunks per thread, a non-contiguous view and float64 input: same bytes.
    x = np.concatenate([golden[f"{c}/input"] for c in CASES])  # 52 x 1024
    want = quantize(x, qtype, threads=1)
    from dflash_gguf.quants.base import registered

    cls = registered()[resolve_qtype(qtype)]
    old = cls.chunk_values
    try:
        cls.chunk_values = 2048
        assert np.array_equal(quantize(x, qtype, threads=2), want)
        wide = np.zeros((x.shape[0], 2 * x.shape[1]), np.float32)
        wide[:, ::2] = x
        assert np.array_equal(quantize(wide[:, ::2], qtype, threads=2), want)  # strided view
        assert np.array_equal(quantize(x.astype(np.float64), qtype), want)
        ro = x.copy()
        ro.flags.writeable = False  # as a memmap'd checkpoint arrives
        assert np.array_equal(quantize(ro, qtype, threads=2), want)
    finally:
        cls.chunk_values = old


@pytest.mark.parametrize("qtype", sorted(NUMBA_KERNELS))
def test_backend_switch_picks_the_kernel(monkeypatch, qtype):
    # Guards the two-backend tests above: each must run the implementation it names.
    calls = []
    name = NUMBA_KERNELS[qtype]
    real = _numba.kernel(name) if _numba.AVAILABLE else None
    lookup = _numba.kernel

    def spy(blocks):
        calls.append(blocks.shape)
        return real(blocks)

    monkeypatch.setattr(_numba, "kernel", lambda n: spy if n == name else lookup(n))
    x = np.linspace(-1, 1, 2 * 512, dtype=np.float32).reshape(2, 512)
    x.flags.writeable = False
    prev = _numba.set_enabled(False)
    try:
        want = quantize(x, qtype)
        assert calls == []
        if not _numba.AVAILABLE:
            with pytest.raises(RuntimeError, match="numba is not installed"):
                _numba.set_enabled(True)
            return
        _numba.set_enabled(True)
        assert np.array_equal(quantize(x, qtype), want)
        assert calls and sum(c[0] for c in calls) == x.size // block_size(qtype)
        assert len(real.signatures) == 1  # read-only input reuses the one compiled specialisation
    finally:
        _numba.set_enabled(prev)


@pytest.mark.parametrize(
    "value,want", [(None, True), ("1", True), ("", True), ("0", False), (" off ", False), ("False", False), ("no", False)]
)
def test_numba_env_switch(value, want):
    assert _numba._wanted(value) is want


_SCIPY_PROBE = """
import sys
import numpy as np
from dflash_gguf.quants import _numba
_numba.kernel("q8_0")(np.zeros((1, 32), np.float32))
print("scipy" in sys.modules)
import numba
@numba.njit
def dot(a):
    return np.dot(a, a)
print(dot(np.ones(3)), "scipy.linalg" in sys.modules)
"""


@pytest.mark.skipif(not _numba.AVAILABLE, reason="numba is not installed")
def test_numba_starts_without_scipy_and_leaves_it_importable():
    """Starting the kernels imports no scipy (~0.5 s: numba's version check and BLAS probe);
    jitted code that wants BLAS afterwards still gets it (a fresh process)."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    pytest.importorskip("scipy.linalg", reason="scipy is not installed: nothing to keep out")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DFLASH_GGUF_NUMBA", None)
    r = subprocess.run([sys.executable, "-c", _SCIPY_PROBE], env=env, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "3.0", "True"]


# Every compiled kernel: (name, block size, the function its module must inline into it). The
# module-qualified callee proves the checked IR is the kernel's own, not a stub.
_KERNEL_IR = {"q8_0": (32, None), "q4_0": (32, "_lanes"), "q5_0": (32, "_lanes"), "q4_1": (32, "_lanes"),
              "q5_1": (32, "_lanes"), "q4_k": (256, "_qkx2_lanes"), "q5_k": (256, "_qkx2_lanes"),
              "q6_k": (256, None), "q3_k": (256, "_q3_lanes"), "q2_k": (256, "qkx2_lanes"),
              "iq4_nl": (32, "_search_lanes"), "iq4_xs": (256, "_search_lanes"),
              "q4_k_values": (256, "_qkx2_lanes"), "q5_k_values": (256, "_qkx2_lanes"), "q6_k_values": (256, None)}


def test_the_ir_check_covers_every_kernel():
    from dflash_gguf.quants.base import registered

    kernels = {c.numba_kernel for c in registered().values() if c.numba_kernel}
    kernels |= {k + "_values" for k in kernels if _numba.has_kernel(k + "_values")}
    assert kernels == set(_KERNEL_IR)


@pytest.mark.skipif(not _numba.AVAILABLE, reason="numba is not installed")
@pytest.mark.parametrize("kernel", sorted(_KERNEL_IR))
def test_numba_kernels_compile_to_plain_float32(kernel):
    # What makes the kernels bit-exact besides their source: no float64 anywhere (a Python float
    # or float32*int slipping in), no fast-math flags, no fused multiply-add in the machine code.
    # A cached kernel cannot be inspected, so compile the same source afresh with the same options.
    import re

    import numba

    from dflash_gguf.quants._numba import common

    bs, callee = _KERNEL_IR[kernel]
    fresh = numba.njit(**{**common.JIT_OPTIONS, "cache": False})(_numba.kernel(kernel).py_func)
    args = [np.zeros((1, bs), np.float32)]
    if kernel.endswith("_values"):  # the values' d * q - m must not become an FMA either
        args.append(np.zeros((1, bs), np.float32))
    fresh(*args)
    sig = fresh.signatures[0]
    ir, asm = fresh.inspect_llvm(sig), fresh.inspect_asm(sig)
    assert callee is None or callee in ir  # the callees are in the module
    assert not re.findall(r"\bdouble\b", ir)
    assert not re.findall(r"\b(contract|reassoc|arcp|afn|fast)\b", ir)
    assert "llvm.fma" not in ir and "fmuladd" not in ir
    assert not re.findall(r"\bv?fn?m(add|sub)\d", asm)


# --- errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("qtype", ["q8_0", "q4_K", "f16"])
def test_non_finite_is_refused_with_name_and_index(bad, qtype):
    x = np.ones((4, 512), np.float32)
    x[2, 300] = bad
    x[3, 5] = bad  # later in C order: the first one is reported
    with pytest.raises(QuantizationError) as e:
        quantize(x, qtype, name="blk.0.attn_q.weight")
    msg = str(e.value)
    assert "blk.0.attn_q.weight" in msg and "(2, 300)" in msg and str(float(bad)) in msg


@pytest.mark.parametrize("qtype,ncols", [("q8_0", 48), ("q4_K", 4096 + 32), ("q6_K", 100), ("q5_0", 31)])
def test_last_dim_not_multiple_of_block(qtype, ncols):
    with pytest.raises(QuantizationError, match=rf"last dimension {ncols} .* not a multiple of the .* block size {block_size(qtype)}"):
        quantize(np.zeros((2, ncols), np.float32), qtype, name="fc.weight")


def test_unsupported_and_unknown_types():
    with pytest.raises(QuantizationError, match="IQ2_XS"):
        quantize(np.zeros((1, 256), np.float32), "iq2_xs")
    with pytest.raises(QuantizationError, match="file type"):
        resolve_qtype("Q4_K_M")
    with pytest.raises(QuantizationError, match="unknown"):
        resolve_qtype("q3")
    with pytest.raises(QuantizationError):
        quantize(np.zeros((1, 32), np.complex64), "q8_0")


# --- public API shape contract ----------------------------------------------------------------
@pytest.mark.parametrize("name", ["q4_K", "Q4_K", "q4_k", " Q6_k ", "q8_0", "Q8_0", "BF16", "bf16", "F16", "f32"])
def test_case_insensitive_names(name):
    t = resolve_qtype(name)
    assert isinstance(t, GGMLQuantizationType) and t.name == name.strip().upper()
    assert resolve_qtype(t) is t and resolve_qtype(int(t)) is t


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q5_0", "q4_K", "q5_K", "q6_K", "bf16", "f16", "f32"])
def test_roundtrip_shapes(qtype):
    rng = np.random.default_rng(3)
    shape = (2, 3, 512)
    x = (rng.standard_normal(shape) * 0.02).astype(np.float32)
    q = quantize(x, qtype)
    assert q.dtype == np.uint8 and q.shape == (2, 3, row_nbytes(qtype, 512)) and q.flags.c_contiguous
    assert row_nbytes(qtype, 512) == 512 // block_size(qtype) * type_size(qtype)
    y = dequantize(q, qtype, shape)
    assert y.dtype == np.float32 and y.shape == shape
    tol = {"f32": 0, "f16": 1e-4, "bf16": 1e-3, "q8_0": 1e-3, "q6_K": 3e-3}.get(qtype, 2e-2)
    assert np.max(np.abs(y - x)) <= tol * 5
    assert np.array_equal(dequantize(q.tobytes(), qtype, shape), y)  # raw bytes accepted too
    # 1-D and empty tensors
    assert quantize(x[0, 0], qtype).shape == (row_nbytes(qtype, 512),)
    assert quantize(np.zeros((0, 512), np.float32), qtype).shape == (0, row_nbytes(qtype, 512))


def test_dequantize_size_mismatch():
    with pytest.raises(QuantizationError, match="cannot hold shape"):
        dequantize(np.zeros(100, np.uint8), "q8_0", (2, 64))


def test_package_level_exports():
    x = np.linspace(-1, 1, 256, dtype=np.float32)
    assert np.array_equal(dflash_gguf.quantize(x, "q4_K"), quantize(x, "q4_K"))
    assert dflash_gguf.dequantize is dequantize


# --- the live C library, when llama-cpp-python is installed -------------------------------------
def _ggml_base():
    try:  # the binding loads its libraries at import: a build without them raises, not ImportError
        llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    except (OSError, RuntimeError) as exc:
        pytest.skip(f"llama-cpp-python cannot load its libraries: {exc}")
    import ctypes
    import os

    # Where llama-cpp-python loads its libraries from: LLAMA_CPP_LIB_PATH (`make test` builds
    # them once there and installs the binding without its own build), else its package's lib/.
    dirs = [os.environ.get("LLAMA_CPP_LIB_PATH"), Path(os.path.dirname(llama_cpp.__file__)) / "lib"]
    path = next((Path(d) / "libggml-base.so" for d in dirs if d and (Path(d) / "libggml-base.so").is_file()), None)
    if path is None:
        pytest.skip(f"libggml-base.so not found in {[str(d) for d in dirs if d]}")
    lib = ctypes.CDLL(str(path))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [
        ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p
    ]
    lib.ggml_quantize_init.argtypes = [ctypes.c_int]
    return lib


@pytest.mark.slow
@pytest.mark.parametrize(
    "qtype,backend", with_backends(["q8_0", "q4_0", "q5_0", "q4_K", "q5_K", "q6_K", "bf16", "f16"]), indirect=["backend"]
)
def test_live_ggml_on_fresh_data(qtype, backend):
    lib = _ggml_base()
    t = resolve_qtype(qtype)
    rng = np.random.default_rng()
    x = (rng.standard_normal((96, 1024)) * np.exp(rng.uniform(-8, 3, (96, 1)))).astype(np.float32)
    x[::7] = (x[::7].view(np.uint32) & 0xFFFF0000).view(np.float32)  # bf16-representable rows
    x[5, :64] = 0
    want = np.zeros(x.shape[0] * row_nbytes(t, x.shape[1]), np.uint8)
    lib.ggml_quantize_init(int(t))
    lib.ggml_quantize_chunk(int(t), x.ctypes.data, want.ctypes.data, 0, x.shape[0], x.shape[1], None)
    got = quantize(x, t)
    assert np.array_equal(got.reshape(-1), want), describe_mismatch(x, got, want, qtype)


def _edge_ranges(rng: np.random.Generator, n: int = 48, cols: int = 1024):
    """Rows where the kernels' float rounding of the levels must step aside for ggml's literal
    nearest_int (sub-blocks of tiny or subnormal range, huge values), or where the range
    check itself is at its edges (ranges of one ulp, constant offsets, flat sub-blocks)."""
    normal = rng.standard_normal((n, cols))
    yield "subnormal", normal * 1e-39
    yield "tiny", normal * 1e-36
    yield "huge", normal * 1e30
    yield "one-ulp range", 1 + np.float32(1.2e-7) * rng.integers(0, 3, (n, cols))
    yield "offset", -5 + normal * 1e-5
    sparse = normal * 0.02
    sparse[rng.random((n, cols)) < 0.9] = 0
    yield "sparse", sparse
    yield "every scale", np.clip(normal * np.exp(rng.uniform(-100, 80, (n, cols))), -3e38, 3e38)
    yield "mix", rng.choice(np.array([0, 1e-45, -1e-45, 2e-45, 1e-38, -1e-38, 1, -1, 3e38, -3e38]), (n, cols))


@pytest.mark.slow
@pytest.mark.parametrize("qtype,backend", with_backends(["q4_K", "q5_K", "q6_K", "q8_0"]), indirect=["backend"])
def test_live_ggml_on_edge_ranges(qtype, backend):
    lib = _ggml_base()
    t = resolve_qtype(qtype)
    for name, x in _edge_ranges(np.random.default_rng(123)):
        x = np.ascontiguousarray(x, dtype=np.float32)
        want = np.zeros(x.shape[0] * row_nbytes(t, x.shape[1]), np.uint8)
        lib.ggml_quantize_init(int(t))
        lib.ggml_quantize_chunk(int(t), x.ctypes.data, want.ctypes.data, 0, x.shape[0], x.shape[1], None)
        got = quantize(x, t)
        assert np.array_equal(got.reshape(-1), want), f"{name}: " + describe_mismatch(x, got, want, qtype)


@pytest.mark.parametrize("qtype", ["q8_0", "q4_K", "q6_K", "f16", "bf16", "f32"])
def test_quantize_finite_is_quantize(qtype):
    """The compare's path for values it knows are finite: quantize's bytes, or None to let
    quantize decide (wrong dtype, a row that is not whole blocks)."""
    from dflash_gguf.quants import quantize_finite

    x = (np.random.default_rng(3).standard_normal((4, 512)) * 0.02).astype(np.float32)
    assert np.array_equal(quantize_finite(x, qtype), quantize(x, qtype, threads=1).reshape(-1))
    assert quantize_finite(x.astype(np.float64), qtype) is None
    if block_size(qtype) > 1:
        assert quantize_finite(np.zeros((2, 48), np.float32), qtype) is None
