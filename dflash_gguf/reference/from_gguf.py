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
from ..config.target import REFERENCE_GGUF_TARGET_ARCHS as SUPPORTED_TARGET_ARCHS
from ..errors import ConfigError, GGUFFormatError, QuantizationError, WeightsError
from ..formats import meta_from_gguf
from ..fileio.gguf_header import show
from ..formats.dspark import CONF_PROJ, MARKOV_W1, SAMPLE_FROM_ANCHOR
from ..formats.hparams import KeyReader, RopeScalingKeys, decode_hparams
from ..formats.names import BLK_RE, D2T, OUTPUT, ROPE_FREQS, TOKEN_EMBD, target_hf_name
from .rules import ZLAB, attention_rules as _rules
from ..fileio.gguf_reader import GGUFFile, read_gguf
from ..fileio.types import TensorInfo

def dequantized(f: GGUFFile, t: TensorInfo) -> np.ndarray:
    """A tensor's float32 values in numpy (torch) order, with ggml's exact dequantizers
    (always a fresh, writable array: the file's bytes are a read-only memory map).

    Raises:
        WeightsError: a tensor type the reference cannot dequantize (I8, F64, IQ*, ...), or
            a 0-d tensor.
    """
    from ..quants import dequantize

    if t.n_elements == 0 and t.shape:  # some ne is 0: nothing to decode (the reference then reports the shape)
        return np.zeros(t.shape, np.float32)
    try:
        return dequantize(f.raw(t), t.ggml_type, t.shape)
    except QuantizationError as exc:
        raise WeightsError(f"{f.path}: tensor {show(t.name)} ({t.ggml_type.name}, ne {list(t.shape_ne)}): {exc}") from None


def _keys(f: GGUFFile, path: str | Path, why: str) -> KeyReader:
    return KeyReader(f.kvs, f.arch, str(path), why)


def _layer_ids(f: GGUFFile) -> set[int]:
    return {int(m.group(1)) for t in f.tensors if (m := BLK_RE.match(t.name))}


def _check_depth(f: GGUFFile, keys: KeyReader, n_layers: int) -> None:
    """block_count must name exactly the layers the tensors hold (a corrupt count would have
    the reference build billions of layers before any shape check)."""
    have = _layer_ids(f)
    if len(have) != n_layers or (have and max(have) != n_layers - 1):  # ids are distinct and >= 0
        got = f"{len(have)} layers ({min(have)}..{max(have)})" if have else "no blk.N tensors"
        raise GGUFFormatError(f"{keys.path}: {keys.key('block_count')} = {n_layers:,} but the file has tensors "
                              f"for {got} (corrupt metadata or tensor names; re-convert)")


def _rows(f: GGUFFile, name: str) -> int | None:
    t = next((t for t in f.tensors if t.name == name), None)
    return t.shape[0] if t is not None and len(t.shape) == 2 else None


# --- drafter --------------------------------------------------------------------------------
def drafter_from_gguf(path: str | Path) -> tuple[DrafterConfig, dict[str, np.ndarray], str]:
    """(config implied by the file's keys, checkpoint-named float32 weights, format name).

    Raises:
        GGUFFormatError: not a drafter, keys missing or of the wrong type to rebuild its
            config, or a block count the tensors do not match.
        ConfigError: the rebuilt config is inconsistent (e.g. mask id outside the vocab).
        WeightsError: a tensor the format's name table does not know, or cannot dequantize.
    """
    f = read_gguf(path)
    fmt, meta = meta_from_gguf(f.kvs, f.shapes(), path)
    k = _keys(f, path, "cannot rebuild the drafter's config")
    n_layers = k.int("block_count")
    _check_depth(f, k, n_layers)
    n_head = k.int("attention.head_count")
    head_dim = k.int("attention.key_length", None)
    if head_dim is None:
        q_rows = _rows(f, "blk.0.attn_q.weight")
        if q_rows is None or q_rows % n_head:
            raise GGUFFormatError(f"{path}: {k.key('attention.key_length')} is missing and blk.0.attn_q.weight "
                                  f"does not give it ({q_rows} rows for {n_head} heads); cannot rebuild the config")
        head_dim = q_rows // n_head
    for key, v in meta.dflash2.items():
        if v < 1:
            raise GGUFFormatError(f"{path}: {k.key(key)} = {v}; DFlash2 sizes are >= 1 (corrupt metadata)")
    names = {t.name: t for t in f.tensors}
    dspark = MARKOV_W1 in names
    arch = "DSparkDraftModel" if dspark else "DFlash2DraftModel" if meta.dflash2 else "DFlashDraftModel"
    raw: dict[str, Any] = {
        "architectures": [arch],
        "model_type": "qwen3",
        "head_dim": head_dim,
        "vocab_size": int(meta.vocab_size or 0) or _vocab_from_tensors(f, path),
        "block_size": 16 if meta.block_size is None else meta.block_size,
        "dflash_config": {"mask_token_id": meta.mask_token_id, "target_layer_ids": list(meta.taps), **meta.dflash2},
    }
    decode_hparams(k, raw)  # every hyperparameter key, by the table convert writes them with
    if meta.mask_token_id is None:
        raise GGUFFormatError(f"{path}: no mask token id in the file; cannot run the drafter")
    _runtime_knobs(f, k, names, raw, dspark)
    cfg = parse_config(raw, Path(path))
    weights: dict[str, np.ndarray] = {}
    for t in f.tensors:
        if t.name == D2T:
            weights["d2t"] = _d2t_offsets(f, t, cfg.vocab_size)
            continue
        src = fmt.source_name(t.name)
        if src is None:
            if t.name == ROPE_FREQS:
                continue  # llama3 factors: the reference recomputes them from the config
            raise WeightsError(f"{path}: tensor {show(t.name)} is not a {fmt.name} drafter tensor")
        weights[src] = dequantized(f, t)
    return cfg, weights, fmt.name


def _runtime_knobs(f: GGUFFile, k: KeyReader, names: dict[str, TensorInfo], raw: dict[str, Any], dspark: bool) -> None:
    """MiMo's and DSpark's keys and tensors → the config spellings the reference reads.

    Sinks are a tensor (``blk.N.attn_sinks.weight``), the value scale a key, DSpark's head sizes
    are tensor shapes and ``sample_from_anchor`` a key (absent = true, llama.cpp's default).
    Such a drafter runs under vLLM's / mlx-dspark's rules (``rules``), where a missing
    ``is_causal`` can mean "sliding layers causal"; a runtime reads a missing
    ``attention.causal`` as non-causal everywhere, so that is what the file says.
    """
    dc = raw["dflash_config"]
    if any(n.endswith(".attn_sinks.weight") for n in names):
        dc["attention_sink_bias"] = True
    if dspark:
        w1 = names[MARKOV_W1]
        if len(w1.shape) != 2:
            raise GGUFFormatError(f"{k.path}: {MARKOV_W1} has shape {list(w1.shape_ne)}; ne {{rank, n_vocab}} expected")
        raw["markov_rank"] = w1.shape[1]
        raw["enable_confidence_head"] = CONF_PROJ in names
        if D2T in names:
            raw["draft_vocab_size"] = names[D2T].n_elements
        if k.has(SAMPLE_FROM_ANCHOR):
            raw["sample_from_anchor"] = k.bool(SAMPLE_FROM_ANCHOR)
    if (dspark or "attention_sink_bias" in dc or "attention_value_scale" in dc) and "is_causal" not in raw:
        raw["is_causal"] = False


def _d2t_offsets(f: GGUFFile, t: TensorInfo, vocab: int) -> np.ndarray:
    """The GGUF's absolute target ids (I64, mainline's layout) as the checkpoint's offsets
    (``target = draft + d2t[draft]``), so both load paths hold the same tensor.

    Raises:
        WeightsError: not a 1-D I64 tensor, or ids outside the target vocabulary.
    """
    if t.ggml_type.name != "I64" or len(t.shape) != 1:
        raise WeightsError(f"{f.path}: d2t is {t.ggml_type.name} ne {list(t.shape_ne)}; a 1-D I64 id table expected")
    ids = np.frombuffer(f.raw(t).tobytes(), dtype="<i8").astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        raise WeightsError(f"{f.path}: d2t holds target ids outside the vocabulary (0..{vocab - 1})")
    return ids - np.arange(ids.size, dtype=np.int64)


def _vocab_from_tensors(f: GGUFFile, path) -> int:
    for t in f.tensors:
        if t.name.startswith("selector_") and t.name != "selector_hidden.weight" and len(t.shape) == 2:
            return t.shape[0]
        if t.name == MARKOV_W1 and len(t.shape) == 2:
            return t.shape[0]
    raise GGUFFormatError(f"{path}: no tokenizer and no vocab size in the file; convert it with --target-gguf")


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
    def close(got, want) -> bool:  # GGUF floats are float32
        return got == want or (isinstance(got, float) and isinstance(want, float) and abs(got - want) <= 1e-6 * abs(want))

    notes = []
    for name in CONSTANTS:
        got, want = getattr(gguf_cfg, name), getattr(cfg, name)
        same = close(got, want)
        if name == "is_causal" and not same:
            # the spelling may differ (a missing key reads as non-causal) while every layer agrees
            same = [c for c, _ in _rules(gguf_cfg).layers] == [c for c, _ in _rules(cfg).layers]
        if not same:
            notes.append(f"{name} is {got} in the GGUF but {want} in config.json; the GGUF's value is used, "
                         "as a runtime would")
    for name in ("attention_sink_bias", "attention_value_scale", "rope_dim"):
        got, want = getattr(gguf_cfg, name), getattr(cfg, name)
        if not close(got, want) and _rules(cfg).source != ZLAB:
            notes.append(f"{name} is {got} in the GGUF but {want} in config.json; the GGUF's value is used, "
                         "as a runtime would")
    if gguf_cfg.dspark is not None and cfg.dspark is not None:
        for name in ("sample_from_anchor", "draft_vocab_size"):
            got, want = getattr(gguf_cfg.dspark, name), getattr(cfg.dspark, name)
            if got != want:
                notes.append(f"DSpark {name} is {got} in the GGUF but {want} in config.json; the GGUF's value is "
                             "used, as a runtime would")
    return notes



# --- target (qwen3 / llama GGUF, as llama.cpp's converter writes them) -------------------------


def unpermute_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's LlamaModel.permute: it reorders each head's rows from rotate-half
    (HF) to interleaved pairs (ggml's normal rope); the reference uses rotate-half."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def target_from_gguf(path: str | Path) -> tuple[TargetConfig, dict[str, np.ndarray]]:
    """A dense qwen3 / llama target GGUF → (TargetConfig, HF-named float32 weights).

    Raises:
        GGUFFormatError: another architecture, keys the config needs missing or of the wrong
            type, a block count the tensors do not match, or Q/K rows that do not fit the heads.
        ConfigError: llama3 rope_freqs (the reference cannot rebuild them from GGUF keys).
        WeightsError: a tensor the reference cannot dequantize.
    """
    f = read_gguf(path)
    arch = f.arch
    if arch not in SUPPORTED_TARGET_ARCHS:
        raise GGUFFormatError(f"{path}: architecture {show(str(arch))!r} is not a supported reference target GGUF "
                              f"({', '.join(SUPPORTED_TARGET_ARCHS)}); use its Hugging Face dir instead")
    k = _keys(f, path, "cannot rebuild the target's config")
    names = {t.name: t for t in f.tensors}
    if ROPE_FREQS in names:
        raise ConfigError(f"{path}: llama3-style rope_freqs are not supported for reference targets; "
                          "use the target's Hugging Face dir")
    embd = names.get(TOKEN_EMBD)
    if embd is None or len(embd.shape) != 2:
        raise GGUFFormatError(f"{path}: token_embd.weight is missing or not 2-D; not a complete target model")
    n_layers = k.int("block_count")
    _check_depth(f, k, n_layers)
    n_head = k.int("attention.head_count")
    n_kv = k.int("attention.head_count_kv", n_head)
    hidden = k.int("embedding_length")
    head_dim = k.int("attention.key_length", hidden // n_head or 1)
    if arch == "llama":  # unpermute_rope splits every head's rows in pairs
        for t in f.tensors:
            m = BLK_RE.match(t.name)
            if m and m.group(2) in ("attn_q.weight", "attn_k.weight"):
                heads = n_head if m.group(2) == "attn_q.weight" else n_kv
                if len(t.shape) != 2 or t.shape[0] != heads * head_dim or head_dim % 2:
                    raise GGUFFormatError(
                        f"{path}: {show(t.name)} has shape {list(t.shape)}, but {heads} heads x head_dim {head_dim} "
                        f"(even) rows are needed to undo llama.cpp's rope permutation (corrupt metadata or tensor)")
    raw = {
        "architectures": ["Qwen3ForCausalLM" if arch == "qwen3" else "LlamaForCausalLM"],
        "model_type": arch,
        "hidden_size": hidden,
        "num_hidden_layers": n_layers,
        "vocab_size": embd.shape[0],
        "intermediate_size": k.int("feed_forward_length"),
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv,
        "head_dim": head_dim,
        "rms_norm_eps": k.float("attention.layer_norm_rms_epsilon"),
        "rope_theta": k.float("rope.freq_base", 10000.0, positive=True),
        "max_position_embeddings": k.int("context_length", 4096),
        "tie_word_embeddings": OUTPUT not in names,
        "attention_bias": "blk.0.attn_q.bias" in names,
        "mlp_bias": "blk.0.ffn_gate.bias" in names,
    }
    RopeScalingKeys().decode(k, raw)
    tc = parse_target_config(raw, Path(path))
    weights: dict[str, np.ndarray] = {}
    for t in f.tensors:
        m = BLK_RE.match(t.name)
        hf = target_hf_name(t.name)
        if hf is None:
            raise GGUFFormatError(f"{path}: tensor {show(t.name)} is not part of a dense {arch} target")
        w = dequantized(f, t)
        if arch == "llama" and m and m.group(2) in ("attn_q.weight", "attn_k.weight"):
            w = unpermute_rope(w, n_head if m.group(2) == "attn_q.weight" else n_kv)
        weights[hf] = w
    return tc, weights
