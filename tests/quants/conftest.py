"""Shared by the quantizer tests: run a test on the numpy path or the numba kernels; the tiny
models of every drafter family and target shape that the llama-quantize comparisons run on."""
from __future__ import annotations

import pytest

from dflash_gguf.quants import _numba
from tests.quants.test_policy_live import models  # noqa: F401  (a fixture: test_policy_live, test_file_types)


@pytest.fixture
def backend(request):
    """The numpy path or the numba kernels (an indirect param: "numpy" | "numba"), restored after."""
    use_numba = request.param == "numba"
    if use_numba and not _numba.AVAILABLE:
        pytest.skip("numba is not installed")
    prev = _numba.set_enabled(use_numba)
    yield request.param
    _numba.set_enabled(prev)


@pytest.fixture(scope="module")
def golden():
    """The golden bytes of ggml's own C quantizer (../shared/golden), every case and type."""
    import numpy as np

    from tests.quants.test_quants import GOLDEN

    if not GOLDEN.is_file():
        pytest.skip(f"golden file {GOLDEN} not found (it lives in the shared/ checkout next to the repo)")
    with np.load(GOLDEN) as z:
        return {k: z[k] for k in z.files}
