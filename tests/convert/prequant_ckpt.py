"""Pre-quantized test checkpoints built from the qwen3-flat fixture drafter: DeepSeek-style
block-scaled FP8 and compressed-tensors FP8 as their producers store them, written with
safetensors (torch for the FP8 dtype); ``ct_package``: compressed by the compressed-tensors
package itself (FP8 and pack-quantized), imported only there."""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import torch
from safetensors import torch as safetensors_torch

from tests.conftest import DRAFTERS

SOURCE = DRAFTERS / "qwen3-flat"  # 2-D weights of 32, 64 and 256 rows/columns
E4M3_MAX = 448.0


def quantize_blocks(w: "torch.Tensor", block: tuple[int, int]) -> tuple["torch.Tensor", "torch.Tensor"]:
    """DeepSeek's FP8 recipe: one scale per block (amax / 448), the weight divided by it; blocks
    at the edges are partial (dims need not be multiples of the block)."""
    rows, cols = w.shape
    nb0, nb1 = -(-rows // block[0]), -(-cols // block[1])
    pad = torch.zeros(nb0 * block[0], nb1 * block[1])
    pad[:rows, :cols] = w
    amax = pad.reshape(nb0, block[0], nb1, block[1]).abs().amax(dim=(1, 3)).clamp(min=1e-8)
    scale = amax / E4M3_MAX
    full = scale.repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)[:rows, :cols]
    return (w / full).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), scale


def quantize_channels(w: "torch.Tensor") -> tuple["torch.Tensor", "torch.Tensor"]:
    scale = (w.abs().amax(dim=1, keepdim=True) / E4M3_MAX).clamp(min=1e-8)
    return (w / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), scale


def write_checkpoint(dst: Path, tensors: dict, quantization_config: dict | None, **config) -> Path:
    dst.mkdir(parents=True)
    cfg = {**json.loads((SOURCE / "config.json").read_text()), **config}
    if quantization_config is not None:
        cfg["quantization_config"] = quantization_config
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    safetensors_torch.save_file({n: t.contiguous() for n, t in tensors.items()}, str(dst / "model.safetensors"))
    return dst


def source_state(intermediate: int | None = None) -> dict:
    """The qwen3-flat fixture's tensors, the MLP cut to width ``intermediate`` when given."""
    state = safetensors_torch.load_file(str(SOURCE / "model.safetensors"))
    if intermediate:
        state = {n: (w[:, :intermediate] if "down_proj" in n else w[:intermediate]) if ".mlp." in n else w
                 for n, w in state.items()}
    return state


def fp8_block(dst: Path, *, block=(48, 48), scale_dtype=None, keep=(), act_scales=True, intermediate=None) -> Path:
    """qwen3-flat with its 2-D weights as block-scaled F8_E4M3 (``W_scale_inv``) but those in ``keep``;
    48 divides none of 32, 64, 256, so every edge block is partial. ``intermediate``: the MLP cut
    to that width (240: ffn_down rows that are not whole Q8_0 blocks)."""
    state = source_state(intermediate)
    out = {}
    for n, w in state.items():
        if w.ndim == 2 and n not in keep:
            q, s = quantize_blocks(w.float(), block)
            out[n], out[n + "_scale_inv"] = q, s.to(scale_dtype or torch.float32)
        else:
            out[n] = w
    if act_scales:  # unused by the converter (both spellings mainline drops)
        out["layers.0.self_attn.q_proj.activation_scale"] = torch.tensor([0.25])
        out["layers.1.self_attn.o_proj.input_activation_scale"] = torch.tensor([0.5])
    return write_checkpoint(dst, out, {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                       "weight_block_size": list(block)},
                            **({"intermediate_size": intermediate} if intermediate else {}))


def ct_config(strategy: str, block=None) -> dict:
    weights = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False, "strategy": strategy,
               "group_size": None, "block_structure": block, "observer": "minmax"}
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": None,
                                          "output_activations": None, "format": "float-quantized"}},
            "ignore": ["lm_head"]}


def ct_fp8(dst: Path, strategy="channel", block=None) -> Path:
    """compressed-tensors ``float-quantized`` FP8 as its compressor stores it (``W_scale``,
    BF16 scales), written with safetensors."""
    state = safetensors_torch.load_file(str(SOURCE / "model.safetensors"))
    out = {}
    for n, w in state.items():
        if w.ndim == 2:
            q, s = quantize_channels(w.float()) if strategy == "channel" else quantize_blocks(w.float(), tuple(block))
            out[n], out[n.removesuffix("weight") + "weight_scale"] = q, s.to(torch.bfloat16)
        else:
            out[n] = w
    return write_checkpoint(dst, out, ct_config(strategy, block))


def shard(src: Path, dst: Path, second: tuple[str, ...]) -> Path:
    """``src``'s single weights file split in two shards with an index, the tensors whose names
    start with ``second`` in the second one."""
    state = safetensors_torch.load_file(str(src / "model.safetensors"))
    dst.mkdir(parents=True)
    shutil.copy(src / "config.json", dst / "config.json")
    files = {"model-00001-of-00002.safetensors": {n: t for n, t in state.items() if not n.startswith(second)},
             "model-00002-of-00002.safetensors": {n: t for n, t in state.items() if n.startswith(second)}}
    for f, part in files.items():
        safetensors_torch.save_file(part, str(dst / f))
    weight_map = {n: f for f, part in files.items() for n in part}
    (dst / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return dst


def sharded_fp8(dst: Path) -> Path:
    """FP8 block-scaled, in two shards whose order disagrees with the names' order: shard 1 holds
    a matrix left in F16, shard 2 ``fc.weight`` left in BF16 (first by name). Mainline reads shard
    by shard, so its ``auto`` guess is F16 (and its tensor order is the shards')."""
    src = fp8_block(dst.parent / (dst.name + "-single"), keep=("fc.weight", "layers.1.mlp.up_proj.weight"),
                    act_scales=False)
    state = safetensors_torch.load_file(str(src / "model.safetensors"))
    state["layers.1.mlp.up_proj.weight"] = state["layers.1.mlp.up_proj.weight"].to(torch.float16)
    safetensors_torch.save_file(state, str(src / "model.safetensors"))
    return shard(src, dst, ("fc.", "hidden_norm", "norm", "layers.0."))


def _module_tree(state: dict) -> "torch.nn.Module":
    """A torch module tree holding ``state`` under its own names: each 2-D ``*.weight`` in a
    bias-free ``nn.Linear`` (what a compressed-tensors scheme targets), the rest plain parameters."""
    root = torch.nn.Module()
    for n, t in state.items():
        *path, leaf = n.split(".")
        m = root
        for i, p in enumerate(path):
            if not hasattr(m, p):
                linear = i == len(path) - 1 and leaf == "weight" and t.ndim == 2
                m.add_module(p, torch.nn.Linear(t.shape[1], t.shape[0], bias=False, dtype=t.dtype) if linear
                             else torch.nn.Module())
            m = getattr(m, p)
        if isinstance(m, torch.nn.Linear):
            m.weight.data.copy_(t)
        else:
            m.register_parameter(leaf, torch.nn.Parameter(t.clone(), requires_grad=False))
    return root


def _observe(m: "torch.nn.Linear") -> None:
    """The weight's scale (and zero point) as a min-max observer computes them, through the
    package's own ``calculate_qparams`` (the package ships no observers: llm-compressor's job)."""
    from compressed_tensors.quantization.utils import calculate_qparams, maybe_pad_tensor_for_block_quant

    a = m.quantization_scheme.weights
    w = m.weight.data.float()
    if a.strategy == "channel":
        lo, hi = w.amin(1, keepdim=True), w.amax(1, keepdim=True)
    elif a.strategy == "block":
        b0, b1 = a.block_structure
        p = maybe_pad_tensor_for_block_quant(w, tuple(a.block_structure))
        r = p.reshape(p.shape[0] // b0, b0, p.shape[1] // b1, b1)
        lo, hi = r.amin((1, 3)), r.amax((1, 3))
    elif a.strategy == "group":
        r = w.reshape(w.shape[0], -1, a.group_size)
        lo, hi = r.amin(-1), r.amax(-1)
    else:
        raise ValueError(f"no observer here for strategy {a.strategy}")
    scale, zero_point = calculate_qparams(lo, hi, a)
    m.weight_scale.data.copy_(scale)
    if hasattr(m, "weight_zero_point"):
        m.weight_zero_point.data.copy_(zero_point)


def ct_package(dst: Path, preset: str, **weights) -> Path:
    """qwen3-flat compressed by the real ``compressed-tensors`` package: its preset scheme
    (``FP8_DYNAMIC``: FP8 channel, ``FP8_BLOCK``: FP8 block, ``W4A16``: int4 group, packed) on every
    Linear, ``weights`` overriding the scheme's weight args (``block_structure``, ``group_size``),
    scales observed min-max, ``ModelCompressor.compress_model``, the compressed state dict saved
    with safetensors and config.json's ``quantization_config`` written by ``update_config``."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config, preset_name_to_scheme

    model = _module_tree(safetensors_torch.load_file(str(SOURCE / "model.safetensors")))
    scheme = preset_name_to_scheme(preset, ["Linear"])
    scheme.weights = scheme.weights.model_copy(update=weights)
    apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": scheme}), show_progress=False)
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            _observe(m)
    compressor = ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    write_checkpoint(dst, dict(model.state_dict()), None)
    compressor.update_config(str(dst))
    return dst


# --- BitNet: ternary codes four to a byte (convert/prequant_bitnet.py) ---------------------------------

BITNET = {"quant_method": "bitnet", "linear_class": "autobitlinear", "quantization_mode": "offline"}


def pack_ternary(w: "torch.Tensor", scale_dtype=torch.float32) -> tuple["torch.Tensor", "torch.Tensor"]:
    """BitNet b1.58's offline packing: codes round(w × s) clipped to {-1, 0, 1}, s = 1 / mean|w|
    (the stored, inverted scale), code + 1 in 2 bits; row ``k * rows/4 + i`` in bits 2k of byte row i."""
    s = 1.0 / w.abs().mean().clamp(min=1e-5)
    q = (w * s).round().clamp(-1, 1).to(torch.int32) + 1  # 0, 1, 2
    r4 = w.shape[0] // 4
    packed = torch.zeros((r4, *w.shape[1:]), dtype=torch.int32)
    for k in range(4):
        packed |= q[k * r4:(k + 1) * r4] << (2 * k)
    return packed.to(torch.uint8), s.reshape(1).to(scale_dtype)


def bitnet(dst: Path, *, keep=(), scale_dtype=torch.float32) -> Path:
    """qwen3-flat with its 2-D weights BitNet-packed (U8 ``X.weight`` + ``X.weight_scale``) but those in ``keep``."""
    state = safetensors_torch.load_file(str(SOURCE / "model.safetensors"))
    out = {}
    for n, w in state.items():
        if w.ndim == 2 and n not in keep:
            out[n], out[n + "_scale"] = pack_ternary(w.float(), scale_dtype)
        else:
            out[n] = w
    return write_checkpoint(dst, out, BITNET)


# --- against the vendored converter ------------------------------------------------------------

def mainline_refs(tmp: Path, cases: list[tuple[str, Path, tuple[str, ...]]]):
    """Each case (name, checkpoint dir, convert args) converted by the vendored mainline converter
    (one process, a fork per job) against one SentencePiece target: ({name: (dir, args, ref GGUF,
    exit code, log tail)}, target dir)."""
    from tests.convert.test_llamacpp_ground_truth import llama_src, spm_target
    from tests.llamacpp_converter import ConverterRun, log_tail, run_jobs

    src = llama_src()
    target = spm_target(tmp, json.loads((SOURCE / "config.json").read_text())["num_target_layers"])
    runs = [ConverterRun((str(d), "--target-model-dir", str(target), "--outfile", str(tmp / f"{k}.ref.gguf"), *args),
                         tmp / f"{k}.log") for k, d, args in cases]
    codes = run_jobs(runs, src, parallel=2)
    return {k: (d, args, tmp / f"{k}.ref.gguf", code, log_tail(run)) for (k, d, args), run, code
            in zip(cases, runs, codes)}, target


def assert_converts_like_mainline(cli, tmp_path: Path, mainline, case: str,
                                  load: bool = False) -> tuple[Path, tuple[int, dict[str, int]]]:
    """Our convert of ``case`` against mainline's: every key, every tensor's type and bytes (in
    mainline's order, but for a llama-quantize outtype, laid out in llama-quantize's order:
    convert/outtypes.py); with ``load``, real llama.cpp loads ours (where llama-cpp-python is
    installed). Returns (our file, (general.file_type, tensor count per type))."""
    from gguf import GGUFReader

    from tests.convert.llamacpp_reference import assert_same_summary, gguf_summary

    refs, target = mainline
    d, args, ref, code, log = refs[case]
    assert code == 0, log
    ours = tmp_path / "ours.gguf"
    c, _, se = cli("convert", d, "--target-dir", target, "-o", ours, *args)
    assert c == 0, se
    assert_same_summary(gguf_summary(ours), gguf_summary(ref))
    a, b = GGUFReader(ours), GGUFReader(ref)
    if "q8_0" not in args:
        assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
    theirs = {t.name: t for t in b.tensors}
    assert sorted(theirs) == sorted(t.name for t in a.tensors)
    for x in a.tensors:
        y = theirs[x.name]
        assert (x.tensor_type, bytes(x.data.tobytes())) == (y.tensor_type, bytes(y.data.tobytes())), x.name
    types: dict[str, int] = {}
    for t in a.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    if load and importlib.util.find_spec("llama_cpp") is not None:
        from tests.convert.llamacpp_reference import llama_load

        assert llama_load(ours) == "LOADED"
    return ours, (a.fields["general.file_type"].contents(), types)
