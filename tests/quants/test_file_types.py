"""Every file type `quantize` writes, and each llama-quantize override, whole file against the real
llama-quantize (the vendored llama.cpp, `make runtime`): the same bytes, on drafters of every family
our converter writes and on targets whose widths exercise every fallback. Where llama-quantize
refuses (an importance-matrix type, an override with no fallback), so do we (the plan's own
tests, test_policy_live.py, check the reasons)."""
from __future__ import annotations

import pytest

from dflash_gguf.errors import QuantizationError
from dflash_gguf.quants.ftypes import FTYPE_IDS
from dflash_gguf.quants.gguf_file import quantize_gguf

from .test_policy_live import (
    LQ, MODEL_NAMES, OVERRIDES, model, overrides_from_args, run_llama_quantize,
)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(LQ is None, reason="no llama-quantize: build the vendored llama.cpp (`make runtime`)")]
# the overrides on a K-quant mix, a legacy mix and a float file
OVERRIDE_FTYPES = ("Q4_K_M", "Q5_0", "F16")
_matrix = {"identical": 0, "refused by both": 0}


def _same_file(src, tmp_path, ftype: str, args: list[str]) -> str:
    ref, ours = tmp_path / "ref.gguf", tmp_path / "ours.gguf"
    rc, log = run_llama_quantize(src, ref, ftype, args)
    try:
        quantize_gguf(src, ours, ftype, overrides=overrides_from_args(args), threads=2)
    except QuantizationError as exc:
        assert rc != 0, f"llama-quantize wrote {ftype} {args}, we refused: {exc}"
        _matrix["refused by both"] += 1
        return "refused"
    assert rc == 0, f"we wrote {ftype} {args}, llama-quantize refused:\n{log[-2000:]}"
    a, b = ours.read_bytes(), ref.read_bytes()
    if a != b:
        at = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
        pytest.fail(f"{src.name} {ftype} {args}: {len(a):,} vs {len(b):,} bytes, first difference at byte {at:,}")
    _matrix["identical"] += 1
    return "identical"


@pytest.mark.parametrize("name", MODEL_NAMES)
@pytest.mark.parametrize("ftype", list(FTYPE_IDS))
def test_every_file_type_is_llama_quantizes_file(models, tmp_path, name, ftype):
    _same_file(model(models, name), tmp_path, ftype, [])


@pytest.mark.parametrize("name", MODEL_NAMES)
@pytest.mark.parametrize("ftype", OVERRIDE_FTYPES)
@pytest.mark.parametrize("override", [k for k in OVERRIDES if k != "tensor-type-imatrix"])
def test_every_override_is_llama_quantizes_file(models, tmp_path, name, ftype, override):
    _same_file(model(models, name), tmp_path, ftype, OVERRIDES[override])
