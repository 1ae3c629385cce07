"""Tiny DSpark drafter checkpoints, written with safetensors into a test's tmp dir.

Tensor names follow the published exports (mlx-dspark's loader names them: ``fc``,
``hidden_norm``, ``layers.N.*``, ``markov_head.markov_w{1,2}``, ``confidence_head.proj``, top
level ``embed_tokens`` / ``lm_head``, and the EAGLE3 reduced-vocab tables ``d2t`` (offsets,
I64) and ``t2d`` (bool)). Shapes pair with the fixture targets: hidden 64, vocab 512.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

H, I, HEADS, KV, HD, VOCAB, RANK = 64, 128, 4, 2, 16, 512, 32
ARCHS = ("DSparkDraftModel", "Qwen3DSparkModel", "DSparkSpeculator", "Lfm2DSparkDraftModel", "LingDSparkModel")


def _backbone(layers: int = 2) -> dict:
    return {"model_type": "qwen3", "hidden_size": H, "intermediate_size": I, "num_hidden_layers": layers,
            "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": HD, "rms_norm_eps": 1e-6,
            "max_position_embeddings": 4096, "vocab_size": VOCAB, "rope_theta": 1000000.0,
            "attention_bias": False, "hidden_act": "silu", "tie_word_embeddings": False}


def dspark_config(arch: str = "DSparkDraftModel", *, draft_vocab: int | None = None, taps=(0, 1, 3),
                  speculators: bool = False, **extra) -> dict:
    """A DFlash-lineage DSpark config (taps + mask top level), or with ``speculators`` the
    vLLM-speculators EAGLE3 schema (backbone nested, layer-input tap ids)."""
    if speculators:
        cfg = {"architectures": [arch], "speculators_model_type": "dspark", "transformer_layer_config": _backbone(),
               "aux_hidden_state_layer_ids": [i + 1 for i in taps], "mask_token_id": 500, "block_size": 8,
               "markov_rank": RANK, "markov_head_type": "vanilla"}
    else:
        cfg = {"architectures": [arch], **_backbone(), "block_size": 7, "num_target_layers": 5,
               "target_layer_ids": list(taps), "mask_token_id": 500, "markov_rank": RANK}
    if draft_vocab is not None:
        cfg["draft_vocab_size"] = draft_vocab
    cfg.update(extra)
    return cfg


def gemma4_config(**extra) -> dict:
    """A Gemma4DSparkModel config: k=v attention over ``global_head_dim``, proportional RoPE."""
    cfg = {"architectures": ["Gemma4DSparkModel"], "model_type": "gemma4_text", "hidden_size": H,
           "intermediate_size": I, "num_hidden_layers": 2, "num_attention_heads": HEADS, "num_key_value_heads": 2,
           "num_global_key_value_heads": 1, "head_dim": 16, "global_head_dim": 32, "attention_k_eq_v": True,
           "rms_norm_eps": 1e-6, "max_position_embeddings": 4096, "vocab_size": VOCAB, "attention_bias": False,
           "hidden_activation": "gelu_pytorch_tanh", "layer_types": ["full_attention"] * 2, "sliding_window": 64,
           "final_logit_softcapping": None, "tie_word_embeddings": False, "enable_moe_block": False,
           "rope_parameters": {"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                  "rope_theta": 1000000.0},
                               "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
           "block_size": 7, "num_target_layers": 5,
           "dflash_config": {"mask_token_id": 500, "target_layer_ids": [0, 1, 3]}, "markov_rank": RANK}
    cfg.update(extra)
    return cfg


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (round to nearest even), as torch's .to(torch.bfloat16)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def save_safetensors(path: Path, tensors: dict[str, tuple[str, np.ndarray]]) -> None:
    """A safetensors file from {name: (dtype, storage array)}, written directly: numpy has no
    bfloat16 and importing torch for it would cost more than every test here."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dtype, arr = tensors[name]
        b = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def _weights(cfg: dict, rng, *, conf: bool, conf_bias: bool, embed: bool, lm_head: bool | None,
             d2t: np.ndarray | None, t2d: bool) -> dict:
    gemma = cfg["architectures"][0] == "Gemma4DSparkModel"
    back = cfg.get("transformer_layer_config", cfg)
    n_taps = len(cfg.get("aux_hidden_state_layer_ids") or cfg.get("target_layer_ids")
                 or (cfg.get("dflash_config") or {}).get("target_layer_ids") or (0, 1, 3))
    draft_vocab = cfg.get("draft_vocab_size") or VOCAB
    hd = cfg["global_head_dim"] if gemma else HD
    kv = cfg["num_global_key_value_heads"] if gemma else KV

    def m(*s):
        return "BF16", _bf16(rng.standard_normal(s, dtype=np.float32) * 0.05)

    def one(n):
        return "BF16", _bf16(1 + 0.05 * rng.standard_normal(n, dtype=np.float32))

    t = {"fc.weight": m(H, n_taps * H), "hidden_norm.weight": one(H), "norm.weight": one(H)}
    for i in range(back["num_hidden_layers"]):
        p = f"layers.{i}."
        t.update({p + "input_layernorm.weight": one(H), p + "post_attention_layernorm.weight": one(H),
                  p + "self_attn.q_proj.weight": m(HEADS * hd, H), p + "self_attn.k_proj.weight": m(kv * hd, H),
                  p + "self_attn.o_proj.weight": m(H, HEADS * hd), p + "self_attn.q_norm.weight": one(hd),
                  p + "self_attn.k_norm.weight": one(hd), p + "mlp.gate_proj.weight": m(I, H),
                  p + "mlp.up_proj.weight": m(I, H), p + "mlp.down_proj.weight": m(H, I)})
        if gemma:
            t.update({p + "pre_feedforward_layernorm.weight": one(H), p + "post_feedforward_layernorm.weight": one(H),
                      p + "layer_scalar": one(1)})
        else:
            t[p + "self_attn.v_proj.weight"] = m(kv * hd, H)
    t["markov_head.markov_w1.weight"] = m(VOCAB, RANK)
    t["markov_head.markov_w2.weight"] = m(draft_vocab, RANK)
    conf_prefix = "confidence_proj." if gemma else "confidence_head.proj."
    if conf:
        t[conf_prefix + "weight"] = m(1, H + RANK)
        if conf_bias:
            t[conf_prefix + "bias"] = m(1)
    if embed:
        t["embed_tokens.weight"] = m(VOCAB, H)
    if lm_head if lm_head is not None else True:
        t["lm_head.weight"] = m(draft_vocab, H)
    if d2t is not None:
        t["d2t"] = ("I64", np.asarray(d2t, dtype=np.int64))
        if t2d:
            mask = np.zeros(VOCAB, dtype=bool)
            mask[np.clip(np.arange(len(d2t)) + np.asarray(d2t), 0, VOCAB - 1)] = True
            t["t2d"] = ("BOOL", mask)
    return t


def reduced_d2t(draft_vocab: int, seed: int = 3) -> np.ndarray:
    """EAGLE3-style offsets: draft id i -> target id i + d2t[i], increasing and unique."""
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.choice(VOCAB, size=draft_vocab, replace=False))
    return (ids - np.arange(draft_vocab)).astype(np.int64)


def write_dspark(d: Path, cfg: dict, *, seed: int = 11, conf: bool = True, conf_bias: bool = True,
                 embed: bool = False, lm_head: bool | None = None, d2t: np.ndarray | None = None, t2d: bool = True,
                 drop: tuple[str, ...] = (), replace: dict | None = None) -> Path:
    """Write ``config.json`` + ``model.safetensors`` for ``cfg`` into ``d`` and return ``d``.
    A reduced ``draft_vocab_size`` gets a ``d2t``/``t2d`` pair unless ``d2t`` is given;
    ``replace`` values are (safetensors dtype, storage array)."""
    d.mkdir(parents=True, exist_ok=True)
    if d2t is None and cfg.get("draft_vocab_size") and cfg["draft_vocab_size"] < VOCAB:
        d2t = reduced_d2t(cfg["draft_vocab_size"])
    t = _weights(cfg, np.random.default_rng(seed), conf=conf, conf_bias=conf_bias, embed=embed, lm_head=lm_head,
                 d2t=d2t, t2d=t2d)
    for name in drop:
        t.pop(name)
    t.update(replace or {})
    save_safetensors(d / "model.safetensors", t)
    (d / "config.json").write_text(json.dumps(cfg, indent=1))
    return d


# --- the cases every DSpark test shares: name -> (config, write_dspark options) --------------
def _gemma4_default_rope() -> dict:
    cfg = gemma4_config(tie_word_embeddings=True)
    del cfg["rope_parameters"]  # Gemma 4's default: proportional, a quarter of each head rotated
    return cfg


CASES: dict[str, tuple[dict, dict]] = {
    # full vocabulary: lm_head dropped, confidence head with bias
    "draft": (dspark_config("DSparkDraftModel"), {}),
    # reduced vocabulary: d2t (offsets) + t2d, lm_head kept, own embeddings
    "qwen3-reduced": (dspark_config("Qwen3DSparkModel", draft_vocab=200), {"embed": True}),
    # EAGLE3-style speculators export: nested backbone, layer-input taps, bonus anchor, no confidence head
    "speculator": (dspark_config("DSparkSpeculator", speculators=True, draft_vocab=128), {"conf": False}),
    # taps and mask under dflash_config, no markov_rank (the tensors say), no lm_head, bias-less confidence head
    "lfm2": ({**{k: v for k, v in dspark_config("Lfm2DSparkDraftModel").items()
                 if k not in ("target_layer_ids", "mask_token_id", "markov_rank")},
              "dflash_config": {"target_layer_ids": [0, 2, 3], "mask_token_id": 499}},
             {"lm_head": False, "conf_bias": False}),
    # explicit bonus anchor and an explicit full draft vocabulary
    "ling": (dspark_config("LingDSparkModel", draft_vocab=VOCAB, sample_from_anchor=False), {}),
    "gemma4": (gemma4_config(), {}),
    # no rope_parameters (Gemma 4's default), tied head: no lm_head, own embeddings, no confidence head
    "gemma4-tied": (_gemma4_default_rope(), {"lm_head": False, "embed": True, "conf": False}),
}


def build_case(root: Path, name: str) -> Path:
    cfg, opts = CASES[name]
    return write_dspark(root / name, json.loads(json.dumps(cfg)), **opts)


def spm_target_dir(root: Path, layers: int = 5) -> Path:
    """The SentencePiece fixture target, deepened to ``layers`` in config.json only (converters
    read the target's config and tokenizer, not its weights)."""
    import shutil

    from tests.conftest import TARGETS

    d = root / "target"
    if not d.exists():
        shutil.copytree(TARGETS / "llama-tiny", d)
        cfg = json.loads((d / "config.json").read_text())
        cfg["num_hidden_layers"] = layers
        (d / "config.json").write_text(json.dumps(cfg))
    return d
