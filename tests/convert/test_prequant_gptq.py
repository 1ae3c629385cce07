"""GPTQ checkpoints (convert/prequant_gptq.py): qweight/qzeros/scales/g_idx as GPTQ exporters
store them (written with safetensors), dequantized exactly as llama.cpp's converter does (bit for
bit against its ``dequant_gptq``, byte for byte against the vendored converter)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dflash_gguf.config import load_config
from dflash_gguf.errors import WeightsError
from dflash_gguf.fileio.safetensors import read_inventory

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from tests.convert.prequant_ckpt import (  # noqa: E402
    SOURCE, assert_converts_like_mainline, mainline_refs, shard, write_checkpoint,
)


def _pack(q: "torch.Tensor", bits: int, dim: int) -> "torch.Tensor":
    """Values (0..2^bits-1) packed 32 / bits per int32 along ``dim``, the first in the low bits."""
    pf = 32 // bits
    q = q.to(torch.int64).movedim(dim, 0)
    q = q.reshape(q.shape[0] // pf, pf, *q.shape[1:])
    shifts = (torch.arange(pf) * bits).reshape(1, pf, *[1] * (q.ndim - 2))
    words = (q << shifts).sum(1)
    return (((words + 2**31) % 2**32) - 2**31).to(torch.int32).movedim(0, dim)


def gptq(dst: Path, *, bits: int = 4, group: int = 32, act_order: bool = False, v2: bool = False) -> Path:
    """qwen3-flat's 2-D weights GPTQ-quantized min-max per group of input rows: ``qweight``
    [in / pf, out], ``qzeros`` [groups, out / pf] (the "gptq" format stores zero points less one,
    "gptq_v2" as they are), F16 ``scales`` [groups, out], I32 ``g_idx`` [in]; ``act_order``: rows
    assigned to groups out of order (desc_act)."""
    maxq = 2**bits - 1
    gen = torch.Generator().manual_seed(bits * 100 + group)
    state = safetensors_torch.load_file(str(SOURCE / "model.safetensors"))
    out = {}
    for n, w in state.items():
        if w.ndim != 2:
            out[n] = w
            continue
        wt = w.float().T  # [in, out]
        n_in, n_out = wt.shape
        g_idx = torch.arange(n_in) // group
        if act_order:
            g_idx = g_idx[torch.randperm(n_in, generator=gen)]
        groups = n_in // group
        scales, zeros = torch.empty(groups, n_out), torch.empty(groups, n_out, dtype=torch.int64)
        for g in range(groups):
            rows = wt[g_idx == g]
            lo, hi = rows.amin(0).clamp(max=0), rows.amax(0).clamp(min=0)
            scales[g] = ((hi - lo) / maxq).clamp(min=1e-6)
            zeros[g] = torch.round(-lo / scales[g]).clamp(1, maxq).to(torch.int64)  # ≥ 1: v1 stores it less one
        scales = scales.to(torch.float16)
        q = torch.clamp(torch.round(wt / scales.float()[g_idx] + zeros[g_idx]), 0, maxq)
        base = n.removesuffix(".weight")
        out[base + ".qweight"] = _pack(q, bits, 0)
        out[base + ".qzeros"] = _pack(zeros - (0 if v2 else 1), bits, 1)
        out[base + ".scales"], out[base + ".g_idx"] = scales, g_idx.to(torch.int32)
    return write_checkpoint(dst, out, {"quant_method": "gptq", "bits": bits, "group_size": group,
                                       "desc_act": act_order, "sym": False, "true_sequential": True,
                                       "checkpoint_format": "gptq_v2" if v2 else "gptq"})


def mainline_dequant_gptq(quant_config, g_idx, qweight, qzeros, scales):
    """``dequant_gptq`` of llama.cpp's ``conversion/base.py``, verbatim but for ``self.lazy``."""
    bits = quant_config["bits"]
    maxq = (2 ** bits) - 1
    pack_dtype_bits = qweight.dtype.itemsize * 8
    pack_factor = pack_dtype_bits // bits
    wf = torch.tensor(list(range(0, pack_dtype_bits, bits)), dtype=torch.int32).unsqueeze(0)
    zeros = torch.bitwise_right_shift(qzeros.unsqueeze(2).expand(-1, -1, pack_factor), wf.unsqueeze(0)).to(
        torch.int16 if bits == 8 else torch.int8)
    zeros = torch.bitwise_and(zeros, maxq).reshape(scales.shape)
    weight = torch.bitwise_and(torch.bitwise_right_shift(qweight.unsqueeze(1).expand(-1, pack_factor, -1),
                                                         wf.unsqueeze(-1)).to(torch.int16 if bits == 8 else torch.int8),
                               maxq)
    weight = weight.reshape(weight.shape[0] * weight.shape[1], weight.shape[2])
    if quant_config.get("checkpoint_format", "gptq") == "gptq":
        zeros += 1
    return (scales[g_idx].float() * (weight - zeros[g_idx]).float()).T


KINDS = {"int4": {}, "int8": {"bits": 8, "group": 64}, "int2-act-order": {"bits": 2, "act_order": True},
         "int4-v2": {"v2": True}}


@pytest.mark.parametrize("kind", list(KINDS))
def test_gptq_dequantizes_as_mainline_bit_for_bit(tmp_path, cli, kind):
    from dflash_gguf.convert.prequant import dequantize, split

    d = gptq(tmp_path / "c", **KINDS[kind])
    inv = {t.name: t for t in read_inventory(d)}
    q = load_config(d).quantization
    pre = split(q, inv, "x")
    src = safetensors_torch.load_file(str(SOURCE / "model.safetensors"))
    linears = [n for n, t in src.items() if t.ndim == 2]
    assert sorted(pre.weights) == sorted(pre.added) == sorted(linears)
    qc = json.loads((d / "config.json").read_text())["quantization_config"]
    state = safetensors_torch.load_file(str(d / "model.safetensors"))
    for n in linears:
        b = n.removesuffix(".weight")
        want = mainline_dequant_gptq(qc, state[b + ".g_idx"], state[b + ".qweight"], state[b + ".qzeros"],
                                     state[b + ".scales"]).contiguous().numpy()
        got = dequantize(pre.added[n], pre.weights[n])
        assert got.shape == tuple(src[n].shape) == pre.added[n].shape
        assert got.dtype == np.float32 and got.view(np.uint32).tobytes() == want.view(np.uint32).tobytes(), n
        # and it is the weight, within a step of its group's grid
        step = state[b + ".scales"].float()[state[b + ".g_idx"].long()].T.numpy()
        assert np.all(np.abs(got - src[n].float().numpy()) <= step + 1e-6), n
    code, so, se = cli("convert", d, "--format", "lucebox", "--dry-run", "--json")
    assert code == 0, se
    plan = json.loads(so)
    assert plan["dropped"] == [] and [t["source"] for t in plan["tensors"]][-len(linears):] == sorted(linears)
    t = next(t for t in plan["tensors"] if t["source"] == "fc.weight")
    assert t["source_dtype"] == "I32" and f"dequantized (gptq int{q.num_bits}" in t["reason"]


@pytest.mark.parametrize("fault", ["no g_idx", "3 bits", "bad g_idx shape"])
def test_gptq_faults_are_refused_in_one_line(tmp_path, cli, fault):
    d = gptq(tmp_path / "c")
    state = safetensors_torch.load_file(str(d / "model.safetensors"))
    if fault == "no g_idx":
        del state["layers.0.mlp.up_proj.g_idx"]
    elif fault == "bad g_idx shape":
        state["fc.g_idx"] = state["fc.g_idx"][:100]
    else:
        cfg = json.loads((d / "config.json").read_text())
        cfg["quantization_config"]["bits"] = 3
        (d / "config.json").write_text(json.dumps(cfg))
    safetensors_torch.save_file(state, str(d / "model.safetensors"))
    code, _, se = cli("convert", d, "--format", "lucebox", "-o", tmp_path / "x.gguf")
    assert code == WeightsError.exit_code and "Traceback" not in se and "\n" not in se.strip(), se
    assert not (tmp_path / "x.gguf").exists()
    assert {"no g_idx": "has no layers.0.mlp.up_proj.g_idx", "3 bits": "3-bit unpacking is not implemented",
            "bad g_idx shape": "fc.g_idx [100] is not one group index per input row (256)"}[fault] in se, se


def test_gptq_conversion_compares_back_bit_identical(tmp_path):
    from dflash_gguf.compare import compare_weights
    from dflash_gguf.convert import convert

    d = gptq(tmp_path / "c", act_order=True)
    convert(d, tmp_path / "d.gguf", format="lucebox", outtype="f32")
    r = compare_weights(d, tmp_path / "d.gguf")
    assert r.passed and r.counts["bit-identical"] == len(r.tensors) == 25


# --- byte for byte against llama.cpp's converter ---------------------------------------------

def _cases(tmp: Path) -> list[tuple[str, Path, tuple[str, ...]]]:
    int4 = gptq(tmp / "int4")
    return [
        ("int4-auto", int4, ("--outtype", "auto")),
        ("int4-q8_0", int4, ("--outtype", "q8_0")),
        ("int8-f32", gptq(tmp / "int8", bits=8, group=64), ("--outtype", "f32")),
        ("int2-act-order-bf16", gptq(tmp / "int2", bits=2, act_order=True), ("--outtype", "bf16")),
        ("int4-v2-auto", gptq(tmp / "int4-v2", v2=True), ("--outtype", "auto")),
        ("int4-sharded", shard(int4, tmp / "int4-sharded", ("fc.", "hidden_norm", "layers.0.")), ("--outtype", "auto")),
    ]


@pytest.fixture(scope="module")
def mainline(tmp_path_factory):
    """Each case converted by the vendored mainline converter (``prequant_ckpt.mainline_refs``)."""
    tmp = tmp_path_factory.mktemp("prequant-gptq")
    return mainline_refs(tmp, _cases(tmp))


# case -> (general.file_type, tensor types): F16 scales make ``auto`` F16; the dequantized weights
# come after every stored tensor (mainline's new_tensors)
EXPECTED = {
    "int4-auto": (1, {"F16": 15, "F32": 10}),
    "int4-q8_0": (7, {"Q8_0": 15, "F32": 10}),
    "int8-f32": (0, {"F32": 25}),
    "int2-act-order-bf16": (32, {"BF16": 15, "F32": 10}),
    "int4-v2-auto": (1, {"F16": 15, "F32": 10}),
    "int4-sharded": (1, {"F16": 15, "F32": 10}),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(EXPECTED))
def test_matches_llama_cpp_converter_byte_for_byte(mainline, cli, tmp_path, case):
    ours, types = assert_converts_like_mainline(cli, tmp_path, mainline, case, load=True)
    assert types == EXPECTED[case]
