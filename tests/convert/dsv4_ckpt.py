"""DeepSeek-V4 checkpoints with a DSpark draft (``mtp.*`` stages), as DeepSeek ships them.

``dsv4_dspark_table(config)`` is the draft's tensor table (name, safetensors dtype, shape), read
from DeepSeek's own code, never from dflash_gguf:

* block layout: DeepSeek-V4's ``inference/model.py`` (``Attention``: wq_a [q_lora, H], q_norm,
  wq_b [heads*head_dim, q_lora], wkv [head_dim, H], kv_norm, wo_a [groups*o_lora,
  heads*head_dim/groups], wo_b [H, groups*o_lora], attn_sink [heads] F32; ``MoE``: gate
  [experts, H] + bias F32, routed experts w1/w3 [I, H] and w2 [H, I], shared experts likewise;
  ``Block``: hc_attn/hc_ffn fn [(2+hc)*hc, hc*H], base [(2+hc)*hc], scale [3], all F32);
* storage: the checkpoint's ``quantization_config`` (FP8 E4M3, 128x128 blocks, E8M0 scales
  ``<name>.scale``) for the linear layers, ``expert_dtype: fp4`` for the routed experts (two
  E2M1 codes per I8 byte, one E8M0 scale per 32 values), BF16 norms, gate and heads;
* the draft's own tensors: ``mtp.0.main_proj`` [H, taps*H] (FP8) + ``main_norm`` on the first
  stage; ``hc_head_fn/base/scale``, ``norm``, ``markov_head.markov_w1/w2`` [V, r] and
  ``confidence_head.proj`` [1, H + r] on the last (DeepSpec's heads, as llama.cpp's
  ``llama_model_dflash::load_arch_tensors`` reads them); three stages (the repo's
  ``inference/config.json``: ``n_mtp_layers`` 3).

``write_dsv4_checkpoint`` writes such a checkpoint with real (random, seeded) data at small
sizes: FP8 and E8M0 through torch's float8 dtypes, the FP4 experts as packed bytes.
"""
from __future__ import annotations

import json
from pathlib import Path

STAGES = 3  # deepseek-ai/DeepSeek-V4-Flash-DSpark inference/config.json: n_mtp_layers
FP8_BLOCK = 128


def _fp8(name: str, out_f: int, in_f: int) -> list[tuple[str, str, list[int]]]:
    nb = lambda n: -(-n // FP8_BLOCK)  # noqa: E731
    return [(name + ".weight", "F8_E4M3", [out_f, in_f]), (name + ".scale", "F8_E8M0", [nb(out_f), nb(in_f)])]


def _fp4(name: str, out_f: int, in_f: int) -> list[tuple[str, str, list[int]]]:
    return [(name + ".weight", "I8", [out_f, in_f // 2]), (name + ".scale", "F8_E8M0", [out_f, in_f // 32])]


def dsv4_dspark_table(c: dict, stages: int = STAGES) -> list[tuple[str, str, list[int]]]:
    """Every ``mtp.*`` tensor of a DeepSeek-V4 checkpoint's DSpark draft, sorted by name."""
    H, heads, hd = c["hidden_size"], c["num_attention_heads"], c["head_dim"]
    ql, ol, groups = c["q_lora_rank"], c["o_lora_rank"], c["o_groups"]
    E, inter, shared = c["n_routed_experts"], c["moe_intermediate_size"], c.get("n_shared_experts", 1)
    hc = c["hc_mult"]
    mix = (2 + hc) * hc
    V, r, taps = c["vocab_size"], c["dspark_markov_rank"], len(c["dspark_target_layer_ids"])
    rows: list[tuple[str, str, list[int]]] = []
    for s in range(stages):
        p = f"mtp.{s}."
        rows += _fp8(p + "attn.wq_a", ql, H) + _fp8(p + "attn.wq_b", heads * hd, ql) + _fp8(p + "attn.wkv", hd, H)
        rows += _fp8(p + "attn.wo_a", groups * ol, heads * hd // groups) + _fp8(p + "attn.wo_b", H, groups * ol)
        rows += [(p + "attn.q_norm.weight", "BF16", [ql]), (p + "attn.kv_norm.weight", "BF16", [hd]),
                 (p + "attn.attn_sink", "F32", [heads]), (p + "attn_norm.weight", "BF16", [H]),
                 (p + "ffn_norm.weight", "BF16", [H]), (p + "ffn.gate.weight", "BF16", [E, H]),
                 (p + "ffn.gate.bias", "F32", [E])]
        for e in range(E):
            q = f"{p}ffn.experts.{e}."
            rows += _fp4(q + "w1", inter, H) + _fp4(q + "w2", H, inter) + _fp4(q + "w3", inter, H)
        q = p + "ffn.shared_experts."
        rows += _fp8(q + "w1", inter * shared, H) + _fp8(q + "w2", H, inter * shared) + _fp8(q + "w3", inter * shared, H)
        for site in ("attn", "ffn"):
            rows += [(f"{p}hc_{site}_fn", "F32", [mix, hc * H]), (f"{p}hc_{site}_base", "F32", [mix]),
                     (f"{p}hc_{site}_scale", "F32", [3])]
    rows += _fp8("mtp.0.main_proj", H, taps * H) + [("mtp.0.main_norm.weight", "BF16", [H])]
    last = f"mtp.{stages - 1}."
    rows += [(last + "hc_head_fn", "F32", [hc, hc * H]), (last + "hc_head_base", "F32", [hc]),
             (last + "hc_head_scale", "F32", [1]), (last + "norm.weight", "BF16", [H]),
             (last + "markov_head.markov_w1.weight", "BF16", [V, r]),
             (last + "markov_head.markov_w2.weight", "BF16", [V, r]),
             (last + "confidence_head.proj.weight", "BF16", [1, H + r])]
    return sorted(rows, key=lambda row: row[0])


# A DeepSeek-V4 text block outside the draft: what a whole-model shard holds (names only matter;
# the converter must skip them without reading their data).
MAIN_MODEL = [("embed.weight", "BF16"), ("head.weight", "BF16"), ("norm.weight", "BF16"),
              ("layers.0.attn_norm.weight", "BF16"), ("layers.0.ffn.gate.tid2eid", "I32")]


def tiny_config(**over) -> dict:
    """A DeepSeek-V4 config at test size with a DSpark draft (keys as DeepSeek's config.json)."""
    c = {
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
        "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1,
        "expert_dtype": "fp4", "hc_eps": 1e-06, "hc_mult": 2, "hc_sinkhorn_iters": 20, "head_dim": 64,
        "hidden_act": "silu", "hidden_size": 256, "index_head_dim": 32, "index_n_heads": 4, "index_topk": 16,
        "initializer_range": 0.02, "max_position_embeddings": 4096, "moe_intermediate_size": 64,
        "n_routed_experts": 4, "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 4,
        "num_experts_per_tok": 2, "num_hidden_layers": 4, "num_hash_layers": 1, "num_key_value_heads": 1,
        "num_nextn_predict_layers": 1, "o_groups": 2, "o_lora_rank": 32, "q_lora_rank": 64,
        "qk_rope_head_dim": 16,
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 16, "original_max_position_embeddings": 256,
                         "type": "yarn"},
        "rope_theta": 10000, "routed_scaling_factor": 1.5, "scoring_func": "sqrtsoftplus", "sliding_window": 128,
        "swiglu_limit": 10.0, "tie_word_embeddings": False, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
        "transformers_version": "4.57.1", "use_cache": True, "vocab_size": 129280, "compress_rope_theta": 160000,
        "compress_ratios": [0, 4, 128, 0], "dspark_block_size": 5, "dspark_noise_token_id": 128799,
        "dspark_target_layer_ids": [1, 2, 3], "dspark_markov_rank": 16,
    }
    c.update(over)
    return c


def _data(dtype: str, shape: list[int], gen):
    import torch

    if dtype == "F8_E4M3":
        return (torch.randn(shape, generator=gen) * 0.5).to(torch.float8_e4m3fn)
    if dtype == "F8_E8M0":  # powers of two around 2^-6: biased exponents 118..124
        return torch.randint(118, 125, shape, generator=gen, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    if dtype == "I8":  # two random E2M1 codes per byte
        return torch.randint(-128, 128, shape, generator=gen, dtype=torch.int8)
    if dtype == "I32":
        return torch.randint(0, 4, shape, generator=gen, dtype=torch.int32)
    t = torch.randn(shape, generator=gen) * 0.05
    if shape and shape[-1] == 1 and len(shape) == 1:
        t = t + 1.0
    return t.to({"BF16": torch.bfloat16, "F32": torch.float32}[dtype])


def write_dsv4_checkpoint(dst: Path, config: dict | None = None, *, stages: int = STAGES, seed: int = 0,
                          main_shard: bool = True) -> Path:
    """A DeepSeek-V4 checkpoint dir with a DSpark draft: config.json, the draft in its own shard
    (``model-00002-of-00002.safetensors``), a few main-model tensors in the first shard and the
    ``model.safetensors.index.json`` mapping both, as DeepSeek shards its checkpoints."""
    import torch
    from safetensors.torch import save_file

    c = config or tiny_config()
    dst = Path(dst)
    dst.mkdir(parents=True)
    gen = torch.Generator().manual_seed(seed)
    draft = {n: _data(d, s, gen) for n, d, s in dsv4_dspark_table(c, stages)}
    H, V = c["hidden_size"], c["vocab_size"]
    shapes = {"embed.weight": [V, H], "head.weight": [V, H], "norm.weight": [H], "layers.0.attn_norm.weight": [H],
              "layers.0.ffn.gate.tid2eid": [V, c["num_experts_per_tok"]]}
    main = {n: _data(d, [min(s, 8) for s in shapes[n]], gen) for n, d in MAIN_MODEL} if main_shard else {}
    shards = {}
    if main:
        shards["model-00001-of-00002.safetensors"] = main
    shards[f"model-0000{len(shards) + 1}-of-0000{len(shards) + 1}.safetensors" if not main
           else "model-00002-of-00002.safetensors"] = draft
    weight_map = {}
    for fname, tensors in shards.items():
        save_file(tensors, str(dst / fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in tensors})
    total = sum(t.numel() * t.element_size() for ts in shards.values() for t in ts.values())
    (dst / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, indent=2))
    (dst / "config.json").write_text(json.dumps(c, indent=2))
    return dst
