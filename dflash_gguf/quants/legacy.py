"""Legacy 32-value quants: Q4_0, Q5_0 (symmetric) and Q4_1, Q5_1 (with a min).

Mirrors quantize_row_q4_0_ref / q5_0 / q4_1 / q5_1. They multiply by the reciprocal
``id = d ? 1/d : 0`` (unlike the K-quants, which divide) and truncate with a C cast.
Each class names its compiled kernel (``numba_kernel``, quants/_numba/legacy.py: the same
bytes, faster), which runs instead of ``quantize_blocks`` while numba is enabled.
"""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType

from .base import F32, BlockQuant, first_absmax, fp16_bytes, reduce_rows, trunc_to_int8_bits


def _inverse(d: np.ndarray) -> np.ndarray:
    # const float id = d ? 1.0f/d : 0.0f;
    return np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0))


def _signed_absmax(blocks: np.ndarray) -> np.ndarray:
    # `if (amax < fabsf(v)) { amax = fabsf(v); max = v; }` from amax = max = 0: the first value
    # of largest magnitude, and +0 (not a stored -0) when the block is all zeros.
    return first_absmax(blocks, axis=1)[1]


def _first_min_max(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # `if (v < min) min = v; if (v > max) max = v;`: the first extreme wins, which only
    # matters for the sign of a zero extreme (stored as fp16 for min).
    mn = reduce_rows(np.minimum, blocks)
    mx = reduce_rows(np.maximum, blocks)
    for v in (mn, mx):
        z = np.flatnonzero(v == 0)
        if z.size:
            sub = blocks[z]
            v[z] = sub[np.arange(z.size), np.argmax(sub == 0, axis=1)]
    return mn, mx


def _pack_nibbles(q: np.ndarray, *, mask_low: bool = True) -> np.ndarray:
    # qs[j] = q[j] (low nibble) | q[j + 16] << 4; Q4_0/Q4_1 store q[j] unmasked in C.
    low = q[:, :16] & 0x0F if mask_low else q[:, :16]
    return (low | (q[:, 16:] << 4)).astype(np.uint8)


def _pack_qh(q: np.ndarray) -> np.ndarray:
    # uint32 LE: bit j = bit 4 of q[j]
    bits = ((q >> 4) & 1).astype(np.uint32) << np.arange(32, dtype=np.uint32)
    return np.bitwise_or.reduce(bits, axis=1).astype("<u4").view(np.uint8).reshape(-1, 4)


class Q4_0(BlockQuant, qtype=GGMLQuantizationType.Q4_0):
    numba_kernel = "q4_0"

    @classmethod
    def quantize_blocks(cls, blocks: np.ndarray) -> np.ndarray:
        d = _signed_absmax(blocks) / F32(-8)
        v = blocks * _inverse(d)[:, None] + F32(8.5)
        q = np.minimum(trunc_to_int8_bits(v).astype(np.int8), 15).astype(np.uint8)  # MIN(15, (int8_t)v)
        return np.concatenate([fp16_bytes(d), _pack_nibbles(q, mask_low=False)], axis=1)


class Q5_0(BlockQuant, qtype=GGMLQuantizationType.Q5_0):
    numba_kernel = "q5_0"

    @classmethod
    def quantize_blocks(cls, blocks: np.ndarray) -> np.ndarray:
        d = _signed_absmax(blocks) / F32(-16)
        v = blocks * _inverse(d)[:, None] + F32(16.5)
        q = np.minimum(trunc_to_int8_bits(v).astype(np.int8), 31).astype(np.uint8)  # MIN(31, (int8_t)v)
        return np.concatenate([fp16_bytes(d), _pack_qh(q), _pack_nibbles(q)], axis=1)


class Q4_1(BlockQuant, qtype=GGMLQuantizationType.Q4_1):
    numba_kernel = "q4_1"

    @classmethod
    def quantize_blocks(cls, blocks: np.ndarray) -> np.ndarray:
        mn, mx = _first_min_max(blocks)
        d = (mx - mn) / F32(15)
        v = (blocks - mn[:, None]) * _inverse(d)[:, None] + F32(0.5)
        q = np.minimum(trunc_to_int8_bits(v).astype(np.int8), 15).astype(np.uint8)
        return np.concatenate([fp16_bytes(d), fp16_bytes(mn), _pack_nibbles(q, mask_low=False)], axis=1)


class Q5_1(BlockQuant, qtype=GGMLQuantizationType.Q5_1):
    numba_kernel = "q5_1"

    @classmethod
    def quantize_blocks(cls, blocks: np.ndarray) -> np.ndarray:
        mn, mx = _first_min_max(blocks)
        d = (mx - mn) / F32(31)
        v = (blocks - mn[:, None]) * _inverse(d)[:, None] + F32(0.5)
        q = trunc_to_int8_bits(v).astype(np.uint8)  # (uint8_t)v, no MIN in the C
        return np.concatenate([fp16_bytes(d), fp16_bytes(mn), _pack_qh(q), _pack_nibbles(q)], axis=1)
