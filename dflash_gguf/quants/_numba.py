"""Optional compiled kernels (numba) for Q8_0, Q4_K, Q5_K and Q6_K: the numpy path's bytes, faster.

Used automatically when numba is importable; ``DFLASH_GGUF_NUMBA=0`` (or :func:`set_enabled`)
forces the numpy path. Each kernel maps ``(n_blocks, block_size)`` C-contiguous float32 to
``(n_blocks, type_size)`` uint8 and mirrors ggml-quants.c's ``quantize_row_*_ref`` operation by
operation; the K-quant fits run several sub-blocks in lockstep (see ``_LANES``).

Bit-exactness (shared/reference/quantization.md §2, §9): every kernel is compiled with
``fastmath=False``, so LLVM gets no ``contract``/``reassoc``/``arcp`` flags: no fused
multiply-add, no reordered sums, no division turned into a reciprocal multiply, although the
code is compiled for the host CPU. Every float is float32: numba types ``float32 op int`` and
Python float literals as float64, so integers are converted with ``F32(...)`` where C converts
them and constants are module-level ``np.float32`` globals (tests/test_quants.py checks the
generated IR has no double and no FMA). ``error_model="numpy"`` makes a float division by zero
give inf/NaN as in C instead of raising. ``nearest_int`` and the fp16 conversions are ggml's own
bit tricks, on a float32 <-> int32 bitcast intrinsic. The only float -> integer cast of C that
can go out of range (Q8_0's ``(int8_t)roundf``) is spelled out as x86-64 executes it.
"""
from __future__ import annotations

import os

import numpy as np

try:  # numba is optional (the ``fast`` extra)
    import numba
    from llvmlite import ir as _llvm_ir
    from numba.core import types as _nb_types
    from numba.extending import intrinsic as _intrinsic
except ImportError:  # pragma: no cover - exercised where numba is absent
    numba = None

F32 = np.float32

#: Whether numba is importable at all.
AVAILABLE = numba is not None
#: Set to 0 (or false/no/off) to force the numpy path.
ENV_VAR = "DFLASH_GGUF_NUMBA"


def _wanted(value: str | None) -> bool:
    return (value or "1").strip().lower() not in ("0", "false", "no", "off")


_enabled = AVAILABLE and _wanted(os.environ.get(ENV_VAR))


def enabled() -> bool:
    """Whether the quantizers use the numba kernels (else the numpy path)."""
    return _enabled


def set_enabled(flag: bool) -> bool:
    """Switch between the numba kernels and the numpy path; returns the previous setting.

    Raises:
        RuntimeError: ``flag`` is true but numba is not installed.
    """
    global _enabled
    if flag and not AVAILABLE:
        raise RuntimeError("numba is not installed (pip install 'dflash-gguf[fast]')")
    prev, _enabled = _enabled, bool(flag)
    return prev


def run(kernel, blocks: np.ndarray) -> np.ndarray:
    """``kernel(blocks)`` on C-contiguous, writable float32: numba compiles one specialisation
    per array type, so a read-only chunk (a memmap's) is copied rather than compiled for."""
    b = np.ascontiguousarray(blocks, dtype=np.float32)
    if not b.flags.writeable:
        b = b.copy()
    return kernel(b)


if AVAILABLE:
    # nogil: the thread pool in base.quantize_array runs chunks on all cores. cache: compiled once
    # per machine into __pycache__ (a few seconds), then loaded (well under a second).
    JIT_OPTIONS = dict(nogil=True, cache=True, fastmath=False, error_model="numpy")
    jit = numba.njit(**JIT_OPTIONS)

    @_intrinsic
    def _f32_bits(typingctx, f):
        """memcpy(&i, &f, 4): a float32's bits as int32. Typing fails for anything but float32,
        so a float64 that slipped in is a compile error, not a silent rounding difference."""
        if f != _nb_types.float32:
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], _llvm_ir.IntType(32))

        return _nb_types.int32(_nb_types.float32), codegen

    @_intrinsic
    def _bits_f32(typingctx, i):
        """fp32_from_bits: int32 bits -> float32."""
        if i != _nb_types.int32:
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], _llvm_ir.FloatType())

        return _nb_types.float32(_nb_types.int32), codegen

    _MAGIC = F32(12582912.0)  # 1.5 * 2**23
    _ZERO = F32(0.0)
    _ONE = F32(1.0)
    _F32_32 = F32(32.0)
    _F32_63 = F32(63.0)
    _F32_M128 = F32(-128.0)
    _F32_01 = F32(0.1)
    _GROUP_MAX_EPS = F32(1e-15)
    _SCALE_TO_INF = F32(2.0**112)
    _SCALE_TO_ZERO = F32(2.0**-110)
    _EXP_SCALE = F32(2.0**-112)
    _HALF = F32(0.5)

    @jit
    def nearest_int(fval):
        # ggml-quants.c nearest_int: float val = fval + 12582912.f; (bits & 0x7fffff) - 0x400000
        return (np.int64(_f32_bits(fval + _MAGIC)) & 0x7FFFFF) - 0x400000

    @jit
    def fp32_to_fp16(f):
        # ggml_compute_fp32_to_fp16 (ggml-impl.h), uint32 arithmetic done in int64 masked to 32 bits
        base = (abs(f) * _SCALE_TO_INF) * _SCALE_TO_ZERO
        w = np.int64(_f32_bits(f)) & 0xFFFFFFFF
        shl1_w = (w + w) & 0xFFFFFFFF
        sign = w & 0x80000000
        bias = shl1_w & 0xFF000000
        if bias < 0x71000000:
            bias = 0x71000000
        base = _bits_f32(np.int32((bias >> 1) + 0x07800000)) + base
        bits = np.int64(_f32_bits(base)) & 0xFFFFFFFF
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
        normalized_value = _bits_f32(np.int32((two_w >> 4) + exp_offset)) * _EXP_SCALE
        magic_mask = 126 << 23
        denormalized_value = _bits_f32(np.int32((two_w >> 17) | magic_mask)) - _HALF
        denormalized_cutoff = 1 << 27
        if two_w < denormalized_cutoff:
            r = sign | (np.int64(_f32_bits(denormalized_value)) & 0xFFFFFFFF)
        else:
            r = sign | (np.int64(_f32_bits(normalized_value)) & 0xFFFFFFFF)
        return _bits_f32(np.int32(r))

    @jit
    def fp16_convert(a):
        """fp32 array -> (fp16 bits as int64, the float32 they read back as); used by tests."""
        bits = np.empty(a.size, np.int64)
        back = np.empty(a.size, np.float32)
        for i in range(a.size):
            bits[i] = fp32_to_fp16(a[i])
            back[i] = fp16_to_fp32(bits[i])
        return bits, back

    # --- quantize_row_q8_0_ref -------------------------------------------------------------------
    _F32_127 = F32(127.0)
    _INT32_LIMIT = F32(2147483648.0)
    _SIGN_BIT = np.int32(-2147483648)
    # roundf(v) == trunc(v + copysign(0.49999997f, v)) for |v| < 256, and |x*id| <= ~127.5 here
    # whenever id is finite (q8_0.py has the argument)
    _HALF_DOWN_BITS = np.int32(np.nextafter(F32(0.5), F32(0)).view(np.int32))

    @jit
    def q8_0(blocks):
        """quantize_row_q8_0_ref: (nb, 32) float32 C-contiguous -> (nb, 34) uint8."""
        nb = blocks.shape[0]
        out = np.empty((nb, 34), np.uint8)
        for i in range(nb):
            amax = _ZERO
            for j in range(32):
                a = abs(blocks[i, j])
                amax = amax if amax > a else a  # amax = MAX(amax, fabsf(v))
            d = amax / _F32_127
            inv = _ONE / d if d != 0 else _ZERO  # id = d ? 1.0f/d : 0.0f
            h = fp32_to_fp16(d)
            out[i, 0] = h & 0xFF
            out[i, 1] = h >> 8
            for j in range(32):
                x0 = blocks[i, j] * inv
                r = x0 + _bits_f32(np.int32((_f32_bits(x0) & _SIGN_BIT) | _HALF_DOWN_BITS))
                # qs[j] = roundf(x0) as int8_t: x86-64 truncates to int32 (INT32_MIN, low byte 0,
                # when out of range or NaN -- reachable only when 1/d overflows) and keeps the low byte
                out[i, 2 + j] = np.int32(r) if abs(r) < _INT32_LIMIT else 0
        return out

    # --- make_qkx2_quants, quantize_row_q4_K_ref / q5_K_ref ------------------------------------
    # C fits one sub-block at a time; every sum in it is a chain of dependent float32 adds, so
    # a scalar port is latency-bound (about C's speed). Here _LANES sub-blocks are fitted in
    # lockstep: arrays are position-major (x[i, s] = element i of sub-block s) and each C loop
    # `for i` becomes `for i: for s` -- the inner loop runs across independent sub-blocks, which
    # LLVM vectorises without reordering any sub-block's own sum. C's branches become per-lane
    # selects on values C computed the same way.
    _LANES = 32

    @jit
    def _qkx2_lanes(x, w, nmax, rmin, rdelta, nstep, v):
        """make_qkx2_quants(n, nmax, x, w, L, &the_min, Laux, rmin, rdelta, nstep, use_mad=false)
        for the columns of the position-major ``x``, ``w`` (n, lanes).

        Out in ``v`` (scratch, (18, lanes)): row 0 scale, 1 the_min, and what regenerates L
        (needed only where the stored scale reads back as 0): 2 the iscale and 3 the min of
        the accepted trial, 4 nonzero where max == min (L = 0).
        """
        n = x.shape[0]
        ns = x.shape[1]
        scale, the_min, l_iscale, l_min, flat = v[0], v[1], v[2], v[3], v[4]
        mn, mx, sum_w, sum_x, iscale, best = v[5], v[6], v[7], v[8], v[9], v[10]
        sum_l, sum_l2, sum_xl, t_scale, t_min, t_d, cur = v[11], v[12], v[13], v[14], v[15], v[16], v[17]
        nmax_f = F32(nmax)
        # min = max = x[0]; sum_w = weights[0]; sum_x = sum_w * x[0]; then i = 1..n-1
        for s in range(ns):
            mn[s] = x[0, s]
            mx[s] = x[0, s]
            sum_w[s] = w[0, s]
            sum_x[s] = w[0, s] * x[0, s]
        for i in range(1, n):
            for s in range(ns):
                xi = x[i, s]
                wi = w[i, s]
                m = mn[s]
                mn[s] = xi if xi < m else m
                m = mx[s]
                mx[s] = xi if xi > m else m
                sum_w[s] += wi
                sum_x[s] += wi * xi
        for s in range(ns):
            m = mn[s]
            m = _ZERO if m > 0 else m  # if (min > 0) min = 0
            mn[s] = m
            flat[s] = _ONE if mx[s] == m else _ZERO  # C returns early: L = 0, scale 0
            isc = nmax_f / (mx[s] - m)
            iscale[s] = isc
            scale[s] = _ONE / isc
            l_iscale[s] = isc
            l_min[s] = m
            best[s] = _ZERO
        # initial L and best_error += w * (diff*diff), diff = scale*L[i] + min - x[i]
        for i in range(n):
            for s in range(ns):
                xi = x[i, s]
                lf = F32(max(0, min(nmax, nearest_int(iscale[s] * (xi - mn[s])))))
                diff = scale[s] * lf + mn[s] - xi
                best[s] += w[i, s] * (diff * diff)
        for step in range(nstep + 1):
            num = rmin + rdelta * F32(step) + nmax_f  # (rmin + rdelta*is + nmax), left to right
            for s in range(ns):
                iscale[s] = num / (mx[s] - mn[s])  # the live min: accepted trials move it
                sum_l[s] = _ZERO
                sum_l2[s] = _ZERO
                sum_xl[s] = _ZERO
                cur[s] = _ZERO
            for i in range(n):
                for s in range(ns):
                    xi = x[i, s]
                    lf = F32(max(0, min(nmax, nearest_int(iscale[s] * (xi - mn[s])))))
                    wl = w[i, s] * lf  # sum_l += w*l; sum_l2 += w*l*l; sum_xl += w*l*x[i]
                    sum_l[s] += wl
                    sum_l2[s] += wl * lf
                    sum_xl[s] += wl * xi
            for s in range(ns):
                D = sum_w[s] * sum_l2[s] - sum_l[s] * sum_l[s]
                ts = (sum_w[s] * sum_xl[s] - sum_x[s] * sum_l[s]) / D
                tm = (sum_l2[s] * sum_x[s] - sum_l[s] * sum_xl[s]) / D
                if tm > 0:
                    tm = _ZERO
                    ts = sum_xl[s] / sum_l2[s]
                t_scale[s] = ts
                t_min[s] = tm
                t_d[s] = D
            # cur_error over Laux, recomputed from iscale and min rather than stored
            for i in range(n):
                for s in range(ns):
                    xi = x[i, s]
                    lf = F32(max(0, min(nmax, nearest_int(iscale[s] * (xi - mn[s])))))
                    diff = t_scale[s] * lf + t_min[s] - xi
                    cur[s] += w[i, s] * (diff * diff)
            for s in range(ns):
                # `if (D > 0) { ... if (cur_error < best_error) {...} }`; lanes that returned
                # early (max == min) ran on inf/NaN and are never accepted
                if t_d[s] > 0 and cur[s] < best[s] and flat[s] == 0:
                    best[s] = cur[s]
                    scale[s] = t_scale[s]
                    l_iscale[s] = iscale[s]
                    l_min[s] = mn[s]
                    mn[s] = t_min[s]
        for s in range(ns):
            if flat[s] != 0:
                scale[s] = _ZERO
            the_min[s] = -mn[s]

    @jit
    def _to_lanes(blocks, b0, nsub, x):
        """Sub-blocks of nsub values of blocks[b0:] into the columns of x (nsub, lanes),
        position-major; lanes past the last block are zero (flat, ignored)."""
        per = blocks.shape[1] // nsub
        nb = blocks.shape[0]
        for s in range(x.shape[1]):
            b = b0 + s // per
            j = s % per
            if b < nb:
                for i in range(nsub):
                    x[i, s] = blocks[b, nsub * j + i]
            else:
                for i in range(nsub):
                    x[i, s] = _ZERO

    @jit
    def _k4_weights(x, w):
        # sum_x2 += x*x (from 0); av_x = sqrtf(sum_x2/32); weights[l] = av_x + fabsf(x[l])
        for s in range(x.shape[1]):
            sum_x2 = _ZERO
            for i in range(32):
                sum_x2 += x[i, s] * x[i, s]
            av_x = np.sqrt(sum_x2 / _F32_32)
            for i in range(32):
                w[i, s] = av_x + abs(x[i, s])

    @jit
    def _k4_superblock(xb, v, s0, nmax, y, L):
        """The rest of quantize_row_q{4,5}_K_ref for one super-block ``xb`` (256,) whose
        eight sub-blocks were fitted in lanes s0..s0+7 of ``v``: d, dmin and the 12 scale bytes
        into y[0:16], the requantized levels into L (256,)."""
        max_scale = _ZERO
        max_min = _ZERO
        for j in range(8):
            if v[0, s0 + j] > max_scale:
                max_scale = v[0, s0 + j]
            if v[1, s0 + j] > max_min:
                max_min = v[1, s0 + j]
        inv_scale = _F32_63 / max_scale if max_scale > 0 else _ZERO
        inv_min = _F32_63 / max_min if max_min > 0 else _ZERO
        d16 = fp32_to_fp16(max_scale / _F32_63)
        dmin16 = fp32_to_fp16(max_min / _F32_63)
        y[0] = d16 & 0xFF
        y[1] = d16 >> 8
        y[2] = dmin16 & 0xFF
        y[3] = dmin16 >> 8
        d_read = fp16_to_fp32(d16)  # GGML_FP16_TO_FP32(y[i].d): the stored scale read back
        dmin_read = fp16_to_fp32(dmin16)
        for j in range(12):
            y[4 + j] = 0
        for j in range(8):
            s = s0 + j
            ls = min(63, nearest_int(inv_scale * v[0, s]) & 0xFF)  # uint8_t ls = ...; MIN(63, ls)
            lm = min(63, nearest_int(inv_min * v[1, s]) & 0xFF)
            if j < 4:
                y[4 + j] = ls
                y[8 + j] = lm
            else:
                y[8 + j] = (ls & 0xF) | ((lm & 0xF) << 4)
                y[j] |= (ls >> 4) << 6
                y[4 + j] |= (lm >> 4) << 6
            # get_scale_min_k4(j) reads back exactly ls, lm (both <= 63)
            d = d_read * F32(ls)
            if d == 0:  # `if (!d) continue;`: keep make_qkx2_quants' L
                for ii in range(32):
                    if v[4, s] != 0:
                        L[32 * j + ii] = 0
                    else:
                        L[32 * j + ii] = max(0, min(nmax, nearest_int(v[2, s] * (xb[32 * j + ii] - v[3, s]))))
                continue
            dm = dmin_read * F32(lm)
            for ii in range(32):
                # nearest_int((x + dm)/d): a true division, as in C
                L[32 * j + ii] = max(0, min(nmax, nearest_int((xb[32 * j + ii] + dm) / d)))

    @jit
    def _k4(blocks, nmax, rmin, rdelta, nstep, type_size):
        nb = blocks.shape[0]
        out = np.empty((nb, type_size), np.uint8)
        x = np.empty((32, _LANES), np.float32)
        w = np.empty((32, _LANES), np.float32)
        v = np.empty((18, _LANES), np.float32)
        L = np.empty(256, np.int64)
        per = _LANES // 8
        for b0 in range(0, nb, per):
            _to_lanes(blocks, b0, 32, x)
            _k4_weights(x, w)
            _qkx2_lanes(x, w, nmax, rmin, rdelta, nstep, v)
            for b in range(min(per, nb - b0)):
                y = out[b0 + b]
                _k4_superblock(blocks[b0 + b], v, 8 * b, nmax, y, L)
                if type_size == 144:
                    # Q4_K: byte 32g + l = L[64g + l] | L[64g + 32 + l] << 4
                    for g in range(4):
                        for l in range(32):
                            y[16 + 32 * g + l] = L[64 * g + l] | (L[64 * g + 32 + l] << 4)
                else:
                    # Q5_K: qh[j] bit 2c (2c+1) = bit 4 of L[64c + j] (L[64c + 32 + j]); qs as Q4_K
                    for j in range(32):
                        y[16 + j] = 0
                    m1 = 1
                    m2 = 2
                    for c in range(4):
                        for j in range(32):
                            l1 = L[64 * c + j]
                            if l1 > 15:
                                l1 -= 16
                                y[16 + j] |= m1
                            l2 = L[64 * c + j + 32]
                            if l2 > 15:
                                l2 -= 16
                                y[16 + j] |= m2
                            y[48 + 32 * c + j] = l1 | (l2 << 4)
                        m1 <<= 2
                        m2 <<= 2
        return out

    @jit
    def q4_k(blocks):
        """quantize_row_q4_K_ref: (nb, 256) float32 C-contiguous -> (nb, 144) uint8."""
        return _k4(blocks, 15, F32(-1.0), _F32_01, 20, 144)

    @jit
    def q5_k(blocks):
        """quantize_row_q5_K_ref: (nb, 256) float32 C-contiguous -> (nb, 176) uint8."""
        return _k4(blocks, 31, F32(-0.5), _F32_01, 15, 176)

    # --- make_qx_quants, quantize_row_q6_K_ref ------------------------------------------------
    @jit
    def _qx_lanes(x, nmax, v):
        """make_qx_quants(n, nmax, x, L, rmse_type=1, qw=NULL) for the columns of the
        position-major x (n, lanes), in lockstep as _qkx2_lanes.

        Out in ``v`` ((9, lanes) scratch): row 0 the scale, 1 the iscale of the accepted trial
        (regenerates L where the stored scale reads back as 0), 2 nonzero where every |x| < eps
        (C returns early with L = 0).
        """
        n = x.shape[0]
        ns = x.shape[1]
        scale, l_iscale, zero, mx, amax = v[0], v[1], v[2], v[3], v[4]
        iscale, sumlx, suml2, best = v[5], v[6], v[7], v[8]
        for s in range(ns):
            amax[s] = _ZERO
            mx[s] = _ZERO
        for i in range(n):
            for s in range(ns):
                ax = abs(x[i, s])
                up = ax > amax[s]  # if (ax > amax) { amax = ax; max = x[i]; }
                amax[s] = ax if up else amax[s]
                mx[s] = x[i, s] if up else mx[s]
        for s in range(ns):
            zero[s] = _ONE if amax[s] < _GROUP_MAX_EPS else _ZERO  # C returns 0 early, L = 0
            iscale[s] = F32(-nmax) / mx[s]  # float iscale = -nmax / max
            sumlx[s] = _ZERO
            suml2[s] = _ZERO
        for i in range(n):
            for s in range(ns):
                xi = x[i, s]
                lf = F32(max(-nmax, min(nmax - 1, nearest_int(iscale[s] * xi))))
                w = xi * xi  # rmse_type 1
                sumlx[s] += w * xi * lf  # sumlx += w*x[i]*l
                suml2[s] += w * lf * lf  # suml2 += w*l*l
        for s in range(ns):
            sc = sumlx[s] / suml2[s] if suml2[s] != 0 else _ZERO
            scale[s] = sc
            best[s] = sc * sumlx[s]
            l_iscale[s] = iscale[s]
        for step in range(-9, 10):
            if step == 0:
                continue
            num = F32(nmax) + _F32_01 * F32(step)
            for s in range(ns):
                iscale[s] = -num / mx[s]  # iscale = -(nmax + 0.1f*is) / max
                sumlx[s] = _ZERO
                suml2[s] = _ZERO
            for i in range(n):
                for s in range(ns):
                    xi = x[i, s]
                    lf = F32(max(-nmax, min(nmax - 1, nearest_int(iscale[s] * xi))))
                    w = xi * xi
                    sumlx[s] += w * xi * lf
                    suml2[s] += w * lf * lf
            for s in range(ns):
                # if (suml2 > 0 && sumlx*sumlx > best*suml2) { L = ...; scale = sumlx/suml2; best = scale*sumlx; }
                if suml2[s] > 0 and sumlx[s] * sumlx[s] > best[s] * suml2[s] and zero[s] == 0:
                    sc = sumlx[s] / suml2[s]
                    scale[s] = sc
                    best[s] = sc * sumlx[s]
                    l_iscale[s] = iscale[s]
        for s in range(ns):
            if zero[s] != 0:
                scale[s] = _ZERO

    @jit
    def q6_k(blocks):
        """quantize_row_q6_K_ref: (nb, 256) float32 C-contiguous -> (nb, 210) uint8."""
        nb = blocks.shape[0]
        out = np.empty((nb, 210), np.uint8)
        x = np.empty((16, _LANES), np.float32)
        v = np.empty((9, _LANES), np.float32)
        L = np.empty(256, np.int64)
        sc = np.empty(16, np.int64)
        per = _LANES // 16
        for b0 in range(0, nb, per):
            _to_lanes(blocks, b0, 16, x)
            _qx_lanes(x, 32, v)
            for b in range(min(per, nb - b0)):
                y = out[b0 + b]
                xb = blocks[b0 + b]
                s0 = 16 * b
                # max_scale: the first scale of largest magnitude (strict >, from 0)
                max_scale = _ZERO
                max_abs_scale = _ZERO
                for ib in range(16):
                    abs_scale = abs(v[0, s0 + ib])
                    if abs_scale > max_abs_scale:
                        max_abs_scale = abs_scale
                        max_scale = v[0, s0 + ib]
                if max_abs_scale < _GROUP_MAX_EPS:
                    for k in range(210):  # memset(&y[i], 0, sizeof(block_q6_K))
                        y[k] = 0
                    continue
                iscale = _F32_M128 / max_scale
                d16 = fp32_to_fp16(_ONE / iscale)  # GGML_FP32_TO_FP16(1/iscale)
                y[208] = d16 & 0xFF
                y[209] = d16 >> 8
                d_read = fp16_to_fp32(d16)
                for ib in range(16):
                    q = min(127, nearest_int(iscale * v[0, s0 + ib])) & 0xFF  # stored as int8_t
                    y[192 + ib] = q
                    sc[ib] = q - 256 if q > 127 else q
                for j in range(16):
                    s = s0 + j
                    d = d_read * F32(sc[j])
                    if d == 0:  # `if (!d) continue;`: keep make_qx_quants' L
                        for ii in range(16):
                            if v[2, s] != 0:
                                L[16 * j + ii] = 0
                            else:
                                L[16 * j + ii] = 32 + max(-32, min(31, nearest_int(v[1, s] * xb[16 * j + ii])))
                        continue
                    for ii in range(16):
                        # nearest_int(x[i]/d): a true division
                        L[16 * j + ii] = max(-32, min(31, nearest_int(xb[16 * j + ii] / d))) + 32
                # ql[64h + l] = q[l] | q[l+64] << 4, ql[64h+32+l] = q[l+32] | q[l+96] << 4,
                # qh[32h + l] = hi2 of q[l], q[l+32], q[l+64], q[l+96]  (q relative to 128h)
                for h in range(2):
                    for l in range(32):
                        j = 128 * h + l
                        y[64 * h + l] = (L[j] & 0xF) | ((L[j + 64] & 0xF) << 4)
                        y[64 * h + 32 + l] = (L[j + 32] & 0xF) | ((L[j + 96] & 0xF) << 4)
                        y[128 + 32 * h + l] = (
                            (L[j] >> 4) | ((L[j + 32] >> 4) << 2) | ((L[j + 64] >> 4) << 4) | ((L[j + 96] >> 4) << 6)
                        )
        return out
