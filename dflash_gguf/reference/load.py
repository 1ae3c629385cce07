"""Load the reference drafter / target from Hugging Face directories (config.json + safetensors)."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

from ..config import DrafterConfig, load_config, load_target_config
from ..errors import UsageError, WeightsError
from .drafter import DFlashDrafter
from .target import Target, TargetSpec

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Tensors some drafter exports carry that the reference never uses: it embeds the block and
# projects logits with the *target's* tables (z-lab loads these as unexpected keys and ignores them).
DRAFTER_UNUSED = ("embed_tokens.weight", "lm_head.weight", "rotary_emb.inv_freq")


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """"auto" = CUDA when present, else CPU.

    Raises:
        UsageError: "cuda" was asked for on a machine without CUDA.
    """
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no CUDA device here; use --device cpu or auto")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise UsageError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def read_safetensors(model_dir: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of a HF model dir: sharded (``model.safetensors.index.json``) or not.

    Raises:
        WeightsError: no safetensors file, or a file safetensors cannot parse.
    """
    d = Path(model_dir)
    index = d / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted({d / f for f in json.loads(index.read_text())["weight_map"].values()})
    else:
        shards = sorted(d.glob("*.safetensors"))
    if not shards:
        raise WeightsError(f"{d}: no *.safetensors files (the reference loads safetensors only)")
    tensors: dict[str, torch.Tensor] = {}
    for shard in shards:
        try:
            tensors.update(load_file(str(shard), device="cpu"))
        except Exception as exc:  # safetensors raises its own SafetensorError / OSError
            raise WeightsError(f"{shard}: cannot read safetensors ({exc})") from None
    return tensors


def _load_into(module: nn.Module, state: dict[str, torch.Tensor], where: str, dtype: torch.dtype,
               device: torch.device) -> nn.Module:
    expected = dict(module.state_dict())
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise WeightsError(
            f"{where}: tensor names do not match the architecture: missing {missing[:5]}{' …' if len(missing) > 5 else ''}, "
            f"unexpected {unexpected[:5]}{' …' if len(unexpected) > 5 else ''}"
        )
    for name, t in state.items():
        if tuple(t.shape) != tuple(expected[name].shape):
            raise WeightsError(f"{where}: {name} has shape {tuple(t.shape)}, config implies {tuple(expected[name].shape)}")
    module.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True, assign=True)
    return module.to(device=device).eval()


def sanitize_drafter(state: dict[str, torch.Tensor], cfg: DrafterConfig) -> dict[str, torch.Tensor]:
    """The one place raw drafter tensor names get fixed.

    Raises:
        WeightsError: reduced-vocabulary maps (``d2t``/``t2d``), which z-lab's reference lacks.
    """
    if "d2t" in state or "t2d" in state:
        raise WeightsError(f"{cfg.path.parent}: d2t/t2d reduced-vocabulary maps are not supported by the reference")
    out = {k: v for k, v in state.items() if k not in DRAFTER_UNUSED}
    for name in ("predecessor_codebook", "successor_codebook"):
        # On disk these have no ".weight"; a transformers save_pretrained of nn.Embedding adds it.
        key = f"candidate_selector.{name}"
        if key + ".weight" in out:
            out[key] = out.pop(key + ".weight")
    return out


def sanitize_target(state: dict[str, torch.Tensor], spec: TargetSpec) -> dict[str, torch.Tensor]:
    out = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
    if spec.tie_word_embeddings:
        # transformers ties after loading, so the embedding wins even when lm_head.weight is stored.
        out["lm_head.weight"] = out.get("model.embed_tokens.weight")
        if out["lm_head.weight"] is None:
            del out["lm_head.weight"]
    return out


def drafter_from_state(cfg: DrafterConfig, state: dict[str, torch.Tensor], *, dtype="float32",
                       device="auto") -> DFlashDrafter:
    """Build a drafter from an already-read state dict (used by GGUF loading too).

    Raises:
        WeightsError: missing / unexpected tensors or a shape the config does not imply.
    """
    with torch.device("meta"):
        module = DFlashDrafter(cfg)
    return _load_into(module, sanitize_drafter(state, cfg), str(cfg.path.parent), resolve_dtype(dtype),
                      resolve_device(device))


def target_from_state(spec: TargetSpec, state: dict[str, torch.Tensor], *, dtype="float32", device="auto",
                      where: str = "target") -> Target:
    with torch.device("meta"):
        module = Target(spec)
    target = _load_into(module, sanitize_target(state, spec), where, resolve_dtype(dtype), resolve_device(device))
    if spec.tie_word_embeddings:
        target.lm_head.weight = target.model.embed_tokens.weight  # one tensor, as in transformers
    return target


def load_drafter(drafter_dir: str | Path, *, dtype: str | torch.dtype = "float32",
                 device: str | torch.device = "auto") -> DFlashDrafter:
    """Load a DFlash1/DFlash2 drafter from its HF directory.

    Raises:
        ConfigError: config.json missing or invalid.
        WeightsError: safetensors missing, unreadable or not matching the config.
        UsageError: an unknown dtype, or CUDA asked for without one.
    """
    cfg = load_config(drafter_dir)
    return drafter_from_state(cfg, read_safetensors(cfg.path.parent), dtype=dtype, device=device)


def load_target(target_dir: str | Path, *, dtype: str | torch.dtype = "float32",
                device: str | torch.device = "auto") -> Target:
    """Load a dense Qwen3 / Llama target from its HF directory.

    Raises:
        ConfigError: config.json missing, invalid, or not a qwen3/llama model.
        WeightsError: safetensors missing, unreadable or not matching the config.
        UsageError: an unknown dtype, or CUDA asked for without one.
    """
    tc = load_target_config(target_dir)
    spec = TargetSpec.from_config(tc)
    return target_from_state(spec, read_safetensors(tc.path.parent), dtype=dtype, device=device,
                             where=str(tc.path.parent))


def drafter_from_gguf(gguf_path: str | Path, config: str | Path | DrafterConfig, *,
                      dtype: str | torch.dtype = "float32", device: str | torch.device = "auto") -> DFlashDrafter:
    """The drafter built from its config.json with every weight taken (dequantized) from a GGUF.

    Any of the four drafter GGUF spellings works: the file's format is detected and its
    tensor names are mapped back to the checkpoint names. This is what a GGUF runtime would
    compute with, so ``teacher_forced`` against the safetensors drafter isolates what
    conversion and quantization changed.

    Raises:
        GGUFFormatError: not a DFlash drafter GGUF, or a tensor name no format defines.
        WeightsError: the GGUF's taps / block size / mask id / sizes disagree with the config,
            or its tensors do not fill the architecture.
        QuantizationError: a tensor type that cannot be dequantized.
    """
    from ..errors import GGUFFormatError
    from ..formats import meta_from_gguf
    from ..gguf_read import read_gguf
    from ..quants import dequantize

    cfg = config if isinstance(config, DrafterConfig) else load_config(config)
    f = read_gguf(gguf_path)
    fmt, meta = meta_from_gguf(f.kvs, f.shapes(), gguf_path)
    checks = [("target layer ids", tuple(meta.taps), tuple(cfg.target_layer_ids)),
              ("block_count", meta.n_layers, cfg.num_hidden_layers),
              ("embedding_length", meta.hidden_size, cfg.hidden_size),
              ("block_size", meta.block_size, cfg.block_size),
              ("mask_token_id", meta.mask_token_id, cfg.mask_token_id)]
    for what, got, want in checks:
        if got is not None and got != want:
            raise WeightsError(f"{gguf_path}: {what} is {got} in the GGUF ({fmt.name} format) but {want} in "
                               f"{cfg.path}; they describe different drafters")
    state: dict[str, torch.Tensor] = {}
    for entry in f.tensors:
        if entry.name == "rope_freqs.weight":
            continue  # llama3 rope factors the converter generates from the config; so does the reference
        name = fmt.source_name(entry.name)
        if name is None:
            raise GGUFFormatError(f"{gguf_path}: tensor {entry.name} is not a {fmt.name} drafter tensor")
        values = dequantize(f.raw(entry), entry.ggml_type, entry.shape)  # numpy order == torch (out, in)
        state[name] = torch.from_numpy(values.copy())
    return drafter_from_state(cfg, state, dtype=dtype, device=device)


# llama.cpp tensor names for the dense Qwen3 / Llama blocks -> Hugging Face names.
_GGUF_TARGET_GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                       "output.weight": "lm_head.weight"}
_GGUF_TARGET_LAYER = {
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias", "attn_output.bias": "self_attn.o_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def unpermute_qk(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undo convert_hf_to_gguf's LlamaModel.permute: llama.cpp's llama arch uses interleaved-pair
    RoPE, so the converter reorders Q/K rows from HF's rotate-half layout; this restores them."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def target_from_gguf(gguf_path: str | Path, *, dtype: str | torch.dtype = "float32",
                     device: str | torch.device = "auto") -> Target:
    """A dense ``qwen3`` / ``llama`` target from a llama.cpp GGUF (tensors dequantized).

    Llama Q/K rows are un-permuted as llama.cpp's converter permuted them; Qwen3 (NEOX rope)
    is stored unpermuted.

    Raises:
        GGUFFormatError: another architecture, a missing size key, or an unknown tensor name.
        ConfigError: RoPE the reference cannot rebuild from GGUF keys (a ``rope_freqs`` tensor).
    """
    from ..config import RopeScaling
    from ..errors import ConfigError, GGUFFormatError
    from ..gguf_read import read_gguf
    from ..quants import dequantize
    from .common import RopeSpec

    f = read_gguf(gguf_path)
    arch = f.arch
    if arch not in ("qwen3", "llama"):
        raise GGUFFormatError(f"{gguf_path}: general.architecture={arch!r}; the reference target reads qwen3 / llama")

    def key(name, default=None, required=False):
        kv = f.kvs.get(f"{arch}.{name}")
        if kv is None:
            if required:
                raise GGUFFormatError(f"{gguf_path}: required key {arch}.{name} is missing")
            return default
        return kv.value

    shapes = f.shapes()
    if "rope_freqs.weight" in shapes:
        raise ConfigError(f"{gguf_path}: llama3-style rope_freqs are not supported by the reference target")
    hidden, n_head = int(key("embedding_length", required=True)), int(key("attention.head_count", required=True))
    head_dim = int(key("attention.key_length", hidden // n_head))
    scaling = None
    kind = key("rope.scaling.type")
    if kind not in (None, "none"):
        factor = key("rope.scaling.factor")
        orig = key("rope.scaling.original_context_length")
        params = {"factor": float(factor)} if factor is not None else {}
        for suffix, name in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow"),
                             ("yarn_attn_factor", "attention_factor")):
            if key(f"rope.scaling.{suffix}") is not None:
                params[name] = float(key(f"rope.scaling.{suffix}"))
        scaling = RopeScaling(str(kind), None if factor is None else float(factor),
                              None if orig is None else int(orig), params)
    n_layers = int(key("block_count", required=True))
    spec = TargetSpec(
        arch=arch, hidden_size=hidden, intermediate_size=int(key("feed_forward_length", required=True)),
        num_hidden_layers=n_layers, num_attention_heads=n_head,
        num_key_value_heads=int(key("attention.head_count_kv", n_head)), head_dim=head_dim,
        vocab_size=int(shapes["token_embd.weight"][0]),
        rms_norm_eps=float(key("attention.layer_norm_rms_epsilon", required=True)),
        rope=RopeSpec(head_dim, float(key("rope.freq_base", 10000.0)), scaling, None, key("context_length")),
        attention_bias="blk.0.attn_q.bias" in shapes, mlp_bias="blk.0.ffn_gate.bias" in shapes,
        tie_word_embeddings="output.weight" not in shapes, layer_windows=(None,) * n_layers,
    )
    state: dict[str, torch.Tensor] = {}
    for entry in f.tensors:
        name = _GGUF_TARGET_GLOBAL.get(entry.name)
        if name is None and entry.name.startswith("blk."):
            _, bid, rest = entry.name.split(".", 2)
            if rest in _GGUF_TARGET_LAYER:
                name = f"model.layers.{bid}.{_GGUF_TARGET_LAYER[rest]}"
        if name is None:
            raise GGUFFormatError(f"{gguf_path}: tensor {entry.name} is not part of a dense {arch} model")
        t = torch.from_numpy(dequantize(f.raw(entry), entry.ggml_type, entry.shape).copy())
        if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            t = unpermute_qk(t, n_head if "q_proj" in name else spec.num_key_value_heads)
        state[name] = t
    return target_from_state(spec, state, dtype=dtype, device=device, where=str(gguf_path))
