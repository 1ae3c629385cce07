"""quantize_row_q3_K_ref and quantize_row_q2_K_ref, compiled (the numpy mirrors are
quants/q3_k.py and quants/q2_k.py). Both fit sixteen 16-value sub-blocks per super-block, in
lockstep across _LANES sub-blocks (see common.LANES).

Q3_K: make_q3_quants(16, 4, x, L, do_rmse=true) is a first pass at iscale = -4/max, then up to
five coordinate-search sweeps, each position taking the level that is best given the others.
A lane's sweep depends only on its own state, and a sweep that changes nothing leaves that
state as it found it, so every later sweep would change nothing either: the lanes sweep
together until a sweep changes no lane (or five ran), which is each lane's own C loop.

Q2_K: make_qkx2_quants(16, 3, x, |x|, ..., use_mad=true) is q4_k.qkx2_lanes' fit, built here
for 16-value sub-blocks. numba keys a cached kernel on its own file's content only: after
editing that fit (or common.py), delete __pycache__/k_low*.nb[ci] (touching is not enough).

Then, per group: each super-block's scales, scalar (_q3_scales, _q2_scales); the requantized
levels of all lanes in one vector pass (_q3_levels, _q2_levels), as floats in the lane buffer,
where LLVM sees regions that cannot overlap; those moved super-block-major in 8x8 tiles, and
packed into bytes vectorised over each super-block's positions (_q3_pack, _q2_pack). Per
super-block in int arrays, the same steps ran scalar (16-value loops unrolled, not vectorised).
"""
from __future__ import annotations

import numpy as np

from .common import (
    F32,
    F32_01,
    LANES,
    NEAREST_INT_LIMIT,
    ONE,
    ZERO,
    f32_bits,
    fp16_to_fp32,
    fp32_to_fp16,
    jit,
    lane_buffer,
    lane_layout,
    nearest_int,
    round_clamp,
    to_lanes,
    transpose8,
)
from .q4_k import qkx2_lanes

_F32_M4 = F32(-4.0)
_F32_M05 = F32(-0.5)
_F32_3 = F32(3.0)
_F32_4 = F32(4.0)
_F32_15 = F32(15.0)
_F32_16 = F32(16.0)
_F32_32 = F32(32.0)
_F32_M32 = F32(-32.0)
_F32_64 = F32(64.0)
_BITS = np.array([2.0**k for k in range(8)], np.float32)  # hmask's bit k, as a float
_MAGIC = F32(12582912.0)  # nearest_int's 1.5 * 2**23
_GROUP_MAX_EPS = F32(1e-15)

_N = 16
# Two super-blocks a group. The sweeps run until the group's slowest lane is done, so more
# lanes cost more sweeps than their independent chains win back (Q3_K with 64: about 1.05x
# slower, 128: 1.5x); Q2_K's fit ran as fast with 32 as with 64.
_LANES = LANES

# Q3_K's buffer (common.lane_layout): x, w = x*x and w*x (the same in every sweep, so computed
# once), the fit's levels L (-4..3, as floats) and the stored ones (0..7), position-major
# (16 x _LANES); the stored ones again, super-block-major (_LB: each super-block's 256 in
# value order); then rows of one value per lane.
_NV = 10
(_X, _WW, _WX, _LV, _LQ, _LB, _V), _SIZE = lane_layout(_N, _N, _N, _N, _N, _N, _NV, lanes=_LANES)
_SCALE, _AMAX, _ZERO, _MX, _SUMLX, _SUML2, _D, _MODE, _CODE, _CHG = [_V + r * _LANES for r in range(_NV)]
# _MODE (Q2_K's too): how a sub-block's levels are made, set with its super-block's scales
_FAST = ZERO  # requantized, rounded in float (round_clamp)
_KEEP = ONE  # the stored scale reads back as 0: `if (!d) continue;` keeps the fit's levels
_LITERAL = F32(2.0)  # requantized with nearest_int's bit trick (past its float range, or NaN)


@jit
def _level3(v):
    """MAX(-4, MIN(3, nearest_int(v))) as float32, for any v: the sweeps' x*sl2/slx is unbounded
    (slx can be tiny, sl2 inf or NaN), where nearest_int's bit trick wraps and NaN gives 0.
    Truncated to int32 before the conversion, so that LLVM narrows numba's int64 arithmetic
    and converts with a vector instruction (AVX2 has none from int64)."""
    r = F32(np.int32((f32_bits(v + _MAGIC) & 0x7FFFFF) - 0x400000))
    r = _F32_3 if r > _F32_3 else r
    return _F32_M4 if r < _F32_M4 else r


@jit
def _q3_lanes(b):
    """make_q3_quants(16, 4, x, L, do_rmse=true) for the _LANES sub-blocks in the buffer's x
    region. Out: _SCALE the scale, _LV the levels L - 4 (C's L before `L[i] += nmax`), _ZERO
    nonzero where amax < GROUP_MAX_EPS (C returns early: L = 0, scale 0), _AMAX each lane's
    largest |x| (which bounds its requantized levels)."""
    L = _LANES
    for s in range(L):
        b[_AMAX + s] = ZERO
        b[_MX + s] = ZERO
    for i in range(_N):
        for s in range(L):
            o = i * L + s
            xi = b[_X + o]
            ax = abs(xi)
            up = ax > b[_AMAX + s]  # if (ax > amax) { amax = ax; max = x[i]; }
            b[_AMAX + s] = ax if up else b[_AMAX + s]
            b[_MX + s] = xi if up else b[_MX + s]
            w = xi * xi  # float w = x[i]*x[i]
            b[_WW + o] = w
            b[_WX + o] = w * xi  # the w*x[i] of w*x[i]*l
    for s in range(L):
        b[_ZERO + s] = ONE if b[_AMAX + s] < _GROUP_MAX_EPS else ZERO
        b[_SCALE + s] = _F32_M4 / b[_MX + s]  # float iscale = -nmax / max (the row is free until the end)
        b[_SUMLX + s] = ZERO
        b[_SUML2 + s] = ZERO
    # l = MAX(-4, MIN(3, nearest_int(iscale*x[i]))); |iscale*x[i]| <= 4(1 + 2^-23) in live lanes,
    # so rint's level is nearest_int's (a -0 level adds +-0 to sums that are never -0: no
    # difference); sumlx += w*x[i]*l; suml2 += w*l*l
    for i in range(_N):
        for s in range(L):
            o = i * L + s
            lf = round_clamp(b[_SCALE + s] * b[_X + o], _F32_M4, _F32_3)
            b[_LV + o] = lf
            b[_SUMLX + s] += b[_WX + o] * lf
            b[_SUML2 + s] += (b[_WW + o] * lf) * lf
    for _ in range(5):
        for s in range(L):
            b[_CHG + s] = ZERO
        for i in range(_N):
            for s in range(L):
                o = i * L + s
                li = b[_LV + o]
                w = b[_WW + o]
                wx = b[_WX + o]
                sumlx = b[_SUMLX + s]
                suml2 = b[_SUML2 + s]
                slx0 = sumlx - wx * li  # float slx = sumlx - w*x[i]*L[i]
                sl2 = suml2 - (w * li) * li  # sl2 = suml2 - w*L[i]*L[i] (C computes it for slx > 0 only)
                nl = _level3((b[_X + o] * sl2) / slx0)  # new_l = nearest_int(x[i]*sl2/slx)
                slx = slx0 + wx * nl  # slx += w*x[i]*new_l
                sl2 = sl2 + (w * nl) * nl  # sl2 += w*new_l*new_l
                # if (slx > 0) { ... if (new_l != L[i]) { ... if (sl2 > 0 && slx*slx*suml2 >
                # sumlx*sumlx*sl2) accept } }, as one select per lane
                acc = (slx0 > 0) & (nl != li) & (sl2 > 0) & ((slx * slx) * suml2 > (sumlx * sumlx) * sl2)
                acc &= b[_ZERO + s] == 0
                b[_LV + o] = nl if acc else li
                b[_SUMLX + s] = slx if acc else sumlx
                b[_SUML2 + s] = sl2 if acc else suml2
                # a flag per lane: an integer count across lanes would be an int64 reduction,
                # which made LLVM vectorise the whole sweep at half width
                b[_CHG + s] = ONE if acc else b[_CHG + s]
        changed = False
        for s in range(L):
            changed |= b[_CHG + s] != 0
        if not changed:  # every lane's loop has ended (`if (!n_changed) break;`)
            break
    for s in range(L):
        sl2 = b[_SUML2 + s]
        sc = b[_SUMLX + s] / sl2 if sl2 > 0 else ZERO  # suml2 > 0.0f ? sumlx / suml2 : 0.0f
        b[_SCALE + s] = ZERO if b[_ZERO + s] != 0 else sc


@jit
def _q3_scales(b, s0, y):
    """quantize_row_q3_K_ref's super-block scale for the sixteen sub-blocks fitted in lanes
    s0..s0+15: the scale bytes and d into y (110,); per lane, the d its levels are
    requantized with into _D and how into _MODE."""
    scale = b[_SCALE + s0:_SCALE + s0 + 16]  # views: indices known not to be negative
    code = b[_CODE + s0:_CODE + s0 + 16]
    max_scale = ZERO
    amax = ZERO
    for j in range(16):  # the first scale of largest magnitude (strict >, from 0; skips NaN)
        if abs(scale[j]) > amax:
            amax = abs(scale[j])
            max_scale = scale[j]
    d16 = 0  # GGML_FP32_TO_FP16(0.f), and the scales stay memset 0
    for j in range(16):
        code[j] = ZERO
    if max_scale != 0:
        iscale = _F32_M32 / max_scale
        for j in range(16):
            l = ((nearest_int(iscale * scale[j]) + 128) & 0xFF) - 128  # int -> int8_t wraps
            code[j] = F32(max(-32, min(31, l)) + 32)
        d16 = fp32_to_fp16(ONE / iscale)  # GGML_FP32_TO_FP16(1/iscale): the reciprocal, literally
    # scales[j] = lo4(l[j]) | lo4(l[j + 8]) << 4 (j < 8); scales[8 + k] |= hi2(l[4q + k]) << 2q
    for j in range(8):
        y[96 + j] = (np.int32(code[j]) & 0xF) | ((np.int32(code[j + 8]) & 0xF) << 4)
    for k in range(4):
        y[104 + k] = ((np.int32(code[k]) >> 4) | ((np.int32(code[4 + k]) >> 4) << 2)
                      | ((np.int32(code[8 + k]) >> 4) << 4) | ((np.int32(code[12 + k]) >> 4) << 6))
    y[108] = d16 & 0xFF
    y[109] = d16 >> 8
    d_read = fp16_to_fp32(d16)
    dd = b[_D + s0:_D + s0 + 16]
    mode = b[_MODE + s0:_MODE + s0 + 16]
    amaxs = b[_AMAX + s0:_AMAX + s0 + 16]
    for j in range(16):
        d = d_read * (code[j] - _F32_32)  # GGML_FP16_TO_FP32(d) * sc, sc = the code - 32
        dd[j] = d
        # nearest_int(x[i]/d), a true division: |x[i]/d| <= amax/|d| (rounding is monotonic),
        # within NEAREST_INT_LIMIT always, but where d is tiny or NaN (an fp16 inf * 0)
        fast = amaxs[j] / abs(d) <= NEAREST_INT_LIMIT
        mode[j] = _KEEP if d == 0 else (_FAST if fast else _LITERAL)


@jit
def _q3_levels(b, lanes):
    """The stored levels (0..7) of the first ``lanes`` lanes into _LQ, as floats: the
    requantized MAX(-4, MIN(3, nearest_int(x[i]/d))) + 4, or make_q3_quants' own L (0 where it
    returned early). One vector pass over the lanes, then the rare literal lanes one by one;
    then _LB, super-block-major, in 8x8 tiles."""
    L = _LANES
    for i in range(_N):
        for s in range(L):
            o = i * L + s
            lq = round_clamp(b[_X + o] / b[_D + s], _F32_M4, _F32_3) + _F32_4
            keep = ZERO if b[_ZERO + s] != 0 else b[_LV + o] + _F32_4
            b[_LQ + o] = lq if b[_MODE + s] == _FAST else keep
    for s in range(lanes):
        if b[_MODE + s] == _LITERAL:
            d = b[_D + s]
            for i in range(_N):
                b[_LQ + i * L + s] = F32(max(-4, min(3, nearest_int(b[_X + i * L + s] / d))) + 4)
    for i0 in range(0, _N, 8):  # _LB[16s + i] = _LQ[i, s]
        for s0 in range(0, L, 8):
            transpose8(b, _LQ + i0 * L + s0, L, b, _LB + s0 * _N + i0, _N)


@jit
def _lo2(v):
    """The low two bits of a level 0..7 held as a float (C's L -= 4 where L > 3)."""
    return v - (_F32_4 if v >= _F32_4 else ZERO)


@jit
def _q3_pack(b, sb, y):
    """hmask and qs of super-block ``sb`` of the group from _LB into y: hmask[m] bit k is
    L[32k + m] > 3 (then L -= 4); qs[32h + l] holds the 2-bit L of values 128h + l + 32k at
    bit 2k. In float (exact), vectorised over m and l: on a view, whose indices numba knows are
    not negative (on b at a run-time offset, it checked each one and LLVM gathered them)."""
    lb = b[_LB + 256 * sb:_LB + 256 * sb + 256]
    for m in range(32):
        h = ZERO
        for k in range(8):
            h += _BITS[k] if lb[32 * k + m] >= _F32_4 else ZERO
        y[m] = np.int32(h)
    for hh in range(2):
        for l in range(32):
            j = 128 * hh + l
            q = ((_lo2(lb[j]) + _F32_4 * _lo2(lb[j + 32])) + _F32_16 * _lo2(lb[j + 64])) + _F32_64 * _lo2(lb[j + 96])
            y[32 + 32 * hh + l] = np.int32(q)


@jit
def q3_k(blocks):
    """quantize_row_q3_K_ref: (nb, 256) float32 C-contiguous -> (nb, 110) uint8."""
    nb = blocks.shape[0]
    out = np.empty((nb, 110), np.uint8)
    buf = lane_buffer(_SIZE)
    x = buf[_X:_X + _N * _LANES].reshape((_N, _LANES))
    per = _LANES // 16
    for b0 in range(0, nb, per):
        to_lanes(blocks, b0, _N, x)
        _q3_lanes(buf)
        n = min(per, nb - b0)
        for b in range(n):
            _q3_scales(buf, 16 * b, out[b0 + b])
        _q3_levels(buf, 16 * n)
        for b in range(n):
            _q3_pack(buf, b, out[b0 + b])
    return out


# Q2_K's fit: make_qkx2_quants on 16-value sub-blocks with the absolute error (use_mad).
_FIT = qkx2_lanes(_N, _LANES, True)
_fit2 = _FIT.fit
_X2, _W2, _V2, _SIZE2 = _FIT.x, _FIT.w, _FIT.v, _FIT.size
_MX2 = _V2 + _FIT.mx_row * _LANES
_XLO2 = _V2 + _FIT.xlo_row * _LANES
# value rows 0-4 of the fit: scale, the_min, and the iscale, min, flat that regenerate its L
_SC2, _TM2, _LISC2, _LMIN2, _FLAT2 = [_V2 + r * _LANES for r in range(5)]
# Once fitted, the weights' rows hold each lane's d, dm and _MODE, the fit's Laux region the
# stored levels position-major, and once those are made, x's region them super-block-major.
_D2, _DM2, _MODE2 = [_W2 + r * _LANES for r in range(3)]
_LQ2 = _FIT.lv
_LB2 = _X2


@jit
def _q2_scales(b, s0, y):
    """quantize_row_q2_K_ref's scales and mins for the sixteen sub-blocks fitted in lanes
    s0..s0+15: the scale bytes, d and dmin into y (84,); per lane, the d and dm its levels are
    requantized with into _D2, _DM2 and how into _MODE2."""
    scale = b[_SC2 + s0:_SC2 + s0 + 16]  # views, as in _q3_scales
    mins = b[_TM2 + s0:_TM2 + s0 + 16]
    max_scale = ZERO  # `if (scale > max_scale) max_scale = scale` from 0 (skips NaN)
    max_min = ZERO
    for j in range(16):
        if scale[j] > max_scale:
            max_scale = scale[j]
        if mins[j] > max_min:
            max_min = mins[j]
    d16 = 0  # GGML_FP32_TO_FP16(0.f)
    dmin16 = 0
    for j in range(16):
        y[j] = 0
    if max_scale > 0:
        iscale = _F32_15 / max_scale
        for j in range(16):
            y[j] = nearest_int(iscale * scale[j]) & 0xFF  # y[i].scales[j] = l (a uint8_t)
        d16 = fp32_to_fp16(max_scale / _F32_15)
    if max_min > 0:
        iscale = _F32_15 / max_min
        for j in range(16):
            y[j] |= (nearest_int(iscale * mins[j]) << 4) & 0xFF  # |= (l << 4), truncated
        dmin16 = fp32_to_fp16(max_min / _F32_15)
    y[80] = d16 & 0xFF
    y[81] = d16 >> 8
    y[82] = dmin16 & 0xFF
    y[83] = dmin16 >> 8
    d_read = fp16_to_fp32(d16)
    dmin_read = fp16_to_fp32(dmin16)
    dd = b[_D2 + s0:_D2 + s0 + 16]
    dms = b[_DM2 + s0:_DM2 + s0 + 16]
    mode = b[_MODE2 + s0:_MODE2 + s0 + 16]
    xlo = b[_XLO2 + s0:_XLO2 + s0 + 16]
    xhi = b[_MX2 + s0:_MX2 + s0 + 16]
    for j in range(16):
        d = d_read * F32(np.int32(y[j] & 0xF))  # GGML_FP16_TO_FP32(d) * (scales[j] & 0xF)
        dm = dmin_read * F32(np.int32(y[j] >> 4))
        dd[j] = d
        dms[j] = dm
        # nearest_int((x + dm)/d), an add then a true division; d > 0 (or NaN), so it is
        # monotonic in x and the sub-block's smallest and largest x bound it (as in q4_k.py)
        lo = (xlo[j] + dm) / d
        hi = (xhi[j] + dm) / d
        fast = (abs(lo) <= NEAREST_INT_LIMIT) & (abs(hi) <= NEAREST_INT_LIMIT)
        mode[j] = _KEEP if d == 0 else (_FAST if fast else _LITERAL)


@jit
def _q2_levels(b, lanes):
    """The stored levels (0..3) of the first ``lanes`` lanes into _LQ2, as floats: the
    requantized MAX(0, MIN(3, nearest_int((x[i] + dm)/d))), in one vector pass, then lane by
    lane where that needs nearest_int's bit trick or where `if (!d) continue;` keeps
    make_qkx2_quants' own L (0 where it returned early); then _LB2, super-block-major."""
    L = _LANES
    for i in range(_N):
        for s in range(L):
            o = i * L + s
            b[_LQ2 + o] = round_clamp((b[_X2 + o] + b[_DM2 + s]) / b[_D2 + s], ZERO, _F32_3)
    for s in range(lanes):
        if b[_MODE2 + s] == _KEEP:
            flat = b[_FLAT2 + s] != 0
            isc = b[_LISC2 + s]
            mn = b[_LMIN2 + s]
            for i in range(_N):
                lf = F32(max(0, min(3, nearest_int(isc * (b[_X2 + i * L + s] - mn)))))
                b[_LQ2 + i * L + s] = ZERO if flat else lf
        elif b[_MODE2 + s] == _LITERAL:
            d = b[_D2 + s]
            dm = b[_DM2 + s]
            for i in range(_N):
                b[_LQ2 + i * L + s] = F32(max(0, min(3, nearest_int((b[_X2 + i * L + s] + dm) / d))))
    for i0 in range(0, _N, 8):  # _LB2[16s + i] = _LQ2[i, s]
        for s0 in range(0, L, 8):
            transpose8(b, _LQ2 + i0 * L + s0, L, b, _LB2 + s0 * _N + i0, _N)


@jit
def _q2_pack(b, sb, y):
    """qs of super-block ``sb`` of the group from _LB2 into y: qs[32h + l] holds L of values
    128h + l + 32k at bit 2k. In float (exact), vectorised over l (on a view, as _q3_pack)."""
    lb = b[_LB2 + 256 * sb:_LB2 + 256 * sb + 256]
    for hh in range(2):
        for l in range(32):
            j = 128 * hh + l
            q = ((lb[j] + _F32_4 * lb[j + 32]) + _F32_16 * lb[j + 64]) + _F32_64 * lb[j + 96]
            y[16 + 32 * hh + l] = np.int32(q)


@jit
def q2_k(blocks):
    """quantize_row_q2_K_ref: (nb, 256) float32 C-contiguous -> (nb, 84) uint8."""
    nb = blocks.shape[0]
    out = np.empty((nb, 84), np.uint8)
    buf = lane_buffer(_SIZE2)
    x = buf[_X2:_X2 + _N * _LANES].reshape((_N, _LANES))
    per = _LANES // 16
    for b0 in range(0, nb, per):
        to_lanes(blocks, b0, _N, x)
        for k in range(_N * _LANES):  # weights[l] = fabsf(x[l])
            buf[_W2 + k] = abs(buf[_X2 + k])
        _fit2(buf, 3, _F32_M05, F32_01, 15)
        n = min(per, nb - b0)
        for b in range(n):
            _q2_scales(buf, 16 * b, out[b0 + b])
        _q2_levels(buf, 16 * n)
        for b in range(n):
            _q2_pack(buf, b, out[b0 + b])
    return out
