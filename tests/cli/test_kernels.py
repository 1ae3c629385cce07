"""cli/kernels.py: `dflash-gguf kernels` compiles ahead of a job, into NUMBA_CACHE_DIR, in fresh
processes (a new machine's first run is what is tested)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.quants.test_compiled import FIXTURE, ROOT, _run

pytest.importorskip("numba", reason="numba is not installed: nothing is compiled")


def test_kernels_command_compiles_ahead(tmp_path):
    cache = tmp_path / "numba-cache"
    r = _run(["kernels", "q8_0", "--json"], cache)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["cache_dir"].startswith(str(cache))
    assert [(k["kernel"], k["was_cached"]) for k in doc["kernels"]] == [("bf16_to_f32", False), ("q8_0", False)]
    again = json.loads(_run(["kernels", "q8_0", "--json"], cache).stdout)
    assert [k["was_cached"] for k in again["kernels"]] == [True, True]
    q = _run(["quantize", str(FIXTURE), str(tmp_path / "q.gguf"), "q8_0"], cache)
    assert q.returncode == 0 and "compiling" not in q.stderr, q.stderr


def test_kernels_command_refusals(tmp_path):
    r = _run(["kernels", "q4_k_m"], tmp_path)
    assert r.returncode == 2 and "name ggml types" in r.stderr and "Traceback" not in r.stderr
    env_off = dict(os.environ, DFLASH_GGUF_NUMBA="0")
    r = subprocess.run([sys.executable, "-m", "dflash_gguf", "kernels"], env=env_off, cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "DFLASH_GGUF_NUMBA=0" in r.stderr


def test_convert_to_a_quant_type_says_it_compiles(tmp_path):
    cache = tmp_path / "numba-cache"
    drafter, target = ROOT / "fixtures" / "runtime" / "drafter", ROOT / "fixtures" / "runtime" / "target.gguf"
    args = ["convert", str(drafter), "--target-gguf", str(target), "-t", "q8_0", "-o", str(tmp_path / "d.gguf")]
    first = _run(args, cache)
    assert first.returncode == 0, first.stderr
    assert "compiling numba kernels for Q8_0:" in first.stderr  # no BF16 decoder: safetensors decodes
    again = _run(args + ["--force"], cache)
    assert again.returncode == 0 and "compiling" not in again.stderr, again.stderr
