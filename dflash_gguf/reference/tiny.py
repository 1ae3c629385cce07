"""Tiny random checkpoints (HF layout: config.json + model.safetensors) for tests and benches.

Random weights alone give a drafter that never agrees with its target, which leaves the
acceptance paths untested. ``shared`` adds one common direction to every embedding row: the
larger it is, the more the target's and the drafter's predictions lean to the same few tokens,
so a value in between gives a realistic mix of accepted and rejected drafts.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..config import parse_config, load_target_config
from .drafter import DFlashDrafter
from .dspark import layout_from_config
from .target import Target, TargetSpec


def target_config(arch: str = "qwen3", *, hidden: int = 64, layers: int = 4, heads: int = 4, kv_heads: int = 2,
                  head_dim: int = 16, intermediate: int = 128, vocab: int = 64, rope_theta: float = 10000.0,
                  tie: bool = True, rope_scaling: dict | None = None, max_positions: int = 4096) -> dict:
    cfg = {
        "architectures": ["Qwen3ForCausalLM" if arch == "qwen3" else "LlamaForCausalLM"],
        "model_type": arch,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": intermediate,
        "vocab_size": vocab,
        "rms_norm_eps": 1e-6,
        "rope_theta": rope_theta,
        "max_position_embeddings": max_positions,
        "hidden_act": "silu",
        "tie_word_embeddings": tie,
        "attention_bias": False,
    }
    if rope_scaling is not None:
        cfg["rope_scaling"] = rope_scaling
    return cfg


def drafter_config(target: dict, *, layers: int = 2, block_size: int = 4, taps: tuple[int, ...] | None = None,
                   mask_token_id: int | None = None, layer_types: list[str] | None = None,
                   sliding_window: int | None = None, is_causal: bool | None = None, dflash2: bool = False,
                   rope_theta: float = 1_000_000.0, softcap: float | None = None,
                   output_multiplier: float | None = None, input_embedding_scale: float | None = None,
                   dflash_extra: dict | None = None, extra: dict | None = None) -> dict:
    """A drafter config.json; ``dflash_extra`` is merged into ``dflash_config`` and ``extra`` into
    the top level (MiMo's knobs, a DSpark architecture and its head sizes, …)."""
    n_target = target["num_hidden_layers"]
    dflash = {
        "mask_token_id": target["vocab_size"] - 1 if mask_token_id is None else mask_token_id,
        "target_layer_ids": list(taps) if taps is not None else [0, n_target - 1],
        "block_size": block_size,
    }
    for key, value in (("final_logit_softcapping", softcap), ("output_multiplier", output_multiplier),
                       ("input_embedding_scale", input_embedding_scale)):
        if value is not None:
            dflash[key] = value
    if dflash2:
        dflash.update(conv_kernel_size=2, conv_group_size=16, selector_rank=32, selector_top_k=4)
    cfg = {
        "architectures": ["DFlash2DraftModel" if dflash2 else "DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": target["hidden_size"],
        "num_hidden_layers": layers,
        "num_attention_heads": target["num_attention_heads"],
        "num_key_value_heads": target["num_key_value_heads"],
        "head_dim": target["head_dim"],
        "intermediate_size": target["intermediate_size"],
        "vocab_size": target["vocab_size"],
        "rms_norm_eps": 1e-6,
        "rope_theta": rope_theta,
        "max_position_embeddings": target["max_position_embeddings"],
        "num_target_layers": n_target,
        "hidden_act": "silu",
        "attention_bias": False,
        "tie_word_embeddings": False,
        "dflash_config": dflash,
    }
    if layer_types is not None:
        cfg["layer_types"] = layer_types
    if sliding_window is not None:
        cfg["sliding_window"] = sliding_window
        cfg["use_sliding_window"] = True
    if is_causal is not None:
        cfg["is_causal"] = is_causal
    dflash.update(dflash_extra or {})
    cfg.update(extra or {})
    return cfg


def randomize_(module: torch.nn.Module, seed: int, shared: float = 0.0, residual: float = 1.0) -> None:
    """Scaled-normal weights; norm gains near 1; embeddings unit-normal plus ``shared`` × one
    common row; ``residual`` scales what each sublayer adds to the residual stream (o_proj,
    down_proj), i.e. how far a model's output can move from its input embedding."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g) + shared * torch.randn(p.shape[-1], generator=g))
            elif "base_kernel" in name or "codebook" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                gain = residual if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
                p.copy_(gain * torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))


def save_target(path: str | Path, config: dict, *, seed: int = 0, shared: float = 0.0, residual: float = 1.0) -> Path:
    """Write a random target to ``path`` (created) and return it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=1))
    model = Target(TargetSpec.from_config(load_target_config(path)))
    randomize_(model, seed, shared, residual)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if config.get("tie_word_embeddings"):
        state.pop("lm_head.weight")
    save_file(state, str(path / "model.safetensors"))
    return path


def save_drafter(path: str | Path, config: dict, *, seed: int = 1, residual: float = 1.0, own_embed: bool = False,
                 draft_ids: list[int] | None = None) -> Path:
    """Write a random drafter. DSpark: ``own_embed`` ships an ``embed_tokens`` table, and a reduced
    head (``draft_vocab_size`` < ``vocab_size``) maps its ids to ``draft_ids`` (default: the even
    target ids, then the odd ones) through checkpoint-style ``d2t`` offsets and a ``t2d`` mask."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=1))
    cfg = parse_config(config, path / "config.json")
    layout = layout_from_config(cfg, own_embed=own_embed) if cfg.dspark is not None else None
    model = DFlashDrafter(cfg, layout)
    randomize_(model, seed, residual=residual)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if layout is not None and layout.reduced:
        spread = [*range(0, cfg.vocab_size, 2), *range(1, cfg.vocab_size, 2)][:layout.draft_vocab]
        ids = torch.tensor(draft_ids if draft_ids is not None else spread)
        state["d2t"] = ids - torch.arange(ids.numel())
        state["t2d"] = torch.zeros(cfg.vocab_size, dtype=torch.bool).index_fill(0, ids, True)
    save_file(state, str(path / "model.safetensors"))
    return path
