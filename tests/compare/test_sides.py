"""Reading the sides: our dequantizers agree with gguf-py bit for bit."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from dflash_gguf.compare import sides


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.Q5_0])
def test_dequantizers_match_gguf_py_bit_for_bit(qtype):
    from dflash_gguf.quants import quantize

    x = (np.random.default_rng(3).standard_normal((8, 256)) * 0.05).astype(np.float32)
    raw = quantize(x, qtype).reshape(-1)
    ours = sides.dequantize_rows(raw, qtype, 8, 256)
    ref = np.asarray(gguf.dequantize(raw.reshape(8, -1), qtype), dtype=np.float32).reshape(8, 256)
    assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32))
