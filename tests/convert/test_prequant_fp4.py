"""NVFP4 checkpoints (convert/prequant_fp4.py): ModelOpt NVFP4, W4A16_NVFP4 and MIXED_PRECISION
(NVFP4 + FP8 layers), and compressed-tensors nvfp4-pack-quantized written by the package itself,
repacked to ggml NVFP4 blocks exactly as llama.cpp's converter does (byte for byte against the
vendored one); what mainline fails on refused in one line."""
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

from tests.convert.conftest import QWEN_DIR  # noqa: E402
from tests.convert.prequant_ckpt import (  # noqa: E402
    SOURCE, assert_converts_like_mainline, mainline_refs, shard, write_checkpoint,
)
from tests.convert.prequant_fp4_ckpt import ct_nvfp4, modelopt  # noqa: E402

LINEARS = [n for n, t in safetensors_torch.load_file(str(SOURCE / "model.safetensors")).items() if t.ndim == 2]
# a MIXED_PRECISION checkpoint: two FP8 modules, one weight-only NVFP4, the rest NVFP4
MIXED = {n.removesuffix(".weight"): "NVFP4" for n in LINEARS} | {
    "layers.0.mlp.down_proj": "FP8", "layers.1.self_attn.o_proj": "FP8", "layers.1.mlp.up_proj": "W4A16_NVFP4"}


def mainline_nvfp4_pack(weight, scale):
    """``_nvfp4_pack`` of llama.cpp's ``conversion/base.py``, verbatim."""
    out_features = weight.shape[0]
    n_blocks = scale.shape[1]
    w = weight.reshape(out_features, n_blocks, 8)
    vals = torch.stack([w & 0x0F, w >> 4], dim=-1).reshape(out_features, n_blocks, 16)
    d_ue = scale.view(torch.uint8).numpy().reshape(out_features, n_blocks) & 0x7F
    qs = (vals[:, :, :8] | (vals[:, :, 8:] << 4)).to(torch.uint8).numpy()
    n_super = n_blocks // 4
    d_grouped = d_ue.reshape(out_features, n_super, 4)
    qs_grouped = qs.reshape(out_features, n_super, 4, 8).reshape(out_features, n_super, 32)
    return np.concatenate([d_grouped, qs_grouped], axis=-1).reshape(out_features, n_super * 36)


@pytest.mark.parametrize("kind", ["modelopt", "compressed-tensors"])
def test_repack_is_mainlines_nvfp4_pack_and_decodes_to_the_weight(tmp_path, kind):
    """Byte for byte ``_nvfp4_pack``; and ggml's NVFP4 decoding of the blocks times scale2 is the
    checkpoint's own dequantization (code value × E4M3 scale × scale2)."""
    from gguf.quants import dequantize as ggml_dequantize

    from dflash_gguf.convert.prequant import dequantize, split
    from dflash_gguf.convert.prequant_fp4 import repack
    from dflash_gguf.fileio.gguf_constants import GGMLQuantizationType as Q

    if kind == "compressed-tensors":
        pytest.importorskip("compressed_tensors", reason="needs the 'compressed-tensors' package")
    d = modelopt(tmp_path / "c") if kind == "modelopt" else ct_nvfp4(tmp_path / "c")
    inv = {t.name: t for t in read_inventory(d)}
    pre = split(load_config(d).quantization, inv, "x")
    assert sorted(pre.weights) == sorted(pre.added) == sorted(LINEARS)
    state = safetensors_torch.load_file(str(d / "model.safetensors"))
    codes = ".weight" if kind == "modelopt" else ".weight_packed"
    for n in LINEARS:
        m = n.removesuffix(".weight")
        w, s = state[m + codes], state[m + ".weight_scale"]
        got = repack(pre.weights[n])
        assert got.dtype == np.uint8 and got.tobytes() == mainline_nvfp4_pack(w, s).tobytes(), n
        assert pre.added[n].shape == (w.shape[0], 2 * w.shape[1])
        s2 = state[m + ".weight_scale_2"] if kind == "modelopt" else 1.0 / state[m + ".weight_global_scale"]
        e2m1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6])
        vals = e2m1[torch.stack([w & 0x0F, w >> 4], -1).reshape(w.shape[0], -1).long()]
        want = (vals.reshape(w.shape[0], -1, 16) * s.float()[..., None]).reshape(vals.shape) * s2.float()
        ours = ggml_dequantize(got, Q.NVFP4) * s2.float().numpy()
        np.testing.assert_allclose(ours, want.numpy(), rtol=1e-6, atol=0)
        # the reference model's values (prequant.dequantize): the same numbers
        np.testing.assert_allclose(dequantize(pre.added[n], pre.weights[n]), want.numpy(), rtol=1e-6, atol=0)


def test_config_reads_modelopt_as_mainline(tmp_path):
    q = load_config(modelopt(tmp_path / "a")).quantization
    assert (q.method, q.quant_algo, q.nvfp4) == ("modelopt", "NVFP4", True)
    q = load_config(modelopt(tmp_path / "b", in_config=False)).quantization  # hf_quant_config.json alone
    assert (q.method, q.quant_algo, q.nvfp4) == ("modelopt", "NVFP4", True) and q.where.endswith("hf_quant_config.json")
    # MIXED_PRECISION: NVFP4 from its per-layer algorithms, read from hf_quant_config.json
    q = load_config(modelopt(tmp_path / "c", algo="MIXED_PRECISION", layers=MIXED)).quantization
    assert q.quant_algo == "MIXED_PRECISION" and q.nvfp4 and ("model.layers.0.mlp.down_proj", "FP8") in q.layer_algos
    q = load_config(modelopt(tmp_path / "d", algo="FP8", layers={m: "FP8" for m in MIXED})).quantization
    assert not q.nvfp4


def test_plan_puts_nvfp4_first_with_its_scales(tmp_path, cli):
    d = modelopt(tmp_path / "a", algo="MIXED_PRECISION", layers=MIXED, keep=("fc.weight",),
                 unit_scales=("layers.0.self_attn.k_proj",))
    target = ("--target-dir", QWEN_DIR)
    code, so, se = cli("convert", d, *target, "--dry-run", "--json")
    assert code == 0, se
    plan = json.loads(so)
    types = [(t["name"], t["type"]) for t in plan["tensors"]]
    nv = [n for n, ty in types if ty == "NVFP4"]
    assert len(nv) == 12 and types[0] == ("blk.0.ffn_gate.weight", "NVFP4")  # fc kept BF16, two FP8, down_proj FP8
    assert types[1:3] == [("blk.0.ffn_gate.scale", "F32"), ("blk.0.ffn_gate.input_scale", "F32")]
    k = [n for n, _ in types].index("blk.0.attn_k.weight")
    assert types[k + 1][0] == "blk.0.attn_output.weight"  # unit scale2 and input_scale: no scale tensors
    assert not any(n.startswith("blk.1.ffn_up.input") for n, _ in types)  # W4A16: no input_scale stored
    assert ("blk.1.ffn_up.scale", "F32") in types
    kv = {k["key"]: k["value"] for k in plan["kv"]}
    assert kv["general.file_type"] == 39
    assert kv["general.tensor_extra.name"] == ["blk.1.ffn_up.weight"] and kv["general.tensor_extra.prec_a4"] == [False]
    down = next(t for t in plan["tensors"] if t["source"] == "layers.0.mlp.down_proj.weight")
    assert down["source_dtype"] == "F8_E4M3" and "dequantized (modelopt MIXED_PRECISION" in down["reason"]


REFUSED = {
    # rows of 240 values: 15 NVFP4 sub-blocks, not whole 64-value ggml blocks (mainline's reshape fails)
    "partial block": (lambda d: modelopt(d, intermediate=240), WeightsError.exit_code,
                      "not whole 64-value NVFP4 blocks"),
    "bad quantized_layers": (lambda d: modelopt(d, algo="MIXED_PRECISION", layers={**MIXED, "layers.9.mlp": "FP8"}),
                             WeightsError.exit_code, "quantized_layers entry 'model.layers.9.mlp' is not a module"),
    "lucebox": (lambda d: modelopt(d), 2, "use --format llama.cpp instead of --format lucebox"),
    "q8_0": (lambda d: modelopt(d), 2, "does not re-quantize it"),
    "interleaved rope": (lambda d: modelopt(d), WeightsError.exit_code, "without the NeoX row permutation"),
    "fc input scale": (lambda d: modelopt(d, fc_input_scale=0.5), WeightsError.exit_code,
                       "which llama.cpp's DFlash loader does not read"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_mainline_fails_on_or_we_do_not_write_is_refused_in_one_line(tmp_path, cli, case):
    build, exit_code, text = REFUSED[case]
    d = build(tmp_path / "c")
    args = {"lucebox": ["--format", "lucebox"], "q8_0": ["--outtype", "q8_0"]}.get(case, [])
    if case == "interleaved rope":
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, "rope_is_neox_style": False}))
    out = tmp_path / "x.gguf"
    code, _, se = cli("convert", d, "--target-dir", QWEN_DIR, "-o", out, *args)
    assert code == exit_code, se
    assert "\n" not in se.strip() and "Traceback" not in se and text in se and not out.exists(), se


def test_a_weight_scale_beside_a_float_weight_is_refused(tmp_path, cli):
    """An NVFP4 config whose 2-D ``weight_scale`` sits beside a BF16 weight: not NVFP4 codes."""
    state = safetensors_torch.load_file(str(SOURCE / "model.safetensors"))
    d = write_checkpoint(tmp_path / "q", {**state, "fc.weight_scale": torch.ones(64, 16).to(torch.float8_e4m3fn)},
                         {"quant_method": "modelopt", "quant_algo": "NVFP4"})
    code, _, se = cli("convert", d, "--format", "lucebox", "-o", tmp_path / "x.gguf")
    assert code == WeightsError.exit_code and "fc.weight is BF16" in se and "an NVFP4 weight is U8" in se, se


def test_compare_weights_compares_nvfp4_as_blocks(tmp_path):
    from dflash_gguf.compare import compare_weights
    from dflash_gguf.convert import convert

    d = modelopt(tmp_path / "c", algo="MIXED_PRECISION", layers=MIXED)
    convert(d, tmp_path / "d.gguf", target_dir=QWEN_DIR)
    r = compare_weights(d, tmp_path / "d.gguf")
    assert r.passed, [(t.src, t.status, t.detail) for t in r.tensors]
    assert r.counts["bit-identical"] == len(r.tensors) == 25 + 13 + 11  # weights, norms, NVFP4 scales
    assert any("NVFP4 weights are repacked" in n for n in r.notes), r.notes


# --- byte for byte against llama.cpp's converter ---------------------------------------------

def _cases(tmp: Path) -> list[tuple[str, Path, tuple[str, ...]]]:
    mo = modelopt(tmp / "mo")
    kept = modelopt(tmp / "mo-kept", keep=("fc.weight", "layers.1.mlp.gate_proj.weight"))
    file_only = modelopt(tmp / "mo-file-only", in_config=False, unit_scales=("fc", "layers.0.mlp.up_proj"))
    mixed = modelopt(tmp / "mo-mixed", algo="MIXED_PRECISION", layers=MIXED)
    w4a16 = modelopt(tmp / "mo-w4a16", algo="W4A16_NVFP4", layers={"layers.0.mlp.up_proj": "W4A16_NVFP4"},
                     unit_scales=("layers.1.self_attn.q_proj",))
    cases = [
        ("mo-auto", mo, ("--outtype", "auto")),
        ("mo-bf16", mo, ("--outtype", "bf16")),
        ("mo-kept-auto", kept, ("--outtype", "auto")),
        ("mo-kept-f32", kept, ("--outtype", "f32")),
        ("mo-file-only", file_only, ("--outtype", "auto")),
        ("mo-mixed-auto", mixed, ("--outtype", "auto")),
        ("mo-mixed-q8", mixed, ("--outtype", "bf16", "--fp8-as-q8")),
        ("mo-w4a16", w4a16, ("--outtype", "auto")),
        ("mo-sharded", shard(kept, tmp / "mo-sharded", ("fc.", "hidden_norm", "layers.1.")), ("--outtype", "auto")),
        # no NVFP4 at all: ModelOpt FP8, every module dequantized (dequant_model's modelopt branch)
        ("mo-fp8", modelopt(tmp / "mo-fp8", algo="FP8", layers={m: "FP8" for m in MIXED}), ("--outtype", "auto")),
        # mainline writes fc.input_scale, which its loader does not read: refused (a test of its own)
        ("mo-fc-input-scale", modelopt(tmp / "mo-fc-in", fc_input_scale=0.5), ("--outtype", "auto")),
    ]
    try:
        import compressed_tensors  # noqa: F401
    except ImportError:
        return cases
    return cases + [("ct-nvfp4", ct_nvfp4(tmp / "ct"), ("--outtype", "auto")),
                    ("ct-nvfp4a16-f16", ct_nvfp4(tmp / "ct-a16", "NVFP4A16"), ("--outtype", "f16"))]


@pytest.fixture(scope="module")
def mainline(tmp_path_factory):
    """Each case converted by the vendored mainline converter (``prequant_ckpt.mainline_refs``)."""
    tmp = tmp_path_factory.mktemp("prequant-fp4")
    return mainline_refs(tmp, _cases(tmp))


# case -> (general.file_type, tensor types): MOSTLY_NVFP4 for every float outtype; one F32 .scale and
# .input_scale per NVFP4 weight unless trivial (1.0)
EXPECTED = {
    "mo-auto": (39, {"NVFP4": 15, "F32": 39}),  # fc's input scale is 1.0 (the DFlash loader reads none)
    "mo-bf16": (39, {"NVFP4": 15, "F32": 39}),
    "mo-kept-auto": (39, {"NVFP4": 13, "BF16": 2, "F32": 36}),
    "mo-kept-f32": (39, {"NVFP4": 13, "F32": 38}),
    "mo-file-only": (39, {"NVFP4": 15, "F32": 36}),
    "mo-mixed-auto": (39, {"NVFP4": 13, "F16": 2, "F32": 34}),  # W4A16 up_proj: no input_scale
    "mo-mixed-q8": (39, {"NVFP4": 13, "Q8_0": 2, "F32": 34}),
    "mo-w4a16": (39, {"NVFP4": 15, "F32": 24}),  # weight-only: no input scales; one scale2 of 1.0
    "mo-sharded": (39, {"NVFP4": 13, "BF16": 2, "F32": 36}),
    "mo-fp8": (1, {"F16": 15, "F32": 10}),
    "ct-nvfp4": (39, {"NVFP4": 15, "F32": 39}),
    "ct-nvfp4a16-f16": (39, {"NVFP4": 15, "F32": 25}),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(EXPECTED))
def test_matches_llama_cpp_converter_byte_for_byte(mainline, cli, tmp_path, case):
    if case not in mainline[0]:
        pytest.skip("needs the 'compressed-tensors' package to write the checkpoint")
    ours, types = assert_converts_like_mainline(cli, tmp_path, mainline, case, load=True)
    assert types == EXPECTED[case]
    # the weights' .scale / .input_scale are tensors mainline's loader reads: check agrees it loads
    code, out, _ = cli("check", ours)
    assert code == 0, out


@pytest.mark.slow
def test_an_nvfp4_fc_with_an_input_scale_is_refused_as_llama_cpp_refuses_mainlines_file(mainline, cli, tmp_path):
    """Both halves: mainline converts it, writing fc.input_scale, and real llama.cpp refuses that
    file (its DFlash loader reads fc.scale only: "wrong number of tensors"); we refuse in one line."""
    pytest.importorskip("llama_cpp")
    from tests.convert.llamacpp_reference import llama_load

    refs, target = mainline
    d, args, ref, code, log = refs["mo-fc-input-scale"]
    assert code == 0, log
    assert llama_load(ref) == "FAILED"
    code, out, _ = cli("check", ref)  # and check says why before anyone loads it
    assert code == 12 and "drafter-tensor-unclaimed" in out and "fc.input_scale" in out, out
    c, _, se = cli("convert", d, "--target-dir", target, "-o", tmp_path / "x.gguf", *args)
    assert c == WeightsError.exit_code and "fc.input_scale" in se and not (tmp_path / "x.gguf").exists(), se


def test_reference_model_reads_nvfp4_as_the_gguf_holds_it(tmp_path):
    """The float reference (``reference/load.py``) gets each NVFP4 weight at its real shape, with
    the values the GGUF and its ``.scale`` give (``prequant_fp4.dequantize_nvfp4``)."""
    from dflash_gguf.reference.load import read_safetensors

    d = modelopt(tmp_path / "c", algo="MIXED_PRECISION", layers=MIXED)
    state = read_safetensors(d, load_config(d))
    src = safetensors_torch.load_file(str(SOURCE / "model.safetensors"))
    assert sorted(state) == sorted(src) and all(tuple(state[n].shape) == tuple(src[n].shape) for n in src)
    w, s = state["fc.weight"], src["fc.weight"].float()
    assert (w - s).norm() / s.norm() < 0.15  # 4-bit codes: close to the weight, not equal
