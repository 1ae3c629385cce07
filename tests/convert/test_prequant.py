"""Pre-quantized checkpoints (convert/prequant.py, prequant_packed.py): FP8 block-scaled,
compressed-tensors FP8 and pack-quantized (some written by the compressed-tensors package itself)
read exactly as llama.cpp's converter reads them (byte for byte against the vendored one), and
every method we do not read refused in one line."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from dflash_gguf.config import load_config
from dflash_gguf.config.quantization import QuantizationConfig
from dflash_gguf.convert.prequant import Dequant, auto_outtype, dequantize, scale_shape
from dflash_gguf.errors import WeightsError
from dflash_gguf.fileio.safetensors import read_inventory

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from tests.convert.prequant_ckpt import (  # noqa: E402
    SOURCE, assert_converts_like_mainline, ct_config, ct_fp8, ct_package, fp8_block, mainline_refs, shard, sharded_fp8,
    write_checkpoint,
)

# --- dequantization, unit by unit ------------------------------------------------------------

@pytest.mark.parametrize("scale_dtype", ["F32", "BF16"])
def test_dequantize_is_torchs_dequant_simple_bit_for_bit(tmp_path, scale_dtype):
    d = fp8_block(tmp_path / "c", scale_dtype=torch.float32 if scale_dtype == "F32" else torch.bfloat16)
    inv = {t.name: t for t in read_inventory(d)}
    state = safetensors_torch.load_file(str(d / "model.safetensors"))
    n = "layers.0.mlp.down_proj.weight"  # [64, 256]: 2×6 blocks of 48, both edges partial
    assert inv[n + "_scale_inv"].dtype == scale_dtype and inv[n].dtype == "F8_E4M3"
    got = dequantize(inv[n], Dequant(inv[n + "_scale_inv"], (48, 48), True))
    s = state[n + "_scale_inv"].float().repeat_interleave(48, 0).repeat_interleave(48, 1)[:64, :256]
    want = (state[n].float() * s).numpy()  # mainline's dequant_simple
    assert got.dtype == np.float32 and got.view(np.uint32).tobytes() == want.view(np.uint32).tobytes()


def test_scale_shapes_follow_dequant_simple():
    assert scale_shape((2, 6), (48, 48), (64, 256)) == (64, 256)
    assert scale_shape((64, 1), None, (64, 256)) == (64, 1)  # per channel
    assert scale_shape((), None, (64, 256)) == (1, 1)  # per tensor
    assert scale_shape((1, 6), (48, 48), (64, 256)) is None  # too few row blocks
    assert scale_shape((64,), None, (64, 256)) == (64, 1)  # trailing 1s added, as mainline's unsqueeze(-1)
    assert scale_shape((2, 6, 1), (48, 48), (64, 256)) is None  # a third dim would grow the weight


def test_auto_is_mainlines_guess_before_dequantization(tmp_path):
    # every 2-D tensor FP8 or an F32 scale: nothing to guess from, F16
    assert auto_outtype(read_inventory(fp8_block(tmp_path / "a"))) == "f16"
    # a BF16 matrix kept (or a BF16 scale) decides it
    assert auto_outtype(read_inventory(fp8_block(tmp_path / "b", keep=("fc.weight",)))) == "bf16"
    assert auto_outtype(read_inventory(fp8_block(tmp_path / "c", scale_dtype=torch.bfloat16))) == "bf16"
    # shards in their order, not all names sorted: fc.weight (BF16) is in the second shard
    assert auto_outtype(read_inventory(sharded_fp8(tmp_path / "d"))) == "f16"


def test_config_parses_quantization(tmp_path):
    cfg = load_config(fp8_block(tmp_path / "a", block=(32, 16)))
    assert cfg.quantization == QuantizationConfig("fp8", f"{tmp_path / 'a' / 'config.json'}: quantization_config",
                                                  block_size=(32, 16))
    assert cfg.quantization.fp8_weights
    ct = load_config(ct_fp8(tmp_path / "b")).quantization
    assert (ct.method, ct.format, ct.strategy, ct.fp8_weights) == ("compressed-tensors", "float-quantized",
                                                                  "channel", True)
    assert load_config(SOURCE).quantization is None


def test_plan_folds_scales_and_drops_activation_scales(tmp_path, cli):
    d = fp8_block(tmp_path / "a")
    code, so, se = cli("convert", d, "--format", "lucebox", "--dry-run", "--json")
    assert code == 0, se
    plan = json.loads(so)
    names = [t["source"] for t in plan["tensors"]]
    assert not [n for n in names if n and "scale" in n] and "layers.0.mlp.down_proj.weight" in names
    t = next(t for t in plan["tensors"] if t["source"] == "layers.0.mlp.down_proj.weight")
    assert t["source_dtype"] == "F8_E4M3" and t["type"] == "F16" and "dequantized (fp8, 48×48 blocks)" in t["reason"]
    assert plan["dropped"] == []  # folded scales and unused activation scales are no tensors of their own


def test_a_scale_that_does_not_fit_is_refused(tmp_path, cli):
    d = fp8_block(tmp_path / "a")
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"]["weight_block_size"] = [16, 16]  # the stored scales are per 48×48
    (d / "config.json").write_text(json.dumps(cfg))
    code, _, se = cli("convert", d, "--format", "lucebox", "-o", tmp_path / "x.gguf")
    assert code == WeightsError.exit_code and "does not fit weight" in se and "16×16 blocks" in se
    assert "Traceback" not in se and not (tmp_path / "x.gguf").exists()


# --- refusals (NVFP4, GPTQ and BitNet are read: tests/convert/test_prequant_fp4.py, _gptq.py, _bitnet.py) ---

REFUSALS = [
    ({"quant_method": "awq", "bits": 4}, "'awq'", "refuses it too"),
    ({**ct_config("group"), "format": "pack-quantized"}, "'compressed-tensors' format 'pack-quantized'",
     "refuses it too (it reads int weights of group strategy"),
    ({**ct_config("group"), "format": "pack-quantized", "config_groups": {"g": {"weights": {
        "num_bits": 3, "type": "int", "strategy": "group", "group_size": 32}}}},
     "'compressed-tensors' format 'pack-quantized'", "num_bits 3, group_size 32"),
    ({**ct_config("channel"), "format": "mixed-precision"}, "'compressed-tensors' format 'mixed-precision'",
     "only when every group is nvfp4-pack-quantized"),
    (ct_config("tensor"), "'compressed-tensors' format 'float-quantized'", "refuses it too (it reads channel or block"),
    ({**ct_config("channel"), "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float", "strategy": "channel"}}}},
     "'compressed-tensors' format 'float-quantized'", "dequantizes its 4-bit float weights"),
]


@pytest.mark.parametrize("qc,name,mainline", REFUSALS, ids=[r[1] for r in REFUSALS])
def test_unsupported_methods_are_refused_in_one_line(tmp_path, cli, qc, name, mainline):
    state = safetensors_torch.load_file(str(SOURCE / "model.safetensors"))
    d = write_checkpoint(tmp_path / "q", {**state, "fc.weight_scale": torch.ones(64, 1)}, qc)
    out = tmp_path / "x.gguf"
    code, so, se = cli("convert", d, "--format", "lucebox", "-o", out)
    assert code == WeightsError.exit_code, se
    line = se.strip()
    assert "\n" not in line and "Traceback" not in se and "unexpected tensor" not in se
    assert f"quant_method {name} is not supported by dflash-gguf yet" in line and mainline in line
    assert "quantization_config" in line and not out.exists()


def test_fp8_as_q8_with_a_llama_quantize_type_is_a_usage_error(tmp_path, cli):
    code, _, se = cli("convert", fp8_block(tmp_path / "a"), "--format", "lucebox", "--outtype", "q4_k_m",
                      "--fp8-as-q8", "-o", tmp_path / "x.gguf")
    assert code == 2 and "--fp8-as-q8" in se


HAS_CT = importlib.util.find_spec("compressed_tensors") is not None
# (preset, weight-arg overrides, mainline's dequant block): 48 divides none of 32, 64, 256
CT_PACKAGE = {"channel": ("FP8_DYNAMIC", {}, None), "block": ("FP8_BLOCK", {"block_structure": [48, 48]}, (48, 48))}


@pytest.mark.parametrize("strategy", list(CT_PACKAGE))
def test_compressed_tensors_package_writes_what_we_read(tmp_path, cli, strategy):
    """A checkpoint compressed by the real ``compressed-tensors`` package: its tensor names, dtypes
    and quantization_config are the layout prequant.py reads, every Linear's FP8 weight is paired
    with its scale, and it dequantizes as mainline's ``dequant_simple`` does, bit for bit."""
    pytest.importorskip("compressed_tensors", reason="needs the 'compressed-tensors' package to write the checkpoint")
    from dflash_gguf.convert.prequant import split

    preset, over, block = CT_PACKAGE[strategy]
    d = ct_package(tmp_path / "c", preset, **over)
    inv = {t.name: t for t in read_inventory(d)}
    src = safetensors_torch.load_file(str(SOURCE / "model.safetensors"))
    linears = [n for n, t in src.items() if t.ndim == 2]
    # exactly what the package wrote: the FP8 weight, a BF16 scale beside it (the weight's dtype),
    # no zero point (symmetric) and no activation scale (dynamic); the rest untouched
    assert sorted(inv) == sorted([*src, *(n + "_scale" for n in linears)])
    assert {inv[n].dtype for n in linears} == {"F8_E4M3"} and {inv[n + "_scale"].dtype for n in linears} == {"BF16"}
    assert inv["layers.0.mlp.down_proj.weight_scale"].shape == ((64, 1) if strategy == "channel" else (2, 6))
    q = load_config(d).quantization
    assert (q.method, q.format, q.strategy, q.block_size, q.fp8_weights) == (
        "compressed-tensors", "float-quantized", strategy, block, True)
    pre = split(q, inv, "x")
    assert sorted(pre.weights) == sorted(linears) and pre.consumed == {n + "_scale" for n in linears}
    state = safetensors_torch.load_file(str(d / "model.safetensors"))
    for n in linears:
        s = state[n + "_scale"].float()
        if block:
            s = s.repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)[:state[n].shape[0], :state[n].shape[1]]
        want = (state[n].float() * s).numpy()  # mainline's dequant_simple
        got = dequantize(inv[n], pre.weights[n])
        assert got.view(np.uint32).tobytes() == want.view(np.uint32).tobytes(), n
    code, so, se = cli("convert", d, "--format", "lucebox", "--dry-run", "--json")
    assert code == 0, se
    assert json.loads(so)["dropped"] == []


# preset, weight-arg overrides (group_size 32 or 64 divides 64 and 256)
CT_PACKED = {"w4": ("W4A16", {"group_size": 32}), "w4-asym": ("W4A16_ASYM", {"group_size": 32}),
             "w8": ("W8A16", {"group_size": 64})}


def mainline_dequant_packed(w, scale, shape_tensor, zero_point, num_bits: int, group_size: int):
    """``dequant_packed`` of llama.cpp's ``conversion/base.py``, verbatim but for ``self.lazy``."""
    shape = tuple(shape_tensor.tolist())
    mask = (1 << num_bits) - 1
    shifts = torch.arange(0, 32 - (num_bits - 1), num_bits, dtype=torch.int32)
    if zero_point is None:
        offset = 1 << (num_bits - 1)
    else:
        offset = (zero_point.unsqueeze(1) >> shifts.reshape(1, -1, 1)) & mask
        offset = offset.reshape(-1, zero_point.shape[1])
        offset = offset[:shape[0], :].unsqueeze(-1)
    unpacked = (w.unsqueeze(-1) >> shifts.reshape(1, 1, -1)) & mask
    unpacked = unpacked.reshape(shape[0], -1)
    unpacked = unpacked[:, :shape[1]]
    unpacked = unpacked.reshape(shape[0], (unpacked.shape[-1] + group_size - 1) // group_size, group_size)
    unpacked = unpacked - offset
    return (unpacked * scale.unsqueeze(-1).float()).reshape(shape)


@pytest.mark.parametrize("kind", list(CT_PACKED))
def test_pack_quantized_from_the_package_dequantizes_as_mainline(tmp_path, cli, kind):
    """``pack-quantized`` written by the real compressed-tensors package (int weights packed in
    I32, BF16 group scales, I64 shape, packed I32 zero points when asymmetric): every Linear
    becomes a stand-in ``*.weight`` routed last, dequantized as mainline's ``dequant_packed``,
    bit for bit."""
    pytest.importorskip("compressed_tensors", reason="needs the 'compressed-tensors' package to write the checkpoint")
    from dflash_gguf.convert.prequant import split

    preset, over = CT_PACKED[kind]
    d = ct_package(tmp_path / "c", preset, **over)
    inv = {t.name: t for t in read_inventory(d)}
    src = safetensors_torch.load_file(str(SOURCE / "model.safetensors"))
    linears = [n for n, t in src.items() if t.ndim == 2]
    zp = ("_zero_point",) if kind == "w4-asym" else ()
    parts = [n + k for n in linears for k in ("_packed", "_scale", "_shape", *zp)]
    assert sorted(inv) == sorted([*(n for n in src if n not in linears), *parts])
    assert {inv[n + "_packed"].dtype for n in linears} == {"I32"} and {inv[n + "_shape"].dtype for n in linears} \
        == {"I64"} and {inv[n + "_scale"].dtype for n in linears} == {"BF16"}
    q = load_config(d).quantization
    bits, gs = (8, 64) if kind == "w8" else (4, 32)
    assert (q.format, q.strategy, q.num_bits, q.group_size, q.weight_type) == ("pack-quantized", "group", bits, gs, "int")
    pre = split(q, inv, "x")
    assert sorted(pre.weights) == sorted(pre.added) == sorted(linears) and pre.consumed == set(parts)
    state = safetensors_torch.load_file(str(d / "model.safetensors"))
    for n in linears:
        assert pre.added[n].shape == tuple(src[n].shape)
        want = mainline_dequant_packed(state[n + "_packed"], state[n + "_scale"], state[n + "_shape"],
                                       state.get(n + "_zero_point"), bits, gs).numpy()
        got = dequantize(pre.added[n], pre.weights[n])
        assert got.dtype == np.float32 and got.view(np.uint32).tobytes() == want.view(np.uint32).tobytes(), n
        # and it is the weight: within a step of the int grid of the original (the symmetric grid's
        # top value is clamped, so not half a step)
        step = state[n + "_scale"].float().repeat_interleave(gs, 1).numpy()
        assert np.all(np.abs(got - src[n].float().numpy()) <= step + 1e-6), n
    code, so, se = cli("convert", d, "--format", "lucebox", "--dry-run", "--json")
    assert code == 0, se
    plan = json.loads(so)
    assert plan["dropped"] == [] and [t["source"] for t in plan["tensors"]][-len(linears):] == sorted(linears)
    t = next(t for t in plan["tensors"] if t["source"] == "fc.weight")
    assert t["source_dtype"] == "I32" and f"dequantized (compressed-tensors int{bits}, groups of {gs})" in t["reason"]


def test_pack_quantized_conversion_compares_back_bit_identical(tmp_path):
    """compare-weights reads the packed checkpoint as convert does (the stand-in weights)."""
    pytest.importorskip("compressed_tensors", reason="needs the 'compressed-tensors' package to write the checkpoint")
    from dflash_gguf.compare import compare_weights
    from dflash_gguf.convert import convert

    p, over = CT_PACKED["w4-asym"]
    d = ct_package(tmp_path / "c", p, **over)
    convert(d, tmp_path / "d.gguf", format="lucebox", outtype="q8_0")
    r = compare_weights(d, tmp_path / "d.gguf")
    assert r.passed and r.counts["bit-identical"] == len(r.tensors) == 25
    assert any("pre-quantized checkpoint (compressed-tensors int4, groups of 32): its 15" in n for n in r.notes)


def test_pack_quantized_parts_missing_or_misshapen_are_refused(tmp_path, cli):
    pytest.importorskip("compressed_tensors", reason="needs the 'compressed-tensors' package to write the checkpoint")
    p, over = CT_PACKED["w4"]
    d = ct_package(tmp_path / "c", p, **over)
    state = safetensors_torch.load_file(str(d / "model.safetensors"))
    del state["layers.0.mlp.up_proj.weight_scale"]
    state["fc.weight_shape"] = torch.tensor([64, 250])
    safetensors_torch.save_file(state, str(d / "model.safetensors"))
    code, _, se = cli("convert", d, "--format", "lucebox", "-o", tmp_path / "x.gguf")
    assert code == WeightsError.exit_code and "Traceback" not in se and not (tmp_path / "x.gguf").exists()
    assert "fc.weight_shape is [64, 250], not whole groups of 32" in se, se
    del state["fc.weight_shape"]
    safetensors_torch.save_file(state, str(d / "model.safetensors"))
    code, _, se = cli("convert", d, "--format", "lucebox", "-o", tmp_path / "x.gguf")
    assert code == WeightsError.exit_code and "has no fc.weight_shape" in se, se


# --- byte for byte against llama.cpp's converter ---------------------------------------------

def _cases(tmp: Path) -> list[tuple[str, Path, tuple[str, ...]]]:
    a = fp8_block(tmp / "fp8-f32-scales")
    b = fp8_block(tmp / "fp8-bf16-kept", scale_dtype=torch.bfloat16, keep=("fc.weight",), block=(128, 128),
                  act_scales=False)
    c = ct_fp8(tmp / "ct-channel")
    d = ct_fp8(tmp / "ct-block", "block", [32, 48])
    e = fp8_block(tmp / "fp8-narrow", intermediate=240)
    f = sharded_fp8(tmp / "fp8-sharded")
    g = shard(SOURCE, tmp / "plain-sharded", ("fc.", "hidden_norm", "norm", "layers.0."))
    return [
        ("fp8-auto", a, ("--outtype", "auto")),
        ("fp8-bf16", a, ("--outtype", "bf16")),
        ("fp8-f32", a, ("--outtype", "f32")),
        ("fp8-q8", a, ("--outtype", "auto", "--fp8-as-q8")),
        ("fp8-q8_0", a, ("--outtype", "q8_0")),
        ("kept-auto", b, ("--outtype", "auto")),
        ("kept-f32-q8", b, ("--outtype", "f32", "--fp8-as-q8")),
        ("ct-auto", c, ("--outtype", "auto")),
        ("ct-q8", c, ("--outtype", "bf16", "--fp8-as-q8")),
        ("ct-block-auto", d, ("--outtype", "auto")),
        ("narrow-q8", e, ("--outtype", "bf16", "--fp8-as-q8")),
        ("sharded-auto", f, ("--outtype", "auto")),
        ("plain-sharded", g, ("--outtype", "auto")),  # not pre-quantized: the shard order alone
    ] + (_package_cases(tmp) if HAS_CT else [])


def _package_cases(tmp: Path) -> list[tuple[str, Path, tuple[str, ...]]]:
    """Checkpoints written by the real compressed-tensors package (``ct_package``)."""
    (cp, cw, _), (bp, bw, _) = CT_PACKAGE["channel"], CT_PACKAGE["block"]
    ch, bl = ct_package(tmp / "ctpkg-channel", cp, **cw), ct_package(tmp / "ctpkg-block", bp, **bw)
    return [
        ("ctpkg-channel-auto", ch, ("--outtype", "auto")),
        ("ctpkg-channel-q8", ch, ("--outtype", "f16", "--fp8-as-q8")),
        ("ctpkg-block-auto", bl, ("--outtype", "auto")),
        ("ctpkg-block-f32", bl, ("--outtype", "f32")),
    ] + [(f"ctpkg-{k}-{ot}", ct_package(tmp / f"ctpkg-{k}", p, **over), ("--outtype", ot))
         for k, ot in (("w4", "auto"), ("w4-asym", "f16"), ("w8", "f32")) for p, over in [CT_PACKED[k]]] + [
        ("ctpkg-w4-sharded", shard(tmp / "ctpkg-w4", tmp / "ctpkg-w4-sharded", ("fc.", "hidden_norm", "layers.0.")),
         ("--outtype", "auto")),
    ]


@pytest.fixture(scope="module")
def mainline(tmp_path_factory):
    """Each case converted by the vendored mainline converter (``prequant_ckpt.mainline_refs``)."""
    tmp = tmp_path_factory.mktemp("prequant")
    return mainline_refs(tmp, _cases(tmp))


# case -> (general.file_type, tensor types) mainline writes: ``auto`` is guessed from the first stored
# BF16/F16 tensor of 2+ dims before dequantization (a BF16 scale counts), F16 when there is none
EXPECTED = {
    "fp8-auto": (1, {"F16": 15, "F32": 10}),
    "fp8-bf16": (32, {"BF16": 15, "F32": 10}),
    "fp8-f32": (0, {"F32": 25}),
    "fp8-q8": (1, {"Q8_0": 15, "F32": 10}),
    "fp8-q8_0": (7, {"Q8_0": 15, "F32": 10}),
    "kept-auto": (32, {"BF16": 15, "F32": 10}),
    "kept-f32-q8": (0, {"Q8_0": 14, "F32": 11}),  # fc.weight was BF16, not FP8: the outtype
    "ct-auto": (32, {"BF16": 15, "F32": 10}),  # the BF16 [rows, 1] channel scales decide auto
    "ct-q8": (32, {"Q8_0": 15, "F32": 10}),
    "ct-block-auto": (32, {"BF16": 15, "F32": 10}),
    "narrow-q8": (32, {"Q8_0": 13, "F16": 2, "F32": 10}),  # ffn_down rows of 240: F16, mainline's fallback
    "sharded-auto": (1, {"F16": 15, "F32": 10}),  # shard 1's F16 matrix comes before shard 2's BF16 fc
    "plain-sharded": (32, {"BF16": 15, "F32": 10}),
    # written by the compressed-tensors package: BF16 scales, so auto is BF16
    "ctpkg-channel-auto": (32, {"BF16": 15, "F32": 10}),
    "ctpkg-channel-q8": (1, {"Q8_0": 15, "F32": 10}),
    "ctpkg-block-auto": (32, {"BF16": 15, "F32": 10}),
    "ctpkg-block-f32": (0, {"F32": 25}),
    # pack-quantized: the dequantized weights come after every stored tensor (mainline's new_tensors)
    "ctpkg-w4-auto": (32, {"BF16": 15, "F32": 10}),
    "ctpkg-w4-asym-f16": (1, {"F16": 15, "F32": 10}),
    "ctpkg-w8-f32": (0, {"F32": 25}),
    "ctpkg-w4-sharded": (32, {"BF16": 15, "F32": 10}),
}
CASE_IDS = list(EXPECTED)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASE_IDS)
def test_matches_llama_cpp_converter_byte_for_byte(mainline, cli, tmp_path, case):
    if case not in mainline[0]:
        pytest.skip("needs the 'compressed-tensors' package to write the checkpoint")
    ours, types = assert_converts_like_mainline(cli, tmp_path, mainline, case)
    assert types == EXPECTED[case]


@pytest.mark.parametrize("fault", ["orphan scale", "int scale"])
def test_a_scale_without_its_weight_or_of_a_wrong_dtype_is_refused(tmp_path, cli, fault):
    d = fp8_block(tmp_path / "a")
    state = safetensors_torch.load_file(str(d / "model.safetensors"))
    if fault == "orphan scale":
        state["layers.0.mlp.nope.weight_scale_inv"] = torch.ones(2, 2)
    else:
        state["fc.weight_scale_inv"] = state["fc.weight_scale_inv"].to(torch.int8)
    safetensors_torch.save_file(state, str(d / "model.safetensors"))
    code, _, se = cli("convert", d, "--format", "lucebox", "-o", tmp_path / "x.gguf")
    assert code == WeightsError.exit_code and "Traceback" not in se and not (tmp_path / "x.gguf").exists()
    assert ("has no weight layers.0.mlp.nope.weight" in se) if fault == "orphan scale" else ("I8" in se), se


@pytest.mark.parametrize("scale", ["block-f32", "block-e8m0", "per-row", "per-row-1d", "scalar"])
def test_dequantizing_rows_at_a_time_gives_the_same_floats(tmp_path, scale):
    """convert writes a dequantized weight a block of rows at a time (memory: one chunk's float32):
    every chunking gives the whole tensor's dequantize bit for bit, partial blocks included."""
    from dflash_gguf.convert.prequant import iter_dequantize

    g = torch.Generator().manual_seed(0)
    scales = {"block-f32": (torch.rand(8, 3, generator=g) + 0.5, (128, 128)),
              "block-e8m0": (torch.randint(118, 125, (8, 3), generator=g, dtype=torch.uint8).view(torch.float8_e8m0fnu),
                             (128, 128)),
              "per-row": (torch.rand(1000, 1, generator=g), None), "per-row-1d": (torch.rand(1000, generator=g), None),
              "scalar": (torch.tensor(0.5), None)}
    s, block = scales[scale]
    safetensors_torch.save_file({"w": torch.randn(1000, 300, generator=g).to(torch.float8_e4m3fn), "s": s},
                                str(tmp_path / "model.safetensors"))
    inv = {t.name: t for t in read_inventory(tmp_path)}
    d = Dequant(inv["s"], block, True)
    whole = dequantize(inv["w"], d)
    for chunk_bytes in (1 << 10, 50_000, 1 << 24):
        parts = list(iter_dequantize(inv["w"], d, chunk_bytes=chunk_bytes))
        assert len(parts) > 1 or chunk_bytes == 1 << 24
        got = np.concatenate(parts)
        assert got.view(np.uint32).tobytes() == whole.view(np.uint32).tobytes(), chunk_bytes
