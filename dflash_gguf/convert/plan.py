"""config + inventory + format + outtype → ConversionPlan: every KV and every tensor, decided
before a byte is written. Pure (no tensor data is read), so it backs --dry-run and is
testable without weights.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Mapping, Sequence

from ..config import DrafterConfig
from ..errors import ConfigError, UsageError, WeightsError
from ..formats import Format, meta_from_config
from ..formats.names import DROPPED_TENSORS, FC, GLOBAL, LAYER, OPTIONAL_TENSORS, ROPE_FREQS
from ..fileio.gguf_constants import GGMLQuantizationType as Q
from ..fileio.gguf_constants import GGUFValueType
from ..fileio.gguf_writer import tensor_nbytes
from ..fileio.types import KV
from ..fileio.safetensors import FLOAT_DTYPES, SourceTensor
from .family import PlanExtension
from .metadata import MetadataInputs, general_kvs
from .outtypes import OUTTYPES, QUANT_OUTTYPES
from .prequant import Dequant, Prequantized, auto_outtype, fp8_as_q8_type, split
from .rope_factors import llama3_rope_factors  # noqa: F401  (convert's import of it)

if TYPE_CHECKING:
    import numpy as np

# general.file_type (llama_ftype) for each outtype
FILE_TYPES = {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7, "q4_k_m": 15}
_SOURCE_TYPES = {"F32": Q.F32, "F16": Q.F16, "BF16": Q.BF16}


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
    dequant: dict[str, Dequant] = field(default_factory=dict)  # source name → its scale (convert/prequant.py)
    stacked: dict[str, tuple[str, ...]] = field(default_factory=dict)  # dst → sources (convert/deepseek_v4.py)

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
    """Every tensor the config implies (checkpoint names without ``model.``) and its shape, from
    the name table's shape rules (``formats.names.LAYER`` / ``GLOBAL``)."""
    H, hd = cfg.hidden_size, cfg.head_dim
    sizes = {"H": H, "I": cfg.intermediate_size, "D": hd, "N": cfg.num_attention_heads,
             "Q": cfg.num_attention_heads * hd, "KV": cfg.num_key_value_heads * hd, "V": cfg.vocab_size,
             "F": cfg.n_taps * target_hidden, "2": 2}
    if cfg.is_dflash2:
        k, g = cfg.conv_kernel_size, cfg.conv_group_size
        sizes.update(K=k, P=2 * k * (H // g), R=cfg.selector_rank)
    has = {"": True, "bias": cfg.attention_bias, "sinks": cfg.attention_sink_bias, "dflash2": cfg.is_dflash2}

    def implied(table):
        return {name: tuple(sizes[d] for d in t.shape) for name, t in table.items() if has.get(t.when, False)}

    out = implied(GLOBAL)
    per_layer = implied(LAYER)
    for i in range(cfg.num_hidden_layers):
        for suffix, shape in per_layer.items():
            out[f"layers.{i}.{suffix}"] = shape
    return out


@dataclass(frozen=True)
class Routes:
    """Where every checkpoint tensor goes, before anything is validated: the part of the plan
    compare-weights reads too (names without ``model.``)."""

    expected: dict[str, tuple[int, ...]]  # required by the config, with shapes
    by_name: dict[str, SourceTensor]  # the inventory (and target tables), under the family's names
    written: list[str]  # sorted: what becomes a GGUF tensor (expected and present optional ones)
    optional: list[str]  # present, not required
    dropped: list[tuple[str, str]]  # (checkpoint name, why)
    unknown: list[str]  # checkpoint names no rule knows
    missing: list[str]  # expected but absent
    from_target: frozenset[str]  # names that came from the target (extra_sources)
    family: PlanExtension
    prequant: Prequantized | None = None  # a pre-quantized checkpoint's scales (its scales are not in by_name)

    def dequant(self, name: str) -> Dequant | None:
        """How checkpoint tensor ``name`` (without ``model.``) is dequantized; None: read as stored."""
        return self.prequant.weights.get(name) if self.prequant else None

    def gguf_name(self, fmt: Format, name: str) -> str:
        dst = self.family.gguf_name(fmt, name)
        assert dst is not None, name
        return dst


def plan_extension(cfg: DrafterConfig, expected: dict[str, tuple[int, ...]], by_name: dict[str, SourceTensor],
                   where: str) -> PlanExtension:
    """The family's extension for ``cfg``: the one place a family is chosen for conversion."""
    if cfg.dspark is not None:
        # imported here: it loads numpy and gguf-py, which a plain convert from a target GGUF never needs
        from .dspark import plan_dspark

        return plan_dspark(cfg, expected, by_name, where)
    return PlanExtension(dict(expected), dict(by_name))


def route_tensors(cfg: DrafterConfig, fmt: Format, inventory: Sequence[SourceTensor], *, target_hidden: int,
                  extra_sources: Mapping[str, SourceTensor] | None = None) -> Routes:
    """Decide what happens to each checkpoint tensor (kept, dropped with a reason, unknown) and
    which expected ones are missing; refuses nothing but a family's own structural errors.

    Raises:
        WeightsError: a family's tensors that cannot be routed (a half DSpark Markov head, a bad d2t);
            a pre-quantized checkpoint we cannot read (``prequant.split``).
    """
    by_name = {t.name.removeprefix("model."): t for t in inventory}
    where = str(inventory[0].file.parent) if inventory else str(cfg.path.parent)
    prequant = split(cfg.quantization, by_name, where)
    added = prequant.added if prequant is not None else {}
    if prequant is not None:  # scales are folded into their weights: not tensors of their own
        by_name = {n: prequant.replaced.get(n, t) for n, t in by_name.items() if n not in prequant.consumed} | added
    extra = {n: t for n, t in extra_sources.items() if n not in by_name} if extra_sources else {}
    by_name.update(extra)
    fam = plan_extension(cfg, expected_shapes(cfg, target_hidden), by_name, where)
    expected = fam.expected
    dropped: list[tuple[str, str]] = []
    optional: list[str] = []
    unknown: list[str] = []
    for n, t in fam.by_name.items():
        if n in expected:
            continue
        kind = fam.classify(n)
        if kind == "written":
            continue
        if kind == "dropped":
            dropped.append((t.name, fam.claimed[n]))
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
    missing = [n for n in expected if n not in fam.by_name]
    # Tensor order: as llama.cpp's converter iterates them, names sorted within each shard and
    # shards by file name (``ModelBase.index_tensors``); one file: names sorted. Weights a
    # pre-quantized checkpoint does not store (pack-quantized) come after all of them, in that order.
    # NVFP4 weights (convert/prequant_fp4.py) come before every other tensor: mainline writes them first.
    first = {n for n, d in prequant.weights.items() if getattr(d, "nvfp4", False)} if prequant else set()
    order = None
    if len({t.file for t in inventory}) > 1:
        order = lambda n: (n not in first, n in added, fam.by_name[n].file.name if n not in extra else "", n)  # noqa: E731
    elif added:
        order = lambda n: (n not in first, n in added, n)  # noqa: E731
    written = sorted([*(n for n in expected if n in fam.by_name), *optional], key=order)
    return Routes(expected, fam.by_name, written, optional, dropped, unknown, missing, frozenset(extra), fam, prequant)


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
    metadata: MetadataInputs | None = None,
    fp8_as_q8: bool = False,
) -> ConversionPlan:
    """Validate the inventory against the config and decide every output tensor and KV.
    ``metadata``: where the general.* keys come from as mainline reads them (model card,
    directory name...); without it general.name is ``name``. ``fp8_as_q8``: mainline's
    ``--fp8-as-q8``, FP8 weights of a pre-quantized checkpoint written as Q8_0.

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
    if mask_row and fmt.name == "lucebox":
        raise UsageError("mask_embedding.pt: --format lucebox borrows the target's embeddings and cannot carry the "
                         "drafter's mask row; use --format llama.cpp (or dflash-draft)")
    th = target_hidden or cfg.target_hidden_size or cfg.hidden_size
    where = str(inventory[0].file.parent) if inventory else str(cfg.path.parent)
    routes = route_tensors(cfg, fmt, inventory, target_hidden=th, extra_sources=extra_sources)
    _validate(cfg, routes, th, where)

    if mask_row and routes.dequant(MASK_ROW_SOURCE) is not None:
        raise WeightsError(f"{where}: mask_embedding.pt patches a pre-quantized embedding table, which dflash-gguf "
                           "does not do yet; give a BF16/F16/F32 checkpoint")
    quant = outtype in QUANT_OUTTYPES
    if fp8_as_q8 and quant and outtype != "q8_0":
        raise UsageError(f"--fp8-as-q8 goes with --outtype auto, f32, f16, bf16 or q8_0 (llama.cpp's converter "
                         f"has no {outtype}); drop one of the two")
    float_type = "auto" if quant else outtype
    if routes.prequant is not None and float_type == "auto":
        float_type = auto_outtype(inventory)  # one type for every tensor, as mainline guesses it
    tensor_plans = _choose_types(fmt, routes, float_type, fp8_as_q8 and not quant)
    tensor_plans = [replace(p, transform=transform_of(cfg, n, mask_row), reason=_reason(p, cfg, n, mask_row, routes))
                    for p, n in zip(tensor_plans, routes.written)]
    nvfp4, nvfp4_data, prec_a4 = [], {}, []
    if routes.prequant is not None:  # NVFP4 weights and their scale tensors go first (convert/prequant_fp4.py)
        from .prequant_fp4 import place_nvfp4

        nvfp4, tensor_plans, nvfp4_data, prec_a4 = place_nvfp4(tensor_plans, routes.written, routes, fmt.name, quant)
    head, tail = routes.family.generated()
    gen = [TensorPlan(None, n, a.shape, dtype, q, a.nbytes, why) for n, a, dtype, q, why in head + tail]
    tensor_plans = gen[:len(head)] + tensor_plans + gen[len(head):]
    generated = {n: a for n, a, *_rest in head + tail}
    if cfg.rope_scaling is not None and cfg.rope_scaling.type == "llama3":
        n = cfg.rope_dim // 2
        tensor_plans.insert(0, TensorPlan(None, ROPE_FREQS, (n,), "F32", Q.F32, 4 * n,
                                          "llama3 rope scaling: per-frequency factors the runtime reads"))
    tensor_plans = nvfp4 + tensor_plans
    generated |= nvfp4_data

    file_type = None if quant else FILE_TYPES.get(float_type)
    if file_type is None:  # auto: the dominant source float type
        big = max((t for t in inventory if t.dtype in FLOAT_DTYPES), key=lambda t: t.nbytes, default=None)
        file_type = {"F32": 0, "F16": 1, "BF16": 32}[big.dtype] if big else 1  # all FP8: mainline's F16
    if not quant and cfg.quantization is not None and cfg.quantization.nvfp4:
        file_type = 39  # mainline's MOSTLY_NVFP4 for any float outtype of an NVFP4 checkpoint
    # mainline sizes the model ("86K", "1.2B") from every tensor it writes, generated ones included
    general = None if metadata is None else general_kvs(metadata, [(t.dst, t.shape) for t in tensor_plans])
    meta = meta_from_config(cfg, n_target_features=cfg.n_taps * th, tokenizer=tokenizer, file_type=file_type,
                            name=name, target_mrope=target_mrope, general=general)
    routes.family.apply(meta)
    arch, kvs = fmt.kvs(meta)
    if prec_a4:  # W4A16_NVFP4 weights: written right after general.quantization_version
        at = next(i for i, kv in enumerate(kvs) if kv.key == "general.quantization_version") + 1
        kvs[at:at] = prec_a4
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
        format=fmt.name, arch=arch, outtype=outtype, kvs=kvs, tensors=tensor_plans, dropped=routes.dropped,
        sources=dict(cfg.sources), warnings=warnings, taps_zlab=tuple(cfg.target_layer_ids),
        taps_stored=tuple(fmt.stored_taps(meta)), generated=generated,
        dequant={src.name: how for n, how in (routes.prequant.weights.items() if routes.prequant else ())
                 if (src := routes.by_name.get(n)) is not None},
    )


def _validate(cfg: DrafterConfig, routes: Routes, th: int, where: str) -> None:
    """convert's refusals: anything missing, unknown, mis-shaped, empty or not a float."""
    expected, by_name = routes.expected, routes.by_name
    if routes.missing:
        more = f" (and {len(routes.missing) - 1} more)" if len(routes.missing) > 1 else ""
        raise WeightsError(
            f"{where}: tensor {routes.missing[0]}{more} is missing; config.json implies "
            f"{len(expected)} tensors ({_family(cfg)}, {cfg.num_hidden_layers} layers). "
            "Is the checkpoint complete and does config.json belong to it?"
        )
    if routes.unknown:
        unknown = routes.unknown
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
    for n in routes.optional:
        t = by_name[n]
        if n in routes.family.optional:
            if t.shape != routes.family.optional[n]:
                raise WeightsError(f"{where}: {t.name} has shape {list(t.shape)} but config.json implies "
                                   f"{list(routes.family.optional[n])}")
        elif len(t.shape) != 2 or t.shape[1] != cfg.hidden_size:
            raise WeightsError(f"{where}: {t.name} has shape {list(t.shape)}, expected [vocab, {cfg.hidden_size}]")
    for n in routes.written:
        t = by_name[n]
        if t.dtype not in FLOAT_DTYPES and routes.dequant(n) is None:
            raise WeightsError(f"{where}: {t.name} has dtype {t.dtype}; DFlash weights must be BF16, F16 or F32")
        if t.numel == 0:
            raise WeightsError(f"{where}: {t.name} is empty")


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


def _choose_types(fmt: Format, routes: Routes, outtype: str, fp8_as_q8: bool = False) -> list[TensorPlan]:
    plans: list[TensorPlan] = []
    for n in routes.written:
        t = routes.by_name[n]
        dst = routes.gguf_name(fmt, n)
        f32_reason = keep_f32(dst, t.shape)
        deq = routes.dequant(n)
        forced = fp8_as_q8_type(dst, t.shape) if fp8_as_q8 and deq is not None and deq.fp8 else None
        if getattr(deq, "nvfp4", False):
            qtype, reason, deq = Q.NVFP4, f"NVFP4 repacked to ggml blocks, lossless ({routes.prequant.label})", None
        elif forced is not None:
            qtype, reason = forced, f"--fp8-as-q8: FP8 weight as {forced.name}"
        elif f32_reason:
            qtype, reason = Q.F32, f32_reason
        elif outtype == "auto":
            qtype, reason = _SOURCE_TYPES[t.dtype], f"auto: source {t.dtype} kept"
        else:
            qtype, reason = {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16}[outtype], f"--outtype {outtype}"
        if deq is not None:
            reason += f"; dequantized ({routes.prequant.label})"
        plans.append(TensorPlan(t.name, dst, t.shape, t.dtype, qtype, tensor_nbytes(t.shape, qtype), reason))
    return plans


NEOX_PERMUTED = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.q_norm.weight",
                 "self_attn.k_norm.weight")  # mainline's list (biases are not permuted there either)
MASK_ROW_SOURCE = "embed_tokens.weight"  # the table whose mask row mask_embedding.pt replaces
# what convert does to a tensor's data on the way (TensorPlan.transform)
NEOX_PERMUTE, MASK_ROW = "neox-permute", "mask-row"


def transform_of(cfg: DrafterConfig, name: str, mask_row: bool) -> str | None:
    """What convert does to checkpoint tensor ``name``'s data (None: copied as is)."""
    if not cfg.rope_is_neox_style and name.endswith(NEOX_PERMUTED):
        return NEOX_PERMUTE
    if mask_row and name == MASK_ROW_SOURCE:
        return MASK_ROW
    return None


def _reason(p: TensorPlan, cfg: DrafterConfig, name: str, mask_row: bool, routes: Routes) -> str:
    reason = p.reason + {NEOX_PERMUTE: "; rows permuted interleaved → NeoX per head",
                         MASK_ROW: "; mask row from mask_embedding.pt", None: ""}[transform_of(cfg, name, mask_row)]
    if name in routes.from_target:
        reason += f"; from the target ({p.src})"
    return reason
