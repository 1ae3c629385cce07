"""quants/_numba/q6_k.py: the compiled Q6_K against the scalar port of ggml-quants.c
(tests/quants/c_ports.py) and against the numpy path."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: the numpy path runs instead")

from dflash_gguf.quants import _numba  # noqa: E402
from dflash_gguf.quants._numba.q6_k import q6_k  # noqa: E402

from .. import c_ports  # noqa: E402
from ..test_q6_k import _fresh_blocks  # noqa: E402
from .fresh import backends_agree  # noqa: E402


@pytest.mark.parametrize("qtype", ["q6_K"])
def test_backends_agree_on_fresh_data(qtype):
    backends_agree(qtype)


def test_kernel_matches_the_c_port():
    # six blocks: a whole group of four (64 lanes of 16) and a partial one, a zero block among them
    x = _fresh_blocks(np.random.default_rng(46))
    got = _numba.run(q6_k, x)
    want = c_ports.quantize_row_q6_K(x)
    bad = np.flatnonzero((got != want).any(axis=1))
    assert bad.size == 0, f"blocks {bad.tolist()} differ from the C port"
    assert not got[2].any()
