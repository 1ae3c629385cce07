"""compare-weights with a pre-quantized (FP8) checkpoint as the source: its weights are
dequantized as convert dequantizes them, so our own conversion compares back bit for bit and a
tampered weight fails."""
from __future__ import annotations

import numpy as np
import pytest

from dflash_gguf.compare import compare_weights
from dflash_gguf.convert import convert
from dflash_gguf.errors import EXIT_MISMATCH

from tests.conftest import rewrite_gguf

pytest.importorskip("torch")
from tests.convert.prequant_ckpt import ct_fp8, fp8_block  # noqa: E402


@pytest.mark.parametrize("outtype,fp8_as_q8", [("auto", False), ("f32", False), ("bf16", True), ("q8_0", False)])
def test_our_conversion_of_an_fp8_checkpoint_compares_bit_identical(tmp_path, outtype, fp8_as_q8):
    src = fp8_block(tmp_path / "fp8")
    out = tmp_path / "d.gguf"
    convert(src, out, format="lucebox", outtype=outtype, fp8_as_q8=fp8_as_q8)
    r = compare_weights(src, out)
    assert r.passed, [(t.name, t.status, t.detail) for t in r.tensors if not t.passed]
    assert r.counts["bit-identical"] == len(r.tensors) == 25
    assert any("pre-quantized checkpoint (fp8, 48×48 blocks): its 15 quantized weights" in n for n in r.notes)
    down = next(t for t in r.tensors if t.source == "layers.0.mlp.down_proj.weight")
    assert down.source_type == "F8_E4M3"


def test_compressed_tensors_fp8_compares_bit_identical(tmp_path):
    src = ct_fp8(tmp_path / "ct")
    out = tmp_path / "d.gguf"
    convert(src, out, format="lucebox")
    r = compare_weights(src, out)
    assert r.passed and r.counts["bit-identical"] == 25


def test_a_tampered_weight_fails(tmp_path, cli):
    src = fp8_block(tmp_path / "fp8")
    good = tmp_path / "d.gguf"
    convert(src, good, format="lucebox", outtype="bf16")

    def bump(a: np.ndarray) -> np.ndarray:  # BF16 as uint16: one value a few ULPs off
        a = a.copy()
        a.reshape(-1)[7] += 40
        return a

    bad = rewrite_gguf(good, tmp_path / "bad.gguf", data={"blk.0.ffn_down.weight": bump})
    code, so, se = cli("compare-weights", src, bad)
    assert code == EXIT_MISMATCH, so + se
    r = compare_weights(src, bad)
    failed = [t.name for t in r.tensors if not t.passed]
    assert failed == ["blk.0.ffn_down.weight"]
    assert cli("compare-weights", src, good)[0] == 0


def test_without_dequantization_the_scales_would_be_extra(tmp_path):
    """The scales are folded, not compared: a plain conversion's tensor count."""
    src = fp8_block(tmp_path / "fp8")
    out = tmp_path / "d.gguf"
    convert(src, out, format="lucebox")
    r = compare_weights(src, out)
    assert not [t for t in r.tensors if t.source and "scale" in t.source] and len(r.tensors) == 25
