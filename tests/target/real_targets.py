"""The published drafters' targets, and a fixture drafter made to fit one (``real_drafter``).

The targets: their ``config.json`` as the model repos ship them (the keys
llama.cpp's converter and ours read, with the repos' values), the real vocabulary each uses
(a key of ``real_vocab.VOCABS``) and the drafter's mask token id.

Values are the public configs of Qwen/Qwen3-8B, Qwen/Qwen3.5-27B, google/gemma-4-31B-it and
meta-llama/Llama-3.1-8B-Instruct (vision towers cut to what a text conversion reads).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from tests.conftest import DRAFTERS


class Target(NamedTuple):
    vocab: str
    config: dict
    mask_token_id: int  # the drafter's dflash_config.mask_token_id


QWEN3_8B = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 12288, "max_position_embeddings": 40960,
    "max_window_layers": 36, "model_type": "qwen3", "num_attention_heads": 32, "num_hidden_layers": 36,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}

QWEN35_27B = {
    "architectures": ["Qwen3_5ForConditionalGeneration"], "eos_token_id": 248046, "image_token_id": 248056,
    "model_type": "qwen3_5", "pad_token_id": 248044,
    "text_config": {
        "attention_bias": False, "attention_dropout": 0.0, "attn_output_gate": True, "bos_token_id": None,
        "eos_token_id": 248044, "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu",
        "hidden_size": 5120, "initializer_range": 0.02, "intermediate_size": 17408,
        "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 16,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
        "linear_num_value_heads": 48, "linear_value_head_dim": 128, "mamba_ssm_dtype": "float32",
        "max_position_embeddings": 262144, "mlp_only_layers": [], "model_type": "qwen3_5_text",
        "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False, "num_attention_heads": 24,
        "num_hidden_layers": 64, "num_key_value_heads": 4, "pad_token_id": None, "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10], "partial_rotary_factor": 0.25,
                            "rope_theta": 10000000, "rope_type": "default"},
        "tie_word_embeddings": False, "use_cache": True, "vocab_size": 248320,
    },
    "tie_word_embeddings": False, "use_cache": True, "video_token_id": 248057,
    "vision_config": {"deepstack_visual_indexes": [], "depth": 27, "hidden_act": "gelu_pytorch_tanh",
                      "hidden_size": 1152, "in_channels": 3, "intermediate_size": 4304, "model_type": "qwen3_5",
                      "num_heads": 16, "num_position_embeddings": 2304, "out_hidden_size": 5120, "patch_size": 16,
                      "spatial_merge_size": 2, "temporal_patch_size": 2},
    "vision_end_token_id": 248054, "vision_start_token_id": 248053,
}

GEMMA4_31B_IT = {
    "architectures": ["Gemma4ForConditionalGeneration"], "audio_config": None, "audio_token_id": 258881,
    "boa_token_id": 256000, "boi_token_id": 255999, "dtype": "bfloat16", "eoa_token_id": 258883,
    "eoa_token_index": 258883, "eoi_token_id": 258882, "eos_token_id": [1, 106], "image_token_id": 258880,
    "initializer_range": 0.02, "model_type": "gemma4",
    "text_config": {
        "attention_bias": False, "attention_dropout": 0.0, "attention_k_eq_v": True, "bos_token_id": 2,
        "dtype": "bfloat16", "enable_moe_block": False, "eos_token_id": 1, "expert_intermediate_size": None,
        "final_logit_softcapping": 30.0, "global_head_dim": 512, "head_dim": 256,
        "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 5376, "hidden_size_per_layer_input": 0,
        "initializer_range": 0.02, "intermediate_size": 21504,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 10,
        "max_position_embeddings": 262144, "model_type": "gemma4_text", "moe_intermediate_size": None,
        "num_attention_heads": 32, "num_experts": None, "num_global_key_value_heads": 4, "num_hidden_layers": 60,
        "num_key_value_heads": 16, "num_kv_shared_layers": 0, "pad_token_id": 0, "rms_norm_eps": 1e-06,
        "rope_parameters": {
            "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
            "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}},
        "sliding_window": 1024, "tie_word_embeddings": True, "top_k_experts": None,
        "use_bidirectional_attention": "vision", "use_cache": True, "use_double_wide_mlp": False,
        "vocab_size": 262144, "vocab_size_per_layer_input": 262144,
    },
    "tie_word_embeddings": True, "transformers_version": "5.5.0.dev0", "video_token_id": 258884,
    "vision_config": {"hidden_size": 1152, "intermediate_size": 4304, "model_type": "gemma4_vision",
                      "num_attention_heads": 16, "num_hidden_layers": 27, "num_key_value_heads": 16,
                      "patch_size": 16, "rms_norm_eps": 1e-06},
    "vision_soft_tokens_per_image": 280,
}

LLAMA31_8B_INSTRUCT = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": False,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 128256,
}

# Mask ids: the first id past the tokenizer's own tokens for Qwen (as z-lab's Qwen drafters
# use), Gemma's own <mask>, and Llama 3's first reserved special token.
TARGETS = {
    "Qwen3-8B": Target("qwen2", QWEN3_8B, 151669),
    "Qwen3.5-27B": Target("qwen35", QWEN35_27B, 248077),
    "gemma-4-31B-it": Target("gemma-4", GEMMA4_31B_IT, 4),
    "Llama-3.1-8B-Instruct": Target("llama-bpe", LLAMA31_8B_INSTRUCT, 128002),
}


def real_drafter(target_config: dict, mask_token_id: int, dest: Path, src: Path = DRAFTERS / "qwen3-flat") -> Path:
    """A copy of fixture drafter ``src`` made to fit the target: the target's ``vocab_size``
    (llama.cpp pads the vocabulary to the drafter's), ``mask_token_id``, taps inside the
    target's depth, and an ``fc`` of n_taps x the target's hidden size (zeros)."""
    from dflash_gguf.fileio.safetensors import read_inventory, read_raw

    text = {**target_config, **(target_config.get("text_config") or {})}
    hidden, depth = int(text["hidden_size"]), int(text["num_hidden_layers"])
    cfg = json.loads((src / "config.json").read_text())
    taps = list(cfg["dflash_config"]["target_layer_ids"])
    cfg.update(vocab_size=int(text["vocab_size"]), num_target_layers=depth, target_hidden_size=hidden)
    cfg["dflash_config"] = {**cfg["dflash_config"], "mask_token_id": mask_token_id,
                            "target_layer_ids": [1 + i * (depth - 3) // len(taps) for i in range(len(taps))]}
    dest.mkdir(parents=True, exist_ok=False)
    (dest / "config.json").write_text(json.dumps(cfg, indent=2))
    tensors = {}
    for t in read_inventory(src):
        shape, data = list(t.shape), read_raw(t).tobytes()
        if t.name == "fc.weight":
            shape = [shape[0], len(taps) * hidden]
            data = bytes(shape[0] * shape[1] * 2 if t.dtype in ("BF16", "F16") else shape[0] * shape[1] * 4)
        tensors[t.name] = (t.dtype, shape, data)
    _write_safetensors(dest / "model.safetensors", tensors)
    return dest


def _write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], bytes]]) -> None:
    """The safetensors layout: u64 header length, JSON header (space-padded to 8 bytes), data."""
    header, at = {}, 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(data)]}
        at += len(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little") + head)
        for _, _, data in tensors.values():
            f.write(data)
