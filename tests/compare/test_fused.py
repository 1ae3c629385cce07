"""The re-encoding's own values (quants.quantize_finite_with_values) standing in for a
dequantization: y where the GGUF's bytes are ggml's, ye where they differ. The report must be
the one the dequantizing path gives, number for number, with and without damaged tensors."""
from __future__ import annotations

import json

import pytest
from gguf import GGMLQuantizationType as Q

from dflash_gguf import quants
from dflash_gguf.compare import engine, kernels
from dflash_gguf.quants import _numba

from tests.compare.conftest import rewrite
from tests.conftest import DRAFTERS

pytestmark = pytest.mark.skipif(not _numba.AVAILABLE, reason="numba is not installed")

FUSED = (Q.Q4_K, Q.Q6_K)


def _damage(name, typ, shape, data):
    """A few bytes of the ffn_down tensors (blk.0's is Q4_K, blk.1's Q6_K; fc.weight, Q4_K,
    stays intact): a quant byte near the middle, and a scale byte of the first block (Q4_K
    byte 5, Q6_K byte 193)."""
    if typ in FUSED and "ffn_down" in name:
        data[len(data) // 2] ^= 0x5A
        data[5 if typ == Q.Q4_K else 193] ^= 0x03
    return [(name, typ, shape, data)]


def _report(cli, gguf, fused: bool) -> tuple[dict, dict]:
    """The --json envelope (less its report's timing) and the number of Q4_K/Q6_K dequantizations."""
    calls = {"fused": 0, "deq": 0}
    real_fused, real_deq = quants.quantize_finite_with_values, kernels.dequantize

    def with_values(x, qtype, out):
        q = real_fused(x, qtype, out) if fused else None
        calls["fused"] += q is not None
        return q

    def deq(raw, t, *a, **k):
        calls["deq"] += t in FUSED
        return real_deq(raw, t, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(quants, "quantize_finite_with_values", with_values)
        mp.setattr(kernels, "dequantize", deq)
        code, out, err = cli("compare-weights", DRAFTERS / "qwen3-flat", gguf, "--json")
    doc = json.loads(out)
    assert doc["exit_code"] == code, err
    doc["payload"].pop("seconds")
    return doc, calls


@pytest.mark.parametrize("damaged", [False, True])
@pytest.mark.parametrize("chunk", [None, 2048])
def test_report_is_the_same_with_and_without_the_fused_values(cli, converted, tmp_path, monkeypatch, damaged, chunk):
    gguf = converted("qwen3-flat", "llama.cpp", "q4_k_m")
    if damaged:
        gguf = rewrite(gguf, tmp_path / "damaged.gguf", _damage)
    if chunk:  # many chunks per tensor: a damaged tensor has identical chunks (y) and others (ye)
        monkeypatch.setattr(engine, "CHUNK_VALUES", chunk)
    fused, on = _report(cli, gguf, True)
    plain, off = _report(cli, gguf, False)
    assert json.dumps(fused, sort_keys=True) == json.dumps(plain, sort_keys=True)

    types = {t["type"] for t in fused["payload"]["tensors"]}
    assert {"Q4_K", "Q6_K"} <= types, types
    assert on["fused"] > 0 and off["fused"] == 0
    # every chunk given the values dequantizes once less: its GGUF bytes where they are ggml's
    # (y), ggml's bytes where they differ (ye); the rest (the GGUF bytes of damaged chunks, the
    # diagnosis of failing tensors) is the same in both runs
    assert off["deq"] == on["fused"] + on["deq"]
    damaged_rows = [t for t in fused["payload"]["tensors"] if t["bytes_differing"]]
    if damaged:
        assert damaged_rows and all(t["type"] in ("Q4_K", "Q6_K") for t in damaged_rows)
        assert {t["type"] for t in damaged_rows} == {"Q4_K", "Q6_K"}
        assert all(t["deviation_from_ggml"] > 0 for t in damaged_rows)
        assert on["deq"] > 0
        assert fused["verdict"] == fused["payload"]["verdict"] == "fail"
    else:
        assert not damaged_rows and on["deq"] == 0 and fused["verdict"] == fused["payload"]["verdict"] == "pass"
