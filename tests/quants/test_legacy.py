"""quants/legacy.py: Q4_0, Q5_0, Q4_1, Q5_1 against gguf-py's quantizers (exact for these types)
and blocks worked out by hand from quantize_row_q4_0_ref / q4_1 / q5_0 / q5_1."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import quants as gguf_quants

from dflash_gguf.quants.legacy import Q4_0, Q4_1, Q5_0, Q5_1

F32 = np.float32
CLASSES = {"Q4_0": Q4_0, "Q5_0": Q5_0, "Q4_1": Q4_1, "Q5_1": Q5_1}


def _fresh_blocks(rng: np.random.Generator) -> np.ndarray:
    """(n, 32) blocks: scales from 1e-9 to 1e4, bf16-rounded, constant, zero, one-signed, tied extremes."""
    x = (rng.standard_normal((600, 32)) * np.exp(rng.uniform(-20, 9, (600, 1)))).astype(np.float32)
    x[::6] = (x[::6].view(np.uint32) & 0xFFFF0000).view(np.float32)
    x[1::6] = np.abs(x[1::6])
    x[2::6] = -np.abs(x[2::6])
    x[3::12] = 0.25
    x[4::12] = 0
    x[5::12, :2] = [3, -3]  # +-max tie: the first one is the signed max
    x[11::12, :2] = [-3, 3]
    x[5::12, 2:] = x[11::12, 2:] = np.clip(x[5::12, 2:], -2, 2)
    return x


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_matches_gguf_py_on_fresh_blocks(name):
    x = _fresh_blocks(np.random.default_rng(sum(map(ord, name))))
    with np.errstate(all="ignore"):
        got = CLASSES[name].quantize_blocks(x)
        want = gguf_quants.quantize(x, T[name])
    assert got.shape == (x.shape[0], CLASSES[name].type_size)
    assert np.array_equal(got, want.reshape(got.shape))


def test_q4_0_block_by_hand():
    # amax 8 at x[0] = -8: d = -8 / -8 = 1, id = 1; q = MIN(15, (int8_t)(x + 8.5))
    x = np.zeros((1, 32), np.float32)
    x[0, 0], x[0, 1], x[0, 16], x[0, 17], x[0, 31] = -8, 7, 3.4, -0.6, 2.5
    q = [min(15, int(v + 8.5)) for v in x[0]]  # 0, 15, 8..., 11, 7, ..., 11
    want = [0x00, 0x3C] + [q[j] | (q[j + 16] << 4) for j in range(16)]  # fp16(1.0) = 0x3c00
    assert Q4_0.quantize_blocks(x).tolist() == [want]
    assert want[2:4] == [0 | (11 << 4), 15 | (7 << 4)]


def test_q5_0_high_bits_go_to_qh_in_order():
    # amax 16 at x[0] = -16: d = 1; q = x + 16.5 truncated, MIN(31): bit 4 of q[j] is bit j of qh
    x = np.arange(-16, 16, dtype=np.float32).reshape(1, 32)
    q = [min(31, int(v + 16.5)) for v in x[0]]  # 0..31
    qh = sum(((v >> 4) & 1) << j for j, v in enumerate(q))
    assert qh == 0xFFFF0000
    want = [0x00, 0x3C, *qh.to_bytes(4, "little"), *[(q[j] & 15) | ((q[j + 16] & 15) << 4) for j in range(16)]]
    assert Q5_0.quantize_blocks(x).tolist() == [want]


def test_q4_1_min_keeps_the_sign_of_the_first_zero_extreme():
    # `if (v < min) min = v;` from FLT_MAX: with min 0, the first zero reached decides its sign
    x = np.zeros((2, 32), np.float32)
    x[0, :3] = [1.0, -0.0, 0.0]  # min -0.0 (fp16 0x8000)
    x[1, :3] = [1.0, 0.0, -0.0]  # min +0.0
    out = Q4_1.quantize_blocks(x)
    assert out[:, 2:4].tolist() == [[0x00, 0x80], [0x00, 0x00]]
    # d = (1 - 0)/15 -> fp16 0x2c44 (1/15 = 0x3d888889: exponent 12, mantissa 0x088889 >> 13 = 0x44, rest 0x889 < half)
    assert out[:, :2].tolist() == [[0x44, 0x2C]] * 2


def test_q5_1_has_no_clamp():
    # (uint8_t)(x*id + 0.5) with no MIN: the max maps to 31.5 -> 31, the min to 0
    x = np.linspace(-1, 2, 32, dtype=np.float32).reshape(1, 32)
    out = Q5_1.quantize_blocks(x)
    d = F32(3) / F32(31)
    id_ = F32(1) / d
    q = [int(F32(F32(v - F32(-1)) * id_ + F32(0.5))) for v in x[0]]
    assert q[0] == 0 and q[-1] == 31
    qh = sum(((v >> 4) & 1) << j for j, v in enumerate(q))
    assert out[0, 4:8].tolist() == list(qh.to_bytes(4, "little"))
    assert out[0, 8:].tolist() == [(q[j] & 15) | ((q[j + 16] & 15) << 4) for j in range(16)]
