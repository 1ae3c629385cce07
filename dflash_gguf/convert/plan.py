"""config + inventory + format + outtype → ConversionPlan: every KV and every tensor, decided
before a byte is written. Pure (no tensor data is read), so it backs --dry-run and is
testable without weights.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from ..config import DrafterConfig
from ..errors import ConfigError, UsageError, WeightsError
from ..formats import Format, meta_from_config
from ..formats.names import DROPPED_TENSORS, FC, HIDDEN_NORM, OPTIONAL_TENSORS, PRE_FFN_NORM

OPTIONAL_TENSORS_EMBED = "embed_tokens.weight"
from ..fileio.gguf_constants import GGMLQuantizationType as Q
from ..fileio.gguf_constants import GGUFValueType
from ..fileio.gguf_writer import tensor_nbytes
from ..fileio.types import KV
from ..fileio.safetensors import FLOAT_DTYPES, SourceTensor
from .outtypes import OUTTYPES

if TYPE_CHECKING:
    import numpy as np

# general.file_type (llama_ftype) for each outtype
FILE_TYPES = {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7, "q4_k_m": 15}
_SOURCE_TYPES = {"F32": Q.F32, "F16": Q.F16, "BF16": Q.BF16}
ROPE_FREQS = "rope_freqs.weight"


@dataclass(frozen=True)
class TensorPlan:
    src: str | None  # checkpoint name, or None for a generated tensor (rope_freqs)
    dst: str
    shape: tuple[int, ...]  # numpy order
    src_dtype: str
    ggml_type: Q
    nbytes: int
    reason: str
    # data changed on the way: "neox-permute" (rope_is_neox_style false), "mask-row" (MiMo side file)
    transform: str | None = None


@dataclass(frozen=True)
class ConversionPlan:
    format: str
    arch: str
    outtype: str
    kvs: list[KV]
    tensors: list[TensorPlan]
    dropped: list[tuple[str, str]] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    taps_zlab: tuple[int, ...] = ()
    taps_stored: tuple[int, ...] = ()
    generated: dict[str, "np.ndarray"] = field(default_factory=dict)  # src-less tensors' data (DSpark)

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    def to_json(self) -> dict:
        return {
            "format": self.format,
            "architecture": self.arch,
            "outtype": self.outtype,
            "target_layers": {"zlab_output_of_layer": list(self.taps_zlab), "stored": list(self.taps_stored)},
            "kv": [kv.to_json() for kv in self.kvs],
            "tensors": [
                {"source": t.src, "name": t.dst, "shape": list(t.shape), "ne": list(reversed(t.shape)),
                 "source_dtype": t.src_dtype, "type": t.ggml_type.name, "nbytes": t.nbytes, "reason": t.reason,
                 "transform": t.transform}
                for t in self.tensors
            ],
            "dropped": [{"name": n, "reason": r} for n, r in self.dropped],
            "config_sources": self.sources,
            "warnings": self.warnings,
            "total_tensor_bytes": self.total_bytes,
        }


def expected_shapes(cfg: DrafterConfig, target_hidden: int) -> dict[str, tuple[int, ...]]:
    """Every tensor the config implies (checkpoint names without ``model.``) and its shape."""
    H, I, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    nq, nkv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    out: dict[str, tuple[int, ...]] = {
        FC: (H, cfg.n_taps * target_hidden),
        HIDDEN_NORM: (H,),
        "norm.weight": (H,),
    }
    per_layer = {
        "input_layernorm.weight": (H,), PRE_FFN_NORM: (H,),
        **({"self_attn.attention_sink_bias": (cfg.num_attention_heads,)} if cfg.attention_sink_bias else {}),
        "self_attn.q_proj.weight": (nq, H), "self_attn.k_proj.weight": (nkv, H),
        "self_attn.v_proj.weight": (nkv, H), "self_attn.o_proj.weight": (H, nq),
        "self_attn.q_norm.weight": (hd,), "self_attn.k_norm.weight": (hd,),
        "mlp.gate_proj.weight": (I, H), "mlp.up_proj.weight": (I, H), "mlp.down_proj.weight": (H, I),
    }
    if cfg.attention_bias:
        per_layer.update({"self_attn.q_proj.bias": (nq,), "self_attn.k_proj.bias": (nkv,),
                          "self_attn.v_proj.bias": (nkv,)})
    if cfg.is_dflash2:
        k, g = cfg.conv_kernel_size, cfg.conv_group_size
        proj = (2 * k * (H // g), H)
        per_layer.update({"attention_conv.base_kernel": (2, k, H), "attention_conv.kernel_projection.weight": proj,
                          "mlp_conv.base_kernel": (2, k, H), "mlp_conv.kernel_projection.weight": proj})
        out.update({"candidate_selector.hidden_projection.weight": (cfg.selector_rank, H),
                    "candidate_selector.predecessor_codebook": (cfg.vocab_size, cfg.selector_rank),
                    "candidate_selector.successor_codebook": (cfg.vocab_size, cfg.selector_rank)})
    for i in range(cfg.num_hidden_layers):
        for suffix, shape in per_layer.items():
            out[f"layers.{i}.{suffix}"] = shape
    return out


def build_plan(
    cfg: DrafterConfig,
    fmt: Format,
    inventory: Sequence[SourceTensor],
    outtype: str = "auto",
    *,
    tokenizer: Sequence[KV] = (),
    target_hidden: int | None = None,
    target_mrope: bool = False,
    name: str | None = None,
    extra_sources: Mapping[str, SourceTensor] | None = None,
    mask_row: bool = False,
) -> ConversionPlan:
    """Validate the inventory against the config and decide every output tensor and KV.

    Raises:
        WeightsError: missing / unexpected tensors, wrong shapes, non-float dtypes.
        UsageError: an unknown outtype or a format that cannot hold this drafter.
    """
    if outtype not in OUTTYPES:
        raise UsageError(f"unknown --outtype {outtype!r}; choose one of: {', '.join(OUTTYPES)}")
    if cfg.max_position_embeddings is None and fmt.name != "lucebox":
        # llama.cpp's loader requires <arch>.context_length; its converter silently omits it.
        raise ConfigError(f"{cfg.path}: max_position_embeddings is missing; --format {fmt.name} needs it "
                          "(<arch>.context_length is required by the loader). Add the drafter's trained context.")
    th = target_hidden or cfg.target_hidden_size or cfg.hidden_size
    expected = expected_shapes(cfg, th)
    by_name = {t.name.removeprefix("model."): t for t in inventory}
    extra = {n: t for n, t in extra_sources.items() if n not in by_name} if extra_sources else {}
    if mask_row and fmt.name == "lucebox":
        raise UsageError("mask_embedding.pt: --format lucebox borrows the target's embeddings and cannot carry the "
                         "drafter's mask row; use --format llama.cpp (or dflash-draft)")
    by_name.update(extra)
    where = str(inventory[0].file.parent) if inventory else str(cfg.path.parent)
    ds = None
    if cfg.dspark is not None:  # DSpark hook: its heads, d2t, Gemma4's block (convert/dspark.py)
        from .dspark import plan_dspark

        ds = plan_dspark(cfg, expected, by_name, where)
        expected, by_name = ds.expected, ds.by_name

    missing = [n for n in expected if n not in by_name]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise WeightsError(
            f"{where}: tensor {missing[0]}{more} is missing; config.json implies "
            f"{len(expected)} tensors ({_family(cfg)}, {cfg.num_hidden_layers} layers). "
            "Is the checkpoint complete and does config.json belong to it?"
        )
    dropped: list[tuple[str, str]] = []
    optional: list[str] = []
    unknown: list[str] = []
    for n, t in by_name.items():
        if n in expected:
            continue
        kind = None if ds is None else ds.classify(n)  # DSpark hook: d2t, t2d, a full-vocab lm_head, conf bias
        if kind == "written":
            continue
        if kind == "dropped":
            dropped.append((t.name, ds.claimed[n]))
        elif kind == "optional":
            optional.append(n)
        elif n in DROPPED_TENSORS or n.endswith("rotary_emb.inv_freq"):
            dropped.append((t.name, DROPPED_TENSORS.get(n, "rotary buffer, recomputed by the runtime")))
        elif n in OPTIONAL_TENSORS:
            if fmt.name == "lucebox":
                dropped.append((t.name, "Lucebox borrows the target's embeddings/head and does not map it"))
            else:
                optional.append(n)
        else:
            unknown.append(t.name)
    if unknown:
        raise WeightsError(
            f"{where}: unexpected tensor(s) {', '.join(unknown[:5])}{' …' if len(unknown) > 5 else ''} are not part "
            "of a DFlash drafter; refusing to guess where they go (remove them or file an issue)"
        )

    for n, shape in expected.items():
        t = by_name[n]
        if t.shape != shape:
            hint = ""
            if n == FC:
                hint = f" = [hidden {cfg.hidden_size}, {cfg.n_taps} taps × target hidden {th}]"
            elif t.shape == tuple(reversed(shape)):
                hint = " (it looks transposed)"
            raise WeightsError(f"{where}: {t.name} has shape {list(t.shape)} but config.json implies {list(shape)}{hint}")
    for n in optional:
        t = by_name[n]
        if ds is not None and n in ds.optional:
            if t.shape != ds.optional[n]:
                raise WeightsError(f"{where}: {t.name} has shape {list(t.shape)} but config.json implies "
                                   f"{list(ds.optional[n])}")
        elif len(t.shape) != 2 or t.shape[1] != cfg.hidden_size:
            raise WeightsError(f"{where}: {t.name} has shape {list(t.shape)}, expected [vocab, {cfg.hidden_size}]")
    for n in [*expected, *optional]:
        t = by_name[n]
        if t.dtype not in FLOAT_DTYPES:
            raise WeightsError(f"{where}: {t.name} has dtype {t.dtype}; DFlash weights must be BF16, F16 or F32")
        if t.numel == 0:
            raise WeightsError(f"{where}: {t.name} is empty")

    # Tensor order: checkpoint names sorted, as llama.cpp's converter iterates them.
    chosen = sorted([*expected, *optional])
    quant = outtype in ("q8_0", "q4_k_m")
    tensor_plans = _choose_types(fmt, [(n, by_name[n]) for n in chosen], "auto" if quant else outtype,
                                 None if ds is None else ds.gguf_name)
    tensor_plans = [_mark_transform(cfg, p, n, mask_row, n in extra) for p, n in zip(tensor_plans, chosen)]
    generated = {}
    if ds is not None:  # DSpark hook: generated rope_freqs first, d2t last (as mainline writes them)
        head, tail = ds.extra_tensors()
        gen_plans = [TensorPlan(None, n, a.shape, dtype, q, a.nbytes, why) for n, a, dtype, q, why in head + tail]
        tensor_plans = gen_plans[:len(head)] + tensor_plans + gen_plans[len(head):]
        generated = {n: a for n, a, *_rest in head + tail}
    if cfg.rope_scaling is not None and cfg.rope_scaling.type == "llama3":
        n = cfg.rope_dim // 2
        tensor_plans.insert(0, TensorPlan(None, ROPE_FREQS, (n,), "F32", Q.F32, 4 * n,
                                          "llama3 rope scaling: per-frequency factors the runtime reads"))

    file_type = None if quant else FILE_TYPES.get(outtype)
    if file_type is None:  # auto: the dominant source float type
        big = max((t for t in inventory if t.dtype in FLOAT_DTYPES), key=lambda t: t.nbytes)
        file_type = {"F32": 0, "F16": 1, "BF16": 32}[big.dtype]
    meta = meta_from_config(cfg, n_target_features=cfg.n_taps * th, tokenizer=tokenizer, file_type=file_type,
                            name=name, target_mrope=target_mrope)
    if ds is not None:  # DSpark hook: sample_from_anchor, has_confidence_head, Gemma4's overrides
        ds.apply(meta)
    arch, kvs = fmt.kvs(meta)
    if quant:
        # "convert --outtype q*" is "convert --outtype auto, then quantize": same layout, same bytes.
        from ..quants.layout import requantize_layout

        kvs, entries = requantize_layout([KV("general.architecture", arch, GGUFValueType.STRING), *kvs],
                                         [(t.dst, t.shape, t.ggml_type) for t in tensor_plans], outtype, where=where)
        by_dst = {t.dst: t for t in tensor_plans}
        tensor_plans = [TensorPlan(by_dst[e.name].src, e.name, e.shape, by_dst[e.name].src_dtype, e.ggml_type,
                                   e.nbytes, e.reason, by_dst[e.name].transform) for e in entries]
    warnings = list(cfg.warnings)
    if fmt.name != "llama.cpp" and cfg.is_causal is None and cfg.layer_types and "sliding_attention" in cfg.layer_types:
        warnings.append("the reference makes sliding layers causal and full layers non-causal; "
                        "runtimes apply one causal flag to all drafter layers")
    return ConversionPlan(
        format=fmt.name, arch=arch, outtype=outtype, kvs=kvs, tensors=tensor_plans, dropped=dropped,
        sources=dict(cfg.sources), warnings=warnings, taps_zlab=tuple(cfg.target_layer_ids),
        taps_stored=tuple(fmt.stored_taps(meta)), generated=generated,
    )


def _family(cfg: DrafterConfig) -> str:
    names = {"dflash1": "DFlash1", "dflash2": "DFlash2", "dspark": "DSpark", "gemma4-dspark": "Gemma4 DSpark"}
    return names[cfg.family]


def keep_f32(gguf_name: str, shape: Sequence[int]) -> str | None:
    """llama.cpp's converter rule: 1-D tensors, ``*_norm.weight`` and non-``.weight`` names stay F32."""
    if len(shape) <= 1:
        return "1-D: kept F32"
    if gguf_name.endswith("_norm.weight"):
        return "norm: kept F32"
    if not gguf_name.endswith(".weight"):
        return "not a .weight: kept F32"
    return None


def _choose_types(fmt: Format, items: list[tuple[str, SourceTensor]], outtype: str,
                  rename: "Callable[[Format, str], str | None] | None" = None) -> list[TensorPlan]:
    plans: list[TensorPlan] = []
    for n, t in items:
        dst = fmt.gguf_name(n) if rename is None else rename(fmt, n)
        assert dst is not None, n
        f32_reason = keep_f32(dst, t.shape)
        if f32_reason:
            qtype, reason = Q.F32, f32_reason
        elif outtype == "auto":
            qtype, reason = _SOURCE_TYPES[t.dtype], f"auto: source {t.dtype} kept"
        else:
            qtype, reason = {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16}[outtype], f"--outtype {outtype}"
        plans.append(TensorPlan(t.name, dst, t.shape, t.dtype, qtype, tensor_nbytes(t.shape, qtype), reason))
    return plans


NEOX_PERMUTED = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.q_norm.weight",
                 "self_attn.k_norm.weight")  # mainline's list (biases are not permuted there either)


def _mark_transform(cfg: DrafterConfig, p: TensorPlan, name: str, mask_row: bool, from_target: bool) -> TensorPlan:
    transform, reason = None, p.reason
    if not cfg.rope_is_neox_style and name.endswith(NEOX_PERMUTED):
        transform, reason = "neox-permute", reason + "; rows permuted interleaved → NeoX per head"
    elif mask_row and name == OPTIONAL_TENSORS_EMBED:
        transform, reason = "mask-row", reason + "; mask row from mask_embedding.pt"
    if from_target:
        reason += f"; from the target ({p.src})"
    return replace(p, transform=transform, reason=reason)


def llama3_rope_factors(cfg: DrafterConfig):
    """Per-frequency scaling factors for llama3 rope, as llama.cpp's LlamaModel computes them."""
    import numpy as np

    rs = cfg.rope_scaling
    dim = cfg.rope_dim
    freqs = 1.0 / (cfg.rope_theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor = rs.factor
    low, high = rs.llama3_freq_factors
    old = rs.original_context_length or 8192
    low_wavelen, high_wavelen = old / low, old / high
    out = []
    for f in freqs.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)

