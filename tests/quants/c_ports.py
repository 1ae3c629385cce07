"""ggml-quants.c's K-quant reference quantizers, ported line by line as scalar float32 code.

A second, independent implementation for the tests: no vectorisation, no lanes, no shortcuts,
one C statement per Python statement, every float a NumPy float32 scalar (NumPy >= 2 keeps
float32 op Python int in float32; the constants are float32 anyway). Slow (~0.1 s a block), so
the tests run it on a few blocks. Sources: ``make_qkx2_quants``, ``make_qx_quants``,
``quantize_row_q4_K_ref``, ``quantize_row_q5_K_ref``, ``quantize_row_q6_K_ref`` and
``get_scale_min_k4`` of ggml/src/ggml-quants.c (x86-64 build, no FMA contraction).
"""
from __future__ import annotations

import functools

import numpy as np

F32 = np.float32
QK_K = 256
GROUP_MAX_EPS = F32(1e-15)


def _quiet(fn):
    """C's inf/NaN intermediates (huge or subnormal inputs) are reproduced, not warned about."""
    @functools.wraps(fn)
    def run(*args):
        with np.errstate(all="ignore"):
            return fn(*args)
    return run


def nearest_int(fval) -> int:
    # float val = fval + 12582912.f; int i; memcpy(&i, &val, 4); return (i & 0x007fffff) - 0x00400000;
    val = F32(fval) + F32(12582912.0)
    i = int(np.array(val, np.float32).view(np.int32))
    return (i & 0x007FFFFF) - 0x00400000


def fp16_bits(f) -> int:
    """GGML_FP32_TO_FP16: round to nearest even, as an IEEE half's 16 bits."""
    with np.errstate(over="ignore"):
        return int(np.array(F32(f), np.float32).astype(np.float16).view(np.uint16))


def fp16_value(bits: int) -> np.float32:
    """GGML_FP16_TO_FP32."""
    return F32(np.array(bits, np.uint16).view(np.float16))


def get_scale_min_k4(j: int, q) -> tuple[int, int]:
    if j < 4:
        return q[j] & 63, q[j + 4] & 63
    return (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4)


@_quiet
def make_qkx2_quants(n, nmax, x, weights, rmin, rdelta, nstep) -> tuple[np.float32, np.float32, list[int]]:
    """Returns (scale, *the_min, L) for use_mad = false."""
    L = [0] * n
    mn = x[0]
    mx = x[0]
    sum_w = weights[0]
    sum_x = sum_w * x[0]
    for i in range(1, n):
        if x[i] < mn:
            mn = x[i]
        if x[i] > mx:
            mx = x[i]
        w = weights[i]
        sum_w += w
        sum_x += w * x[i]
    if mn > 0:
        mn = F32(0)
    if mx == mn:
        return F32(0), -mn, [0] * n
    iscale = F32(nmax) / (mx - mn)
    scale = F32(1) / iscale
    best_error = F32(0)
    for i in range(n):
        l = nearest_int(iscale * (x[i] - mn))
        L[i] = max(0, min(nmax, l))
        diff = scale * F32(L[i]) + mn - x[i]
        diff = diff * diff
        best_error += weights[i] * diff
    for step in range(nstep + 1):
        iscale = (F32(rmin) + F32(rdelta) * F32(step) + F32(nmax)) / (mx - mn)
        sum_l = sum_l2 = sum_xl = F32(0)
        laux = [0] * n
        for i in range(n):
            l = max(0, min(nmax, nearest_int(iscale * (x[i] - mn))))
            laux[i] = l
            w = weights[i]
            sum_l += w * F32(l)
            sum_l2 += w * F32(l) * F32(l)
            sum_xl += w * F32(l) * x[i]
        D = sum_w * sum_l2 - sum_l * sum_l
        if D > 0:
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            if this_min > 0:
                this_min = F32(0)
                this_scale = sum_xl / sum_l2
            cur_error = F32(0)
            for i in range(n):
                diff = this_scale * F32(laux[i]) + this_min - x[i]
                diff = diff * diff
                cur_error += weights[i] * diff
            if cur_error < best_error:
                L = laux
                best_error = cur_error
                scale = this_scale
                mn = this_min
    return scale, -mn, L


def _k4_block(x: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int):
    """The part quantize_row_q4_K_ref and quantize_row_q5_K_ref share: (d bits, dmin bits,
    scales[12], L[256])."""
    L = [0] * QK_K
    scales, mins = [F32(0)] * 8, [F32(0)] * 8
    max_scale = F32(0)
    max_min = F32(0)
    for j in range(QK_K // 32):
        xs = [x[32 * j + i] for i in range(32)]
        sum_x2 = F32(0)
        for v in xs:
            sum_x2 += v * v
        av_x = F32(np.sqrt(sum_x2 / F32(32)))
        weights = [av_x + F32(abs(v)) for v in xs]
        scales[j], mins[j], L[32 * j:32 * j + 32] = make_qkx2_quants(32, nmax, xs, weights, rmin, rdelta, nstep)
        if scales[j] > max_scale:
            max_scale = scales[j]
        if mins[j] > max_min:
            max_min = mins[j]
    inv_scale = F32(63) / max_scale if max_scale > 0 else F32(0)
    inv_min = F32(63) / max_min if max_min > 0 else F32(0)
    q = [0] * 12
    for j in range(QK_K // 32):
        ls = min(63, nearest_int(inv_scale * scales[j]) & 0xFF)  # uint8_t ls = nearest_int(...); MIN(63, ls)
        lm = min(63, nearest_int(inv_min * mins[j]) & 0xFF)
        if j < 4:
            q[j] = ls
            q[j + 4] = lm
        else:
            q[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4)
            q[j - 4] |= (ls >> 4) << 6
            q[j - 0] |= (lm >> 4) << 6
    d_bits = fp16_bits(max_scale / F32(63))
    dmin_bits = fp16_bits(max_min / F32(63))
    for j in range(QK_K // 32):
        sc, m = get_scale_min_k4(j, q)
        d = fp16_value(d_bits) * F32(sc)
        if not d:
            continue
        dm = fp16_value(dmin_bits) * F32(m)
        for ii in range(32):
            L[32 * j + ii] = max(0, min(nmax, nearest_int((x[32 * j + ii] + dm) / d)))
    return d_bits, dmin_bits, q, L


@_quiet
def quantize_row_q4_K(x: np.ndarray) -> np.ndarray:
    """float32 values (a multiple of 256) -> block_q4_K bytes (144 a block)."""
    out = []
    for b in np.asarray(x, np.float32).reshape(-1, QK_K):
        d, dmin, scales, L = _k4_block(list(b), 15, -1.0, 0.1, 20)
        qs = []
        for j in range(0, QK_K, 64):
            qs += [L[j + l] | (L[j + l + 32] << 4) for l in range(32)]
        out.append([d & 0xFF, d >> 8, dmin & 0xFF, dmin >> 8, *scales, *qs])
    return np.array(out, np.uint8)


@_quiet
def quantize_row_q5_K(x: np.ndarray) -> np.ndarray:
    """float32 values (a multiple of 256) -> block_q5_K bytes (176 a block)."""
    out = []
    for b in np.asarray(x, np.float32).reshape(-1, QK_K):
        d, dmin, scales, L = _k4_block(list(b), 31, -0.5, 0.1, 15)
        qh, ql = [0] * 32, []
        m1, m2 = 1, 2
        for n in range(0, QK_K, 64):
            for j in range(32):
                l1 = L[n + j]
                if l1 > 15:
                    l1 -= 16
                    qh[j] |= m1
                l2 = L[n + j + 32]
                if l2 > 15:
                    l2 -= 16
                    qh[j] |= m2
                ql.append(l1 | (l2 << 4))
            m1 <<= 2
            m2 <<= 2
        out.append([d & 0xFF, d >> 8, dmin & 0xFF, dmin >> 8, *scales, *qh, *ql])
    return np.array(out, np.uint8)


@_quiet
def make_qx_quants(n, nmax, x) -> tuple[np.float32, list[int]]:
    """make_qx_quants(n, nmax, x, L, rmse_type = 1, qw = NULL): (scale, L)."""
    mx = F32(0)
    amax = F32(0)
    for i in range(n):
        ax = F32(abs(x[i]))
        if ax > amax:
            amax = ax
            mx = x[i]
    if amax < GROUP_MAX_EPS:
        return F32(0), [0] * n
    iscale = F32(-nmax) / mx
    L = [0] * n
    sumlx = suml2 = F32(0)
    for i in range(n):
        l = max(-nmax, min(nmax - 1, nearest_int(iscale * x[i])))
        L[i] = l + nmax
        w = x[i] * x[i]
        sumlx += w * x[i] * F32(l)
        suml2 += w * F32(l) * F32(l)
    scale = sumlx / suml2 if suml2 else F32(0)
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = -(F32(nmax) + F32(0.1) * F32(step)) / mx
        sumlx = suml2 = F32(0)
        for i in range(n):
            l = max(-nmax, min(nmax - 1, nearest_int(iscale * x[i])))
            w = x[i] * x[i]
            sumlx += w * x[i] * F32(l)
            suml2 += w * F32(l) * F32(l)
        if suml2 > 0 and sumlx * sumlx > best * suml2:
            for i in range(n):
                L[i] = nmax + max(-nmax, min(nmax - 1, nearest_int(iscale * x[i])))
            scale = sumlx / suml2
            best = scale * sumlx
    return scale, L


@_quiet
def quantize_row_q6_K(x: np.ndarray) -> np.ndarray:
    """float32 values (a multiple of 256) -> block_q6_K bytes (210 a block)."""
    out = []
    for b in np.asarray(x, np.float32).reshape(-1, QK_K):
        L = [0] * QK_K
        scales = [F32(0)] * 16
        max_scale = F32(0)
        max_abs_scale = F32(0)
        for ib in range(QK_K // 16):
            scales[ib], L[16 * ib:16 * ib + 16] = make_qx_quants(16, 32, list(b[16 * ib:16 * ib + 16]))
            abs_scale = F32(abs(scales[ib]))
            if abs_scale > max_abs_scale:
                max_abs_scale = abs_scale
                max_scale = scales[ib]
        if max_abs_scale < GROUP_MAX_EPS:
            out.append([0] * 210)
            continue
        iscale = F32(-128) / max_scale
        d_bits = fp16_bits(F32(1) / iscale)
        sc = [int(np.array(min(127, nearest_int(iscale * scales[ib]))).astype(np.int8)) for ib in range(16)]
        for j in range(QK_K // 16):
            d = fp16_value(d_bits) * F32(sc[j])
            if not d:
                continue
            for ii in range(16):
                L[16 * j + ii] = max(-32, min(31, nearest_int(b[16 * j + ii] / d))) + 32
        ql, qh = [0] * 128, [0] * 64
        for h, j in enumerate(range(0, QK_K, 128)):
            for l in range(32):
                q1, q2 = L[j + l] & 0xF, L[j + l + 32] & 0xF
                q3, q4 = L[j + l + 64] & 0xF, L[j + l + 96] & 0xF
                ql[64 * h + l] = q1 | (q3 << 4)
                ql[64 * h + l + 32] = q2 | (q4 << 4)
                qh[32 * h + l] = ((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4)
                                  | ((L[j + l + 96] >> 4) << 6))
        out.append([*ql, *qh, *(s & 0xFF for s in sc), d_bits & 0xFF, d_bits >> 8])
    return np.array(out, np.uint8)
