"""quants/_numba/q8_0.py: the compiled quantize_row_q8_0_ref against gguf-py's Q8_0 (byte-exact
with ggml) and against the numpy path."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: the numpy path runs instead")

from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf import quants as gguf_quants  # noqa: E402

from dflash_gguf.quants import _numba  # noqa: E402
from dflash_gguf.quants._numba.q8_0 import q8_0  # noqa: E402

from .fresh import backends_agree  # noqa: E402


@pytest.mark.parametrize("qtype", ["q8_0"])
def test_backends_agree_on_fresh_data(qtype):
    backends_agree(qtype)


def test_kernel_matches_gguf_py():
    rng = np.random.default_rng(80)
    x = (rng.standard_normal((3000, 32)) * np.exp(rng.uniform(-69, 69, (3000, 1)))).astype(np.float32)
    x[::11] = 0
    x[1::11, :4] = [127, 0.5, -0.5, 2.5]  # halves, away from zero
    x[2::11] = np.float32(1e-40)  # an inverse that overflows: zero bytes
    with np.errstate(all="ignore"):
        want = gguf_quants.quantize(x, Q.Q8_0)
    assert np.array_equal(_numba.run(q8_0, x), want)
