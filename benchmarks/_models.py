"""Synthetic drafters for the benchmarks: Qwen3-8B-DFlash tensor shapes and config, and a
streaming bf16 safetensors writer (bench_convert.py, bench_compare.py, bench_quantize_cli.py).

The writer streams tensor by tensor: safetensors' own writers need the whole dict in memory, and
its numpy API has no bf16. The format is a JSON header + raw bytes. What the values are is each
benchmark's choice (``pieces``): a copy benchmark needs only plausible bytes, the quantize one
wants per-row scale variety for realistic K-quant fits.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

# {safetensors name: (shape, is_matrix)}: matrices get weight-like values, the rest norm-like ones
Tensors = dict[str, tuple[tuple[int, ...], bool]]
# (rng, shape, is_matrix) -> float32 pieces whose concatenation is the tensor, row-major
Pieces = Callable[[np.random.Generator, tuple[int, ...], bool], Iterator[np.ndarray]]


# The synthetic drafter's shape flags, Qwen3-8B-DFlash's by default (the benchmarks that make one
# take them, and hand them to the child process that writes it)
SHAPE_FLAGS = (("layers", 2), ("hidden", 4096), ("intermediate", 12288), ("taps", 5))


def add_shape_flags(ap) -> None:
    for name, default in SHAPE_FLAGS:
        ap.add_argument(f"--{name}", type=int, default=default)


def shape_argv(args) -> list[str]:
    """The shape flags as parsed into ``args``, as a command line again."""
    return [s for name, _ in SHAPE_FLAGS for s in (f"--{name}", str(getattr(args, name)))]


def qwen3_dflash_tensors(layers: int, H: int, I: int, taps: int, heads: int = 32, kv: int = 8,
                         hd: int = 128) -> Tensors:
    """A Qwen3 DFlash drafter's tensors (z-lab's names): fc over ``taps`` target layers, then
    ``layers`` decoder layers."""
    t = {"fc.weight": ((H, taps * H), True), "hidden_norm.weight": ((H,), False), "norm.weight": ((H,), False)}
    for i in range(layers):
        p = f"layers.{i}."
        t.update({p + "input_layernorm.weight": ((H,), False), p + "post_attention_layernorm.weight": ((H,), False),
                  p + "self_attn.q_proj.weight": ((heads * hd, H), True),
                  p + "self_attn.k_proj.weight": ((kv * hd, H), True),
                  p + "self_attn.v_proj.weight": ((kv * hd, H), True),
                  p + "self_attn.o_proj.weight": ((H, heads * hd), True),
                  p + "self_attn.q_norm.weight": ((hd,), False), p + "self_attn.k_norm.weight": ((hd,), False),
                  p + "mlp.gate_proj.weight": ((I, H), True), p + "mlp.up_proj.weight": ((I, H), True),
                  p + "mlp.down_proj.weight": ((H, I), True)})
    return t


def qwen3_dflash_config(layers: int, H: int, I: int, taps: int, vocab: int, mask_token_id: int, heads: int = 32,
                        kv: int = 8, hd: int = 128) -> dict:
    """The matching config.json."""
    return {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": H, "intermediate_size": I,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
            "rms_norm_eps": 1e-6, "rope_theta": 1e6, "max_position_embeddings": 40960, "vocab_size": vocab,
            "block_size": 16, "num_target_layers": 36,
            "dflash_config": {"mask_token_id": mask_token_id, "target_layer_ids": [1, 9, 17, 25, 33][:taps]}}


def write_bf16_safetensors(path: Path, tensors: Tensors, pieces: Pieces, *, seed: int = 0,
                           round_half_even: bool = True) -> int:
    """Write ``tensors`` (sorted by name, as safetensors stores them) as bf16, one piece in memory
    at a time; returns the data section's size. ``round_half_even``: bf16 by round-to-nearest-even
    (as torch does); False rounds halves up (the older, cheaper formula some benchmarks keep)."""
    header, offset = {}, 0
    for name, (shape, _) in sorted(tensors.items()):
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for name, (shape, matrix) in sorted(tensors.items()):
            for x in pieces(rng, shape, matrix):
                u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
                bias = (np.uint32(0x7FFF) + ((u >> 16) & 1)) if round_half_even else np.uint32(0x8000)
                f.write(((u + bias) >> 16).astype("<u2").tobytes())
    return offset
