"""What every kernel shares: compile options, float32 constants, ggml's bit tricks, the lanes.

Bit-exactness with ggml's reference quantizers (ggml/src/ggml-quants.c): every kernel is compiled with
``fastmath=False``, so LLVM gets no ``contract``/``reassoc``/``arcp`` flags: no fused
multiply-add, no reordered sums, no division turned into a reciprocal multiply, although the
code is compiled for the host CPU. Every float is float32: numba types ``float32 op int`` and
Python float literals as float64, so integers are converted with ``F32(...)`` where C converts
them and constants are module-level ``np.float32`` globals (tests/quants/test_quants.py checks
the generated IR has no double and no FMA). ``error_model="numpy"`` makes a float division by
zero give inf/NaN as in C instead of raising. ``nearest_int`` and the fp16 conversions are
ggml's own bit tricks, on a float32 <-> int32 bitcast intrinsic.

numba's cache stamps a kernel with a hash of its own source file's content only: after editing
this module (or q4_k.py's shared fit, which k_low.py's Q2_K compiles in), delete
``__pycache__/*.nb[ci]`` beside the kernels so they are not loaded stale.

Imported only through the kernel modules, i.e. only when numba is installed.
"""
from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir as _llvm_ir
from numba.core import types as _nb_types
from numba.extending import intrinsic as _intrinsic

F32 = np.float32

# nogil: the thread pool in base.quantize_array runs chunks on all cores. cache: compiled once
# per machine into __pycache__ (a few seconds), then loaded (well under a second).
JIT_OPTIONS = dict(nogil=True, cache=True, fastmath=False, error_model="numpy")
jit = numba.njit(**JIT_OPTIONS)

ZERO = F32(0.0)
ONE = F32(1.0)
F32_01 = F32(0.1)
_MAGIC = F32(12582912.0)  # 1.5 * 2**23
_SCALE_TO_INF = F32(2.0**112)
_SCALE_TO_ZERO = F32(2.0**-110)
_EXP_SCALE = F32(2.0**-112)
_HALF = F32(0.5)


@_intrinsic
def f32_bits(typingctx, f):
    """memcpy(&i, &f, 4): a float32's bits as int32. Typing fails for anything but float32,
    so a float64 that slipped in is a compile error, not a silent rounding difference."""
    if f != _nb_types.float32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], _llvm_ir.IntType(32))

    return _nb_types.int32(_nb_types.float32), codegen


@_intrinsic
def bits_f32(typingctx, i):
    """fp32_from_bits: int32 bits -> float32."""
    if i != _nb_types.int32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], _llvm_ir.FloatType())

    return _nb_types.float32(_nb_types.int32), codegen


@jit
def nearest_int(fval):
    # ggml-quants.c nearest_int: float val = fval + 12582912.f; (bits & 0x7fffff) - 0x400000
    return (np.int64(f32_bits(fval + _MAGIC)) & 0x7FFFFF) - 0x400000


# Below this |v|, nearest_int(v) == (v + 1.5*2^23) - 1.5*2^23 computed in float32: the sum
# stays in [2^23, 2^24), where the kept mantissa bits are the integer itself (base.py's
# NEAREST_INT_LIMIT, the numpy path's fast-path bound).
NEAREST_INT_LIMIT = F32(4194303.0)


@jit
def round_clamp(v, lo, hi):
    """F32(MAX(lo, MIN(hi, nearest_int(v)))) for |v| <= NEAREST_INT_LIMIT, all in float32.

    The hot loops' levels: the int64 route (nearest_int, then an int64 -> float conversion AVX2
    has no vector instruction for) kept LLVM from vectorising the lanes. Callers check the
    range of v first (per trial, from each lane's extremes) and take nearest_int otherwise.

    np.rint is one vroundps (round half to even, as the magic-number sum C uses, which was two
    adds); each clamp is one vminps/vmaxps. Against the magic sum: rint(-0.3) is -0, not +0
    (turned into lo's +0 when lo = 0; with lo < 0 a -0 level only ever multiplies into sums
    that start at +0, where +-0 terms change nothing), and a NaN v (lanes the callers ignore)
    gives lo."""
    r = np.rint(v)
    r = hi if r > hi else r
    return r if r > lo else lo


@jit
def fp32_to_fp16(f):
    # ggml_compute_fp32_to_fp16 (ggml-impl.h), uint32 arithmetic done in int64 masked to 32 bits
    base = (abs(f) * _SCALE_TO_INF) * _SCALE_TO_ZERO
    w = np.int64(f32_bits(f)) & 0xFFFFFFFF
    shl1_w = (w + w) & 0xFFFFFFFF
    sign = w & 0x80000000
    bias = shl1_w & 0xFF000000
    if bias < 0x71000000:
        bias = 0x71000000
    base = bits_f32(np.int32((bias >> 1) + 0x07800000)) + base
    bits = np.int64(f32_bits(base)) & 0xFFFFFFFF
    exp_bits = (bits >> 13) & 0x00007C00
    mantissa_bits = bits & 0x00000FFF
    nonsign = exp_bits + mantissa_bits
    return (sign >> 16) | (0x7E00 if shl1_w > 0xFF000000 else nonsign)


@jit
def fp16_to_fp32(h):
    # ggml_compute_fp16_to_fp32 (ggml-impl.h)
    w = (np.int64(h) << 16) & 0xFFFFFFFF
    sign = w & 0x80000000
    two_w = (w + w) & 0xFFFFFFFF
    exp_offset = 0xE0 << 23
    normalized_value = bits_f32(np.int32((two_w >> 4) + exp_offset)) * _EXP_SCALE
    magic_mask = 126 << 23
    denormalized_value = bits_f32(np.int32((two_w >> 17) | magic_mask)) - _HALF
    denormalized_cutoff = 1 << 27
    if two_w < denormalized_cutoff:
        r = sign | (np.int64(f32_bits(denormalized_value)) & 0xFFFFFFFF)
    else:
        r = sign | (np.int64(f32_bits(normalized_value)) & 0xFFFFFFFF)
    return bits_f32(np.int32(r))


@jit
def fp16_convert(a):
    """fp32 array -> (fp16 bits as int64, the float32 they read back as); used by tests."""
    bits = np.empty(a.size, np.int64)
    back = np.empty(a.size, np.float32)
    for i in range(a.size):
        bits[i] = fp32_to_fp16(a[i])
        back[i] = fp16_to_fp32(bits[i])
    return bits, back


# C fits one sub-block at a time; every sum in it is a chain of dependent float32 adds, so
# a scalar port is latency-bound (about C's speed). Here LANES sub-blocks are fitted in
# lockstep: arrays are position-major (x[i, s] = element i of sub-block s) and each C loop
# `for i` becomes `for i: for s` -- the inner loop runs across independent sub-blocks, which
# LLVM vectorises without reordering any sub-block's own sum. C's branches become per-lane
# selects on values C computed the same way.
LANES = 32


_V8F = _llvm_ir.VectorType(_llvm_ir.FloatType(), 8)
_V8I = _llvm_ir.VectorType(_llvm_ir.IntType(32), 8)
# An 8x8 transpose as AVX's three shuffle stages (unpcklps/unpckhps, shufps, vperm2f128),
# each as an LLVM shufflevector mask over the concatenation of its two operands.
_UNPACK = ([0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15])
_PAIRS = ([0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15])
_HALVES = ([0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15])


@_intrinsic
def transpose8(typingctx, src, src_off, src_stride, dst, dst_off, dst_stride):
    """dst.flat[dst_off + c*dst_stride + a] = src.flat[src_off + a*src_stride + c] for a, c < 8:
    an 8x8 tile of C-contiguous float32 arrays moved through registers (bounds unchecked).

    to_lanes' transpose element by element was a load and a store per float (1/10 of the
    Q4_K kernel); LLVM does not find the shuffle network by itself."""
    for a in (src, dst):
        if not (isinstance(a, _nb_types.Array) and a.dtype == _nb_types.float32 and a.layout == "C"):
            return None
    if not all(isinstance(i, _nb_types.Integer) for i in (src_off, src_stride, dst_off, dst_stride)):
        return None

    def codegen(context, builder, sig, args):
        def ptr(k, n):  # &array k .flat[off + n*stride], k = 0 (src) or 3 (dst)
            data = context.make_array(sig.args[k])(context, builder, args[k]).data
            off, stride = (context.cast(builder, args[i], sig.args[i], _nb_types.intp) for i in (k + 1, k + 2))
            at = builder.add(off, builder.mul(stride, context.get_constant(_nb_types.intp, n)))
            return builder.bitcast(builder.gep(data, [at]), _V8F.as_pointer())

        def shuf(a, b, mask):
            return builder.shuffle_vector(a, b, _llvm_ir.Constant(_V8I, mask))

        r = [builder.load(ptr(0, a), align=4) for a in range(8)]
        t = [shuf(r[k], r[k + 1], m) for k in range(0, 8, 2) for m in _UNPACK]
        u = [shuf(t[k + h], t[k + h + 2], m) for k in (0, 4) for h in (0, 1) for m in _PAIRS]
        for c in range(8):
            col = shuf(u[c % 4], u[c % 4 + 4], _HALVES[c // 4])
            builder.store(col, ptr(3, c), align=4)
        return context.get_dummy_value()

    return _nb_types.void(src, src_off, src_stride, dst, dst_off, dst_stride), codegen


@jit
def to_lanes(blocks, b0, nsub, x):
    """Sub-blocks of nsub values of blocks[b0:] into the columns of x (nsub, lanes),
    position-major; lanes past the last block are zero (flat, ignored)."""
    per = blocks.shape[1] // nsub
    nb = blocks.shape[0]
    lanes = x.shape[1]
    if b0 + lanes // per <= nb and nsub % 8 == 0 and lanes % 8 == 0:
        # Whole group: lane s is the nsub floats at blocks.flat[b0*bs + nsub*s:], in 8x8 tiles
        at = b0 * blocks.shape[1]
        for s0 in range(0, lanes, 8):
            for i0 in range(0, nsub, 8):
                transpose8(blocks, at + nsub * s0 + i0, nsub, x, i0 * lanes + s0, lanes)
        return
    for s in range(lanes):
        b = b0 + s // per
        j = s % per
        if b < nb:
            for i in range(nsub):
                x[i, s] = blocks[b, nsub * j + i]
        else:
            for i in range(nsub):
                x[i, s] = ZERO


# The fits' working set is one flat float32 buffer: each region (the lanes' inputs, levels,
# per-lane values) starts at a compile-time constant offset, a module global of the kernel,
# and is indexed b[REGION + i * LANES + s]. LLVM then knows no two regions overlap, so it
# vectorises across lanes without runtime alias checks and keeps sums in registers over an
# unrolled run of positions; as separate arrays the Q4_K fit ran 1.3x and Q6_K's 1.5x slower.
# Regions start SKEW floats apart modulo 4 KiB: arrays of exactly 4 KiB at the same offset
# modulo 4 KiB make a store to one and the next load of the same element of another collide
# in store forwarding ("4K aliasing").
_SKEW = 16


def lane_layout(*region_rows: int, lanes: int = LANES) -> tuple[list[int], int]:
    """Offsets of regions of ``rows`` x ``lanes`` floats in one buffer, skewed, and the buffer size."""
    offsets, at = [], 0
    for rows in region_rows:
        offsets.append(at)
        at += rows * lanes + _SKEW
    return offsets, at


@jit
def lane_buffer(size):
    """A 64-byte aligned float32 buffer of ``size`` (the allocator gives 16: a vector load
    that straddles two cache lines costs two, which half of them did at 16 mod 32)."""
    raw = np.empty(size + 16, np.float32)
    a = (16 - (raw.ctypes.data % 64) // 4) % 16
    return raw[a:a + size]
