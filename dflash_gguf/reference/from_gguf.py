"""GGUF → the checkpoint's own tensor names, dequantized to float32, plus the config the file
itself implies. Torch-free; the reference model (parity) builds modules from these.

The drafter's config is rebuilt from the GGUF's keys, not taken from config.json: a GGUF that
baked a wrong constant (theta, taps, window) must show that constant in parity, since it is
what a runtime would use.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..config import DrafterConfig, TargetConfig, parse_config, parse_target_config
from ..errors import ConfigError, GGUFFormatError, WeightsError
from ..formats import meta_from_gguf
from ..formats.names import BLK_RE, target_hf_name
from ..fileio.gguf_reader import GGUFFile, read_gguf
from ..fileio.types import TensorInfo



def dequantized(f: GGUFFile, t: TensorInfo) -> np.ndarray:
    """A tensor's float32 values in numpy (torch) order, with ggml's exact dequantizers
    (always a fresh, writable array: the file's bytes are a read-only memory map)."""
    from ..quants import dequantize

    return dequantize(f.raw(t), t.ggml_type, t.shape)


# --- drafter --------------------------------------------------------------------------------
def drafter_from_gguf(path: str | Path) -> tuple[DrafterConfig, dict[str, np.ndarray], str]:
    """(config implied by the file's keys, checkpoint-named float32 weights, format name).

    Raises:
        GGUFFormatError: not a drafter, or keys missing to rebuild its config.
        WeightsError: a tensor the format's name table does not know.
    """
    f = read_gguf(path)
    fmt, meta = meta_from_gguf(f.kvs, f.shapes(), path)
    hp = {s: v for s, v, _t, _st in meta.hparams}

    def need(key: str) -> Any:
        if key not in hp:
            raise GGUFFormatError(f"{path}: {f.arch}.{key} is missing; cannot rebuild the drafter's config")
        return hp[key]

    n_layers = int(need("block_count"))
    names = {t.name: t for t in f.tensors}
    q = names.get("blk.0.attn_q.weight")
    head_dim = int(hp.get("attention.key_length") or (q.shape[0] // int(need("attention.head_count")) if q else 0))
    raw: dict[str, Any] = {
        "architectures": ["DFlash2DraftModel" if meta.dflash2 else "DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": int(need("embedding_length")),
        "intermediate_size": int(need("feed_forward_length")),
        "num_hidden_layers": n_layers,
        "num_attention_heads": int(need("attention.head_count")),
        "num_key_value_heads": int(hp.get("attention.head_count_kv", need("attention.head_count"))),
        "head_dim": head_dim,
        "rms_norm_eps": float(need("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(need("rope.freq_base")),
        "vocab_size": int(meta.vocab_size or 0) or _vocab_from_tensors(f, path),
        "block_size": meta.block_size or 16,
        "dflash_config": {"mask_token_id": meta.mask_token_id, "target_layer_ids": list(meta.taps), **meta.dflash2},
    }
    if "context_length" in hp:
        raw["max_position_embeddings"] = int(hp["context_length"])
    if "rope.dimension_count" in hp and head_dim:
        raw["partial_rotary_factor"] = int(hp["rope.dimension_count"]) / head_dim
    scaling = _rope_scaling(hp)
    if scaling:
        raw["rope_scaling"] = scaling
    if "attention.sliding_window" in hp:
        raw["use_sliding_window"] = True
        raw["sliding_window"] = int(hp["attention.sliding_window"])
        pattern = hp.get("attention.sliding_window_pattern") or [True] * n_layers
        raw["layer_types"] = ["sliding_attention" if p else "full_attention" for p in pattern]
    if "attention.causal" in hp:
        raw["is_causal"] = bool(hp["attention.causal"])
    for key, name in (("final_logit_softcapping", "final_logit_softcapping"), ("logit_scale", "output_multiplier"),
                      ("embedding_scale", "input_embedding_scale")):
        if key in hp:
            raw["dflash_config"][name] = float(hp[key])
    if meta.mask_token_id is None:
        raise GGUFFormatError(f"{path}: no mask token id in the file; cannot run the drafter")
    cfg = parse_config(raw, Path(path))
    weights: dict[str, np.ndarray] = {}
    for t in f.tensors:
        src = fmt.source_name(t.name)
        if src is None:
            if t.name == "rope_freqs.weight":
                continue  # llama3 factors: the reference recomputes them from the config
            raise WeightsError(f"{path}: tensor {t.name} is not a {fmt.name} drafter tensor")
        weights[src] = dequantized(f, t)
    return cfg, weights, fmt.name


def _vocab_from_tensors(f: GGUFFile, path) -> int:
    for t in f.tensors:
        if t.name.startswith("selector_") and t.name != "selector_hidden.weight":
            return t.shape[0]
    raise GGUFFormatError(f"{path}: no tokenizer and no vocab size in the file; convert it with --target-gguf")


def _rope_scaling(hp: dict[str, Any]) -> dict[str, Any] | None:
    typ = hp.get("rope.scaling.type")
    if typ in (None, "none"):
        return None
    out: dict[str, Any] = {"rope_type": typ, "factor": float(hp.get("rope.scaling.factor", 1.0))}
    if "rope.scaling.original_context_length" in hp:
        out["original_max_position_embeddings"] = int(hp["rope.scaling.original_context_length"])
    for k, name in (("yarn_ext_factor", "extrapolation_factor"), ("yarn_attn_factor", "attention_factor"),
                    ("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
        if f"rope.scaling.{k}" in hp:
            out[name] = float(hp[f"rope.scaling.{k}"])
    return out


# Constants a runtime takes from the GGUF: when they differ from config.json, the GGUF's value
# is what a runtime computes with, so parity uses it and reports the difference.
CONSTANTS = ("rope_theta", "rope_scaling", "rms_norm_eps", "sliding_window", "swa_pattern", "is_causal",
             "final_logit_softcapping", "output_multiplier", "input_embedding_scale", "head_dim",
             "num_key_value_heads", "num_attention_heads", "intermediate_size")
# Facts that identify the drafter: a mismatch means the GGUF belongs to another checkpoint.
IDENTITY = ("target_layer_ids", "num_hidden_layers", "hidden_size", "block_size", "mask_token_id")


def compare_with_config(gguf_cfg: DrafterConfig, cfg: DrafterConfig, path) -> list[str]:
    """Notes on constants that differ; WeightsError when the two describe different drafters."""
    for name in IDENTITY:
        got, want = getattr(gguf_cfg, name), getattr(cfg, name)
        if got != want:
            raise WeightsError(f"{path}: {name} is {got} in the GGUF but {want} in {cfg.path}; "
                               "they describe different drafters")
    notes = []
    for name in CONSTANTS:
        got, want = getattr(gguf_cfg, name), getattr(cfg, name)
        same = got == want or (isinstance(got, float) and isinstance(want, float) and abs(got - want) <= 1e-6 * abs(want))
        if not same:
            notes.append(f"{name} is {got} in the GGUF but {want} in config.json; the GGUF's value is used, "
                         "as a runtime would")
    return notes


# --- target (qwen3 / llama GGUF, as llama.cpp's converter writes them) -------------------------
SUPPORTED_TARGET_ARCHS = ("qwen3", "llama")


def unpermute_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's LlamaModel.permute: it reorders each head's rows from rotate-half
    (HF) to interleaved pairs (ggml's normal rope); the reference uses rotate-half."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def target_from_gguf(path: str | Path) -> tuple[TargetConfig, dict[str, np.ndarray]]:
    """A dense qwen3 / llama target GGUF → (TargetConfig, HF-named float32 weights).

    Raises:
        GGUFFormatError: another architecture, or keys the config needs are missing.
    """
    f = read_gguf(path)
    arch = f.arch
    if arch not in SUPPORTED_TARGET_ARCHS:
        raise GGUFFormatError(f"{path}: architecture {arch!r} is not a supported reference target GGUF "
                              f"({', '.join(SUPPORTED_TARGET_ARCHS)}); use its Hugging Face dir instead")

    def kv(key: str, default: Any = None) -> Any:
        item = f.kvs.get(f"{arch}.{key}")
        if item is None:
            if default is None:
                raise GGUFFormatError(f"{path}: {arch}.{key} is missing")
            return default
        return item.value

    names = {t.name: t for t in f.tensors}
    if "rope_freqs.weight" in names:
        raise ConfigError(f"{path}: llama3-style rope_freqs are not supported for reference targets; "
                          "use the target's Hugging Face dir")
    if "token_embd.weight" not in names:
        raise GGUFFormatError(f"{path}: token_embd.weight is missing; not a complete target model")
    n_head, n_kv = int(kv("attention.head_count")), int(kv("attention.head_count_kv", kv("attention.head_count")))
    hidden = int(kv("embedding_length"))
    raw = {
        "architectures": ["Qwen3ForCausalLM" if arch == "qwen3" else "LlamaForCausalLM"],
        "model_type": arch,
        "hidden_size": hidden,
        "num_hidden_layers": int(kv("block_count")),
        "vocab_size": int(names["token_embd.weight"].shape[0]),
        "intermediate_size": int(kv("feed_forward_length")),
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv,
        "head_dim": int(kv("attention.key_length", hidden // n_head)),
        "rms_norm_eps": float(kv("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(kv("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(kv("context_length", 4096)),
        "tie_word_embeddings": "output.weight" not in names,
        "attention_bias": "blk.0.attn_q.bias" in names,
        "mlp_bias": "blk.0.ffn_gate.bias" in names,
    }
    scaling = _rope_scaling({k[len(arch) + 1:]: v.value for k, v in f.kvs.items() if k.startswith(f"{arch}.")})
    if scaling:
        raw["rope_scaling"] = scaling
    tc = parse_target_config(raw, Path(path))
    weights: dict[str, np.ndarray] = {}
    for t in f.tensors:
        m = BLK_RE.match(t.name)
        hf = target_hf_name(t.name)
        if hf is None:
            raise GGUFFormatError(f"{path}: tensor {t.name} is not part of a dense {arch} target")
        w = dequantized(f, t)
        if arch == "llama" and m and m.group(2) in ("attn_q.weight", "attn_k.weight"):
            w = unpermute_rope(w, n_head if m.group(2) == "attn_q.weight" else n_kv)
        weights[hf] = w
    return tc, weights
