"""Pre-quantized test checkpoints built from the qwen3-flat fixture drafter: DeepSeek-style
block-scaled FP8 and compressed-tensors FP8 as their producers store them, written with
safetensors (torch for the FP8 dtype)."""
from __future__ import annotations

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


def fp8_block(dst: Path, *, block=(48, 48), scale_dtype=None, keep=(), act_scales=True, intermediate=None) -> Path:
    """qwen3-flat with its 2-D weights as block-scaled F8_E4M3 (``W_scale_inv``) but those in ``keep``;
    48 divides none of 32, 64, 256, so every edge block is partial. ``intermediate``: the MLP cut
    to that width (240: ffn_down rows that are not whole Q8_0 blocks)."""
    state = safetensors_torch.load_file(str(SOURCE / "model.safetensors"))
    if intermediate:
        state = {n: (w[:, :intermediate] if "down_proj" in n else w[:intermediate]) if ".mlp." in n else w
                 for n, w in state.items()}
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
