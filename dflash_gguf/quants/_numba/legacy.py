"""quantize_row_q4_0_ref, q5_0, q4_1 and q5_1, compiled (the numpy mirror is quants/legacy.py).

Each block's scan for its scale (the signed value of largest magnitude, or the min and max)
is a chain of dependent compares in C; here LANES blocks are scanned in lockstep (see
common.LANES), which gives C's result exactly, first-occurrence ties and the sign of a zero
extreme included. The levels are then computed block by block, 16 positions at a time.

C's float -> integer casts, ``(int8_t)(x0 + 8.5f)`` and ``(uint8_t)(x0 + 0.5f)``, are spelled
out as x86-64 executes them (quants/base.py trunc_to_int8_bits): truncate to int32, INT32_MIN
(low byte 0) when out of range or NaN, keep the low byte. That is reachable: where d is below
2^-128 its reciprocal overflows, and ``x*id`` is +-inf, or 0*inf = NaN (level 0 either way).
"""
from __future__ import annotations

import numpy as np

from .common import (
    F32,
    LANES,
    ONE,
    ZERO,
    fp32_to_fp16,
    jit,
    lane_buffer,
    lane_layout,
    to_lanes,
)

_F32_M8 = F32(-8.0)
_F32_M16 = F32(-16.0)
_F32_15 = F32(15.0)
_F32_31 = F32(31.0)
_F32_8_5 = F32(8.5)
_F32_16_5 = F32(16.5)
_F32_HALF = F32(0.5)
_FLT_MAX = F32(np.finfo(np.float32).max)
_INT32_LIMIT = F32(2147483648.0)

# The scan's buffer (common.lane_layout): the blocks position-major (32 x LANES), and two rows
# of one value per lane: (amax, max) for Q4_0/Q5_0, (min, max) for Q4_1/Q5_1.
_N = 32
(_X, _A, _B), _SIZE = lane_layout(_N, 1, 1)


@jit
def _low_byte(v):
    """C's (int8_t)v / (uint8_t)v on x86-64 as bits 0..255: cvttss2si, then the low byte."""
    t = v if abs(v) < _INT32_LIMIT else ZERO  # False for NaN: INT32_MIN, whose low byte is 0
    return np.int32(t) & 0xFF


@jit
def _min_int8(hi, v):
    """MIN(hi, (int8_t)v) stored in a uint8_t, as bits 0..255."""
    b = _low_byte(v)
    s = b - ((b & 0x80) << 1)  # the byte as int8_t
    return (s if s < hi else hi) & 0xFF


@jit
def _signed_absmax_lanes(b):
    """`if (amax < fabsf(v)) { amax = fabsf(v); max = v; }` from amax = max = 0 over each lane's
    32 values: amax into row _A, max into row _B."""
    for s in range(LANES):
        b[_A + s] = ZERO
        b[_B + s] = ZERO
    for i in range(_N):
        for s in range(LANES):
            v = b[_X + i * LANES + s]
            a = abs(v)
            take = b[_A + s] < a
            b[_A + s] = a if take else b[_A + s]
            b[_B + s] = v if take else b[_B + s]


@jit
def _min_max_lanes(b):
    """`if (v < min) min = v; if (v > max) max = v;` from min = FLT_MAX, max = -FLT_MAX over each
    lane's 32 values: min into row _A, max into row _B."""
    for s in range(LANES):
        b[_A + s] = _FLT_MAX
        b[_B + s] = -_FLT_MAX
    for i in range(_N):
        for s in range(LANES):
            v = b[_X + i * LANES + s]
            b[_A + s] = v if v < b[_A + s] else b[_A + s]
            b[_B + s] = v if v > b[_B + s] else b[_B + s]


@jit
def _put16(y, at, h):
    y[at] = h & 0xFF
    y[at + 1] = h >> 8


@jit
def _put32(y, at, v):
    for k in range(4):  # memcpy(&y[i].qh, &qh, 4): little-endian
        y[at + k] = (v >> (8 * k)) & 0xFF


@jit
def q4_0(blocks):
    """quantize_row_q4_0_ref: (nb, 32) float32 C-contiguous -> (nb, 18) uint8."""
    nb = blocks.shape[0]
    out = np.empty((nb, 18), np.uint8)
    buf = lane_buffer(_SIZE)
    x = buf[_X:_X + _N * LANES].reshape((_N, LANES))
    for b0 in range(0, nb, LANES):
        to_lanes(blocks, b0, _N, x)
        _signed_absmax_lanes(buf)
        for s in range(min(LANES, nb - b0)):
            xb = blocks[b0 + s]
            y = out[b0 + s]
            d = buf[_B + s] / _F32_M8  # d = max / -8
            inv = ONE / d if d != 0 else ZERO  # id = d ? 1.0f/d : 0.0f
            _put16(y, 0, fp32_to_fp16(d))
            for j in range(16):
                xi0 = _min_int8(15, xb[j] * inv + _F32_8_5)  # MIN(15, (int8_t)(x0 + 8.5f))
                xi1 = _min_int8(15, xb[16 + j] * inv + _F32_8_5)
                y[2 + j] = (xi0 | (xi1 << 4)) & 0xFF  # qs[j] = xi0; qs[j] |= xi1 << 4 (xi0 unmasked)
    return out


@jit
def q5_0(blocks):
    """quantize_row_q5_0_ref: (nb, 32) float32 C-contiguous -> (nb, 22) uint8."""
    nb = blocks.shape[0]
    out = np.empty((nb, 22), np.uint8)
    buf = lane_buffer(_SIZE)
    x = buf[_X:_X + _N * LANES].reshape((_N, LANES))
    for b0 in range(0, nb, LANES):
        to_lanes(blocks, b0, _N, x)
        _signed_absmax_lanes(buf)
        for s in range(min(LANES, nb - b0)):
            xb = blocks[b0 + s]
            y = out[b0 + s]
            d = buf[_B + s] / _F32_M16  # d = max / -16
            inv = ONE / d if d != 0 else ZERO
            _put16(y, 0, fp32_to_fp16(d))
            qh = 0
            for j in range(16):
                xi0 = _min_int8(31, xb[j] * inv + _F32_16_5)  # MIN(31, (int8_t)(x0 + 16.5f))
                xi1 = _min_int8(31, xb[16 + j] * inv + _F32_16_5)
                y[6 + j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4)
                qh |= (((xi0 & 0x10) >> 4) << j) | (((xi1 & 0x10) >> 4) << (j + 16))
            _put32(y, 2, qh)
    return out


@jit
def q4_1(blocks):
    """quantize_row_q4_1_ref: (nb, 32) float32 C-contiguous -> (nb, 20) uint8."""
    nb = blocks.shape[0]
    out = np.empty((nb, 20), np.uint8)
    buf = lane_buffer(_SIZE)
    x = buf[_X:_X + _N * LANES].reshape((_N, LANES))
    for b0 in range(0, nb, LANES):
        to_lanes(blocks, b0, _N, x)
        _min_max_lanes(buf)
        for s in range(min(LANES, nb - b0)):
            xb = blocks[b0 + s]
            y = out[b0 + s]
            mn = buf[_A + s]
            d = (buf[_B + s] - mn) / _F32_15  # d = (max - min) / ((1 << 4) - 1)
            inv = ONE / d if d != 0 else ZERO
            _put16(y, 0, fp32_to_fp16(d))
            _put16(y, 2, fp32_to_fp16(mn))
            for j in range(16):
                xi0 = _min_int8(15, (xb[j] - mn) * inv + _F32_HALF)  # MIN(15, (int8_t)(x0 + 0.5f))
                xi1 = _min_int8(15, (xb[16 + j] - mn) * inv + _F32_HALF)
                y[4 + j] = (xi0 | (xi1 << 4)) & 0xFF
    return out


@jit
def q5_1(blocks):
    """quantize_row_q5_1_ref: (nb, 32) float32 C-contiguous -> (nb, 24) uint8."""
    nb = blocks.shape[0]
    out = np.empty((nb, 24), np.uint8)
    buf = lane_buffer(_SIZE)
    x = buf[_X:_X + _N * LANES].reshape((_N, LANES))
    for b0 in range(0, nb, LANES):
        to_lanes(blocks, b0, _N, x)
        _min_max_lanes(buf)
        for s in range(min(LANES, nb - b0)):
            xb = blocks[b0 + s]
            y = out[b0 + s]
            mn = buf[_A + s]
            d = (buf[_B + s] - mn) / _F32_31  # d = (max - min) / ((1 << 5) - 1)
            inv = ONE / d if d != 0 else ZERO
            _put16(y, 0, fp32_to_fp16(d))
            _put16(y, 2, fp32_to_fp16(mn))
            qh = 0
            for j in range(16):
                xi0 = _low_byte((xb[j] - mn) * inv + _F32_HALF)  # (uint8_t)(x0 + 0.5f): no MIN
                xi1 = _low_byte((xb[16 + j] - mn) * inv + _F32_HALF)
                y[8 + j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4)
                qh |= (((xi0 & 0x10) >> 4) << j) | (((xi1 & 0x10) >> 4) << (j + 16))
            _put32(y, 4, qh)
    return out
