"""quants/_numba/q4_k.py: the compiled Q4_K / Q5_K against the scalar port of ggml-quants.c
(tests/quants/c_ports.py) and against the numpy path, across the kernel's lane groups."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba", reason="numba is not installed: the numpy path runs instead")

from dflash_gguf.quants import _numba  # noqa: E402
from dflash_gguf.quants._numba.q4_k import q4_k, q5_k  # noqa: E402

from .. import c_ports  # noqa: E402
from ..test_q4_k import _fresh_blocks  # noqa: E402
from .fresh import backends_agree  # noqa: E402


@pytest.mark.parametrize("qtype", ["q4_K", "q5_K"])
def test_backends_agree_on_fresh_data(qtype):
    backends_agree(qtype)


@pytest.mark.parametrize("kernel,port", [(q4_k, c_ports.quantize_row_q4_K), (q5_k, c_ports.quantize_row_q5_K)],
                         ids=["q4_k", "q5_k"])
def test_kernel_matches_the_c_port(kernel, port):
    # six blocks: one whole group of four super-blocks (the 8x8 tiles), then a partial one
    x = _fresh_blocks(np.random.default_rng(44))
    got = _numba.run(kernel, x)
    want = port(x)
    bad = np.flatnonzero((got != want).any(axis=1))
    assert bad.size == 0, f"blocks {bad.tolist()} differ from the C port"
