"""Load the reference drafter / target from Hugging Face directories (config.json + safetensors)."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import nn

from ..config import MASK_FILE, DrafterConfig, load_config, load_target_config
from ..errors import ConfigError, UsageError, WeightsError
from ..fileio.safetensors import FLOAT_DTYPES, read_inventory, read_raw, to_f32
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


def to_torch(a: np.ndarray) -> torch.Tensor:
    """A copy in torch's own (64-byte aligned) memory. numpy buffers need not be aligned alike, and
    BLAS chooses its GEMM kernel by alignment as well as by CPU: weights loaded from a GGUF and from
    safetensors must run through the same kernel for bit-equal logits."""
    return torch.from_numpy(np.ascontiguousarray(a)).clone()


def read_safetensors(model_dir: str | Path, cfg: DrafterConfig | None = None) -> dict[str, torch.Tensor]:
    """Every tensor of a HF model dir (``model.safetensors`` or sharded), read through the validated
    safetensors reader (``fileio.safetensors``: the same checks as convert); float tensors as exact
    float32 (bf16 → f32 is a shift), others in their stored dtype. A pre-quantized drafter
    (``cfg.quantization``) gives each quantized weight as convert dequantizes it
    (``convert.prequant``, mainline's float32 arithmetic), its scales folded in.

    Raises:
        InputError: no safetensors file, or one cannot be read.
        WeightsError: a corrupt or truncated header, a malformed index, a missing shard; a
            pre-quantized checkpoint convert does not read.
    """
    inventory = read_inventory(model_dir)
    pre = None
    if cfg is not None and cfg.quantization is not None:
        from ..convert.prequant import dequantize, split

        pre = split(cfg.quantization, {t.name.removeprefix("model."): t for t in inventory}, str(model_dir))
    tensors: dict[str, torch.Tensor] = {}
    for t in inventory:
        short = t.name.removeprefix("model.")
        if pre is not None and short in pre.consumed:
            continue
        shape = t.shape
        if pre is not None and short in pre.weights:
            data = dequantize(t, pre.weights[short])
            shape = pre.replaced[short].shape if short in pre.replaced else shape  # BitNet: unpacked in place
        else:
            data = to_f32(t) if t.dtype in FLOAT_DTYPES else read_raw(t)
        tensors[t.name] = to_torch(data.reshape(shape))
    for name, stand_in in (pre.added.items() if pre is not None else ()):  # pack-quantized weights
        tensors[name] = to_torch(dequantize(stand_in, pre.weights[name]).reshape(stand_in.shape))
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
    # index tables (DSpark's d2t) keep their integer dtype
    module.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()},
                           strict=True, assign=True)
    return module.to(device=device).eval()


def sanitize_drafter(state: dict[str, torch.Tensor], cfg: DrafterConfig) -> dict[str, torch.Tensor]:
    """The one place raw drafter tensor names get fixed.

    DSpark drafters keep their own ``embed_tokens``/``lm_head`` (mlx-dspark and llama.cpp use
    them when shipped) and ``d2t`` (checked against ``t2d``, which is then dropped: it is the
    same map seen from the target side).

    Raises:
        WeightsError: reduced-vocabulary maps on a DFlash drafter (z-lab's reference has none),
            or DSpark maps that map outside the vocabulary or disagree with each other.
    """
    from .dspark import check_vocab_maps

    where = str(cfg.path.parent)
    # MiMo's shards name tensors "model.layers.N…"; convert strips the prefix the same way
    state = {k.removeprefix("model."): v for k, v in state.items()}
    if cfg.dspark is None:
        if "d2t" in state or "t2d" in state:
            raise WeightsError(f"{where}: d2t/t2d reduced-vocabulary maps are not supported by the reference "
                               "for DFlash drafters")
        out = {k: v for k, v in state.items() if k not in DRAFTER_UNUSED}
    else:
        check_vocab_maps(state, cfg.vocab_size, where)
        out = {k: v for k, v in state.items() if k not in ("t2d", "rotary_emb.inv_freq")}
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


def _check_depth(state: dict[str, torch.Tensor], n_layers: int, prefix: str, where: str) -> None:
    """The weights hold exactly layers 0..n_layers-1: checked before the module is built, which
    takes time in the number of layers (a corrupt config may claim tens of thousands)."""
    ids = (k[len(prefix):].split(".", 1)[0] for k in state if k.startswith(prefix))
    # a digit string too long for a layer id (or int()'s 4300-digit limit) counts as one past any depth
    found = {int(i) if len(i) <= 9 else 10**9 for i in ids if i.isascii() and i.isdigit()}
    # ids 0..n-1 exactly, compared without building range(n_layers) (a config may claim 2**31)
    if len(found) != n_layers or (found and (min(found) != 0 or max(found) != n_layers - 1)):
        raise WeightsError(f"{where}: the config says {n_layers} layers but the weights hold "
                           f"{len(found)} (ids {min(found, default=None)}..{max(found, default=None)}); "
                           "is this config.json the one that came with these weights?")


@contextmanager
def _sizes_from(where) -> Iterator[None]:
    """Building a module on the meta device allocates nothing, but torch still multiplies out the
    shapes config.json implies: sizes no tensor can have (hidden_size 2**31 - 1 times a fused
    width) overflow there. Said in one line, before any weight is compared."""
    try:
        yield
    except (RuntimeError, ValueError, OverflowError) as exc:
        why = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise ConfigError(f"{where}: the sizes in config.json make no buildable model ({why}); "
                          "is this config.json the one that came with these weights?") from None


def drafter_from_state(cfg: DrafterConfig, state: dict[str, torch.Tensor], *, dtype="float32",
                       device="auto") -> DFlashDrafter:
    """Build a drafter from an already-read state dict (used by GGUF loading too).

    Raises:
        WeightsError: missing / unexpected tensors or a shape the config does not imply.
    """
    from .dspark import layout_from_state
    from .rules import attention_rules

    attention_rules(cfg)  # a backbone the reference does not implement fails here, by name
    state = sanitize_drafter(state, cfg)
    _check_depth(state, cfg.num_hidden_layers, "layers.", str(cfg.path.parent))
    layout = layout_from_state(cfg, state) if cfg.dspark is not None else None
    with _sizes_from(cfg.path), torch.device("meta"):
        module = DFlashDrafter(cfg, layout)
    return _load_into(module, state, str(cfg.path.parent), resolve_dtype(dtype), resolve_device(device))


def target_from_state(spec: TargetSpec, state: dict[str, torch.Tensor], *, dtype="float32", device="auto",
                      where: str = "target") -> Target:
    _check_depth(state, spec.num_hidden_layers, "model.layers.", where)
    with _sizes_from(where), torch.device("meta"):
        module = Target(spec)
    target = _load_into(module, sanitize_target(state, spec), where, resolve_dtype(dtype), resolve_device(device))
    if spec.tie_word_embeddings:
        target.lm_head.weight = target.model.embed_tokens.weight  # one tensor, as in transformers
    return target


def read_mask_embedding(drafter_dir: Path, cfg: DrafterConfig) -> torch.Tensor | None:
    """MiMo's side file: one vector that replaces the MASK token's embedding row (the released
    checkpoint's own row is ~zero). vLLM (``qwen3_dflash.py``, PR #46104) and SGLang load it
    when present; the published file is ``{"mask_token_id", "embedding"}``, some exports save the
    bare vector. Read with ``weights_only=True`` (tensors and plain containers only) and checked
    as convert checks it (``convert.mask_embedding``: structure and metadata before any value,
    nothing loaded ever formatted whole).

    Raises:
        WeightsError: an unreadable file, another mask id, a per-position table, or anything but
            ``hidden_size`` finite floats in a dense CPU tensor.
    """
    from ..convert.mask_embedding import describe, embedding_of, mask_id_of, read_mask_file

    path = drafter_dir / MASK_FILE
    if not path.is_file():
        return None
    got = read_mask_file(path, cfg.hidden_size)
    if isinstance(got, dict):
        if "per_position" in got and not isinstance(got["per_position"], (bool, int, type(None))):
            raise WeightsError(f"{path}: per_position is {describe(got['per_position'])}; expected true or false")
        if got.get("per_position"):
            raise WeightsError(f"{path}: per-position mask embeddings are not supported by the reference")
        if "mask_token_id" in got:
            mask_id = mask_id_of(got["mask_token_id"], path)
            if mask_id != cfg.mask_token_id:
                raise WeightsError(f"{path}: for mask_token_id {mask_id}, but the config's is {cfg.mask_token_id}")
        got = got["embedding"] if "embedding" in got else next(iter(got.values())) if len(got) == 1 else None
    if not isinstance(got, torch.Tensor) or got.numel() != cfg.hidden_size:  # numel: from the shape, no data read
        raise WeightsError(f"{path}: expected one embedding of {cfg.hidden_size} values, got {describe(got)}")
    return embedding_of(got, path, cfg.hidden_size, flat_only=False).float()


def attach_mask_embedding(model: DFlashDrafter) -> DFlashDrafter:
    """Give a checkpoint-loaded drafter the ``mask_embedding.pt`` beside its config, if any."""
    mask = read_mask_embedding(model.cfg.path.parent, model.cfg)
    if mask is not None:
        model.mask_embedding = mask.to(device=model.fc.weight.device, dtype=model.fc.weight.dtype)
    return model


def load_drafter(drafter_dir: str | Path, *, dtype: str | torch.dtype = "float32",
                 device: str | torch.device = "auto") -> DFlashDrafter:
    """Load a DFlash1/DFlash2/DSpark drafter from its HF directory (and MiMo's ``mask_embedding.pt``).

    Raises:
        ConfigError: config.json missing or invalid.
        WeightsError: safetensors missing, unreadable or not matching the config.
        UsageError: an unknown dtype, or CUDA asked for without one.
    """
    cfg = load_config(drafter_dir)
    return attach_mask_embedding(drafter_from_state(cfg, read_safetensors(cfg.path.parent, cfg), dtype=dtype,
                                                    device=device))


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


def drafter_from_gguf(gguf_path: str | Path, config: str | Path | DrafterConfig | None = None, *,
                      dtype: str | torch.dtype = "float32", device: str | torch.device = "auto") -> DFlashDrafter:
    """The drafter a runtime would run from a GGUF: its constants and its (dequantized) weights.

    Any of the four drafter GGUF spellings works (``from_gguf.drafter_from_gguf`` detects the
    format and maps names back). With ``config`` (the checkpoint's config.json), the two must
    describe the same drafter (taps, depth, width, block size, mask id); constants that differ
    (theta, eps, window, causality, softcap, …) are kept as the GGUF has them and listed in
    the returned module's ``gguf_notes``, so parity shows what a wrong constant costs.

    Raises:
        GGUFFormatError: not a DFlash drafter GGUF, or a tensor name no format defines.
        WeightsError: the GGUF and the config describe different drafters, or tensors that do
            not fill the architecture.
    """
    from dataclasses import replace

    from .from_gguf import compare_with_config
    from .from_gguf import drafter_from_gguf as read_drafter

    gcfg, weights, _fmt = read_drafter(gguf_path)
    notes: list[str] = []
    if config is not None:
        cfg = config if isinstance(config, DrafterConfig) else load_config(config)
        if cfg.rope_scaling is not None and cfg.rope_scaling.type == "llama3":
            # the GGUF holds llama3 scaling as a rope_freqs tensor; the reference rebuilds it from the config
            gcfg = replace(gcfg, rope_scaling=cfg.rope_scaling)
        notes = compare_with_config(gcfg, cfg, gguf_path)
        if (cfg.path.parent / MASK_FILE).is_file():
            notes.append(f"the checkpoint ships {MASK_FILE} (the MASK row vLLM and SGLang substitute); the GGUF "
                         "has no such tensor, so the GGUF drafter embeds MASK with the target's row")
    state = {k: to_torch(weights.pop(k)) for k in list(weights)}
    model = drafter_from_state(gcfg, state, dtype=dtype, device=device)
    model.gguf_notes = notes
    return model


def target_from_gguf(gguf_path: str | Path, *, dtype: str | torch.dtype = "float32",
                     device: str | torch.device = "auto") -> Target:
    """A dense ``qwen3`` / ``llama`` target from a llama.cpp GGUF (tensors dequantized; llama's
    Q/K rows un-permuted as llama.cpp's converter permuted them; see ``from_gguf``).

    Raises:
        GGUFFormatError: another architecture, a missing size key, or an unknown tensor name.
        ConfigError: RoPE the reference cannot rebuild from GGUF keys (a ``rope_freqs`` tensor).
    """
    from .from_gguf import target_from_gguf as read_target

    tc, weights = read_target(gguf_path)
    spec = TargetSpec.from_config(tc)
    state = {k: to_torch(weights.pop(k)) for k in list(weights)}
    return target_from_state(spec, state, dtype=dtype, device=device, where=str(gguf_path))
