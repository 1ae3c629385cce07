"""quants/compiled.py: which kernels a job needs, whether numba's cache holds them, compiling
ahead. Cache state is tested in fresh processes with NUMBA_CACHE_DIR on an empty directory, so
what a first run on a new machine does is what runs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as T

from dflash_gguf.quants import compiled
from dflash_gguf.quants.base import registered

pytest.importorskip("numba", reason="numba is not installed: nothing is compiled")

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "runtime" / "drafter.gguf"


def test_every_kernel_once_and_only_kernel_types():
    ks = compiled.kernels_for(None)
    assert ks[0].name == compiled.BF16_DECODE
    names = [k.name for k in ks[1:]]
    want = {c.numba_kernel for c in registered().values() if c.numba_kernel}
    assert sorted(names) == sorted(want) and len(names) == len(set(names))
    served = {q for k in ks for q in k.qtypes}
    assert served == {qt.name for qt, c in registered().items() if c.numba_kernel}


def test_kernels_for_a_plan():
    ks = compiled.kernels_for({T.Q4_K, T.Q6_K, T.F32}, bf16_input=False)
    assert [(k.name, k.qtypes, k.block_size) for k in ks] == [("q4_k", ("Q4_K",), 256), ("q6_k", ("Q6_K",), 256)]
    assert compiled.kernels_for({T.F16}, bf16_input=False) == []


def test_numba_off_means_nothing_pending(monkeypatch):
    from dflash_gguf.quants import _numba

    prev = _numba.set_enabled(False)
    try:
        assert compiled.pending(compiled.kernels_for(None)) == []
        assert compiled.prepare(compiled.kernels_for(None)) == []
    finally:
        _numba.set_enabled(prev)


def _run(args: list[str], cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), DFLASH_GGUF_NUMBA="1")
    return subprocess.run([sys.executable, "-m", "dflash_gguf", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_first_quantize_says_it_compiles_then_never_again(tmp_path):
    cache = tmp_path / "numba-cache"
    out = tmp_path / "q.gguf"
    first = _run(["quantize", str(FIXTURE), str(out), "q8_0"], cache)
    assert first.returncode == 0, first.stderr
    line = next(ln for ln in first.stderr.splitlines() if ln.startswith("compiling numba kernels"))
    assert "Q8_0" in line and "BF16 input" in line and str(cache) in line
    assert "compiled in" in first.stderr
    assert any(cache.rglob("*.nbi")), "the build went to NUMBA_CACHE_DIR"
    again = _run(["quantize", str(FIXTURE), str(out), "q8_0", "--force"], cache)
    assert again.returncode == 0 and "compiling" not in again.stderr, again.stderr
