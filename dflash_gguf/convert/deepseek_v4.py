"""DeepSeek-V4 DSpark: the draft a DeepSeek-V4 checkpoint carries as ``mtp.*`` stages → the
``dflash`` GGUF llama.cpp's converter writes for it (``convert_hf_to_gguf.py --dspark``).

What mainline does (``conversion/deepseek.py``: ``DeepseekV4DSparkModel`` over
``DeepseekV4Model``), rule by rule, and so what this plan does:

* only ``mtp.<stage>.*`` tensors are the draft; the stages become blocks ``0..n-1`` and the
  draft's own tensors (``main_proj``, heads, ``hc_head_*``) root tensors (``ROOT``);
* an FP8 weight with a ``.scale`` beside it is dequantized with 128×128 E8M0 blocks and
  written as Q8_0 (``dequant_model``, ``tensor_force_quant``); an F32 source stays F32, a BF16
  matrix BF16; 1-D BF16 tensors become F32 (the converter's rule for 1-D tensors);
* the routed experts' FP4 codes and E8M0 scales are repacked, losslessly, into one MXFP4
  tensor per stage and projection (``repack_mxfp4_blocks``), written before everything else
  (``generate_extra_tensors`` runs first), then the rest in reading order;
* ``general.file_type`` is MOSTLY_MXFP4_MOE whatever ``--outtype`` says (``prepare_tensors``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Sequence

from ..config.deepseek_v4 import DSV4DSparkConfig
from ..errors import UsageError, WeightsError
from ..fileio.gguf_constants import GGMLQuantizationType as Q
from ..fileio.gguf_constants import GGUFValueType as T
from ..fileio.gguf_writer import tensor_nbytes
from ..fileio.safetensors import FP8_DTYPES, SourceTensor
from ..fileio.span_copy import Zeros
from ..formats import deepseek_v4 as names
from ..formats.meta import DrafterMeta
from ..fileio.types import KV
from .metadata import MetadataInputs, general_kvs
from .prequant import Dequant

if TYPE_CHECKING:
    import numpy as np

    from ..formats import Format
    from .plan import ConversionPlan

FP8_BLOCK = (128, 128)  # DeepSeek's weight_block_size; mainline's dequant_fp8_weight hard-codes it
CHAT_TEMPLATE = "tokenizer.chat_template"
MXFP4_REPACK = "mxfp4-repack"  # TensorPlan.transform of a stacked expert tensor
# --outtype values that change nothing here: every tensor's type is forced (see the module doc)
OUTTYPES = ("auto", "f32", "f16", "bf16", "q8_0")


def _stage(t: SourceTensor) -> tuple[int, str] | None:
    m = names.STAGE_RE.match(t.name)
    return (int(m.group(1)), m.group(2)) if m else None


def plan_dsv4(cfg: DSV4DSparkConfig, fmt: Format, inventory: Sequence[SourceTensor], outtype: str = "auto", *,
              tokenizer: Sequence[KV] = (), metadata: MetadataInputs | None = None) -> ConversionPlan:
    """Decide every tensor and key of the draft's GGUF (no tensor data is read). ``--fp8-as-q8``
    changes nothing: mainline writes this draft's FP8 weights as Q8_0 regardless.

    Raises:
        UsageError: a format other than llama.cpp, or a quantized --outtype.
        WeightsError: a stage tensor mainline does not know, a missing or mis-shaped one.
    """
    from .plan import ConversionPlan, TensorPlan

    if fmt.name != "llama.cpp":
        raise UsageError(f"DeepSeek-V4 DSpark drafts load only in mainline llama.cpp; use --format llama.cpp "
                         f"instead of --format {fmt.name}")
    if outtype not in OUTTYPES:
        raise UsageError(f"--outtype {outtype}: a DeepSeek-V4 DSpark draft's types are fixed (FP8 weights Q8_0, "
                         "experts MXFP4); convert with --outtype auto, then 'dflash-gguf quantize' the file")
    where = str(cfg.path.parent)
    staged = {t.name: s for t in inventory if (s := _stage(t)) is not None}
    stray = [t.name for t in inventory if t.name.startswith("mtp.") and t.name not in staged]
    if stray:  # mainline: "Unexpected DSpark tensor"
        raise WeightsError(f"{where}: {stray[0]:.120} is not a tensor of a DSpark stage (mtp.<stage>.<name>); the "
                           "checkpoint is corrupt or not a DeepSeek-V4 DSpark release")
    if not staged:
        raise WeightsError(f"{where}: no mtp.* tensor; this DeepSeek-V4 checkpoint carries no DSpark draft")
    by_name = {t.name: t for t in inventory}
    n_stages = 1 + max(s for s, _ in staged.values())
    experts: dict[tuple[int, str], dict[int, tuple[SourceTensor, SourceTensor]]] = {}
    dequant: dict[str, Dequant] = {}
    plans: list[TensorPlan] = []
    dropped: list[tuple[str, str]] = []
    scales = {n for n in staged if n.endswith(".scale")}
    # reading order: shards by file name, names sorted within each (ModelBase.index_tensors)
    for t in sorted((by_name[n] for n in staged), key=lambda t: (t.file.name, t.name)):
        stage, rest = staged[t.name]
        m = names.EXPERT_RE.match(rest)
        if m:
            if m.group(3) == "weight":
                scale = by_name.get(t.name.removesuffix("weight") + "scale")
                if scale is None:
                    raise WeightsError(f"{where}: routed expert {t.name} has no .scale beside it; the checkpoint "
                                       "is incomplete (download every shard)")
                experts.setdefault((stage, m.group(2)), {})[int(m.group(1))] = (t, scale)
            continue
        if t.name in scales and t.name.removesuffix("scale") + "weight" in by_name:
            continue  # folded into its weight below
        if rest in names.DROPPED:
            dropped.append((t.name, names.DROPPED[rest]))
            continue
        dst = names.gguf_name(rest, stage)
        if dst is None:
            raise WeightsError(f"{where}: {t.name:.120} is not a tensor of a DeepSeek-V4 DSpark stage llama.cpp's "
                               "converter knows; refusing to guess where it goes")
        scale = by_name.get(t.name.removesuffix("weight") + "scale") if t.name.endswith(".weight") else None
        qtype, reason, src_dtype = _type(t, scale, where)
        if qtype == Q.Q8_0:
            dequant[t.name] = Dequant(scale, FP8_BLOCK, True)
        plans.append(TensorPlan(t.name, dst, t.shape, src_dtype, qtype, tensor_nbytes(t.shape, qtype), reason))
    stacked = _experts(cfg, experts, n_stages, where)
    head = [TensorPlan(None, dst, shape, "F4_E2M1", Q.MXFP4, tensor_nbytes(shape, Q.MXFP4),
                       f"{len(srcs) // 2} routed experts' FP4 codes repacked into MXFP4 blocks (lossless)",
                       MXFP4_REPACK) for dst, (shape, srcs) in stacked.items()]
    tensors = head + plans
    _check_shapes(cfg, tensors, n_stages, where)

    meta = _meta(cfg, n_stages, tokenizer, metadata, [(p.dst, p.shape) for p in tensors])
    arch, kvs = fmt.kvs(meta)
    return ConversionPlan(
        format=fmt.name, arch=arch, outtype=outtype, kvs=kvs, tensors=tensors, dropped=dropped,
        sources=dict(cfg.sources), warnings=[], taps_zlab=tuple(cfg.target_layer_ids),
        taps_stored=tuple(fmt.stored_taps(meta)), dequant={by_name[n].name: d for n, d in dequant.items()},
        stacked={dst: srcs for dst, (_, srcs) in stacked.items()})


def _type(t: SourceTensor, scale: SourceTensor | None, where: str) -> tuple[Q, str, str]:
    """(type, why, source dtype) as ``tensor_force_quant`` and the 1-D rule decide it."""
    if t.dtype in FP8_DTYPES:
        if scale is None:
            raise WeightsError(f"{where}: FP8 weight {t.name} has no .scale beside it; the checkpoint is incomplete")
        if len(t.shape) < 2 or t.shape[-1] % 32:
            raise WeightsError(f"{where}: FP8 weight {t.name} {list(t.shape)} is not whole 32-value rows; "
                               "llama.cpp's converter cannot write it as Q8_0")
        return Q.Q8_0, "FP8 (128×128 E8M0 blocks) dequantized, written Q8_0 as mainline forces", t.dtype
    if t.dtype == "F32":
        return Q.F32, "F32 source kept", t.dtype
    if t.dtype not in ("BF16", "F16"):
        raise WeightsError(f"{where}: {t.name} has dtype {t.dtype}; a DeepSeek-V4 DSpark stage stores BF16, F32, "
                           "FP8 (with .scale) or FP4 experts")
    if len(t.shape) <= 1:
        return Q.F32, "1-D: kept F32", t.dtype
    return Q.BF16 if t.dtype == "BF16" else Q.F16, f"{t.dtype} matrix kept", t.dtype


def _experts(cfg: DSV4DSparkConfig, found: dict, n_stages: int, where: str) -> dict[str, tuple[tuple[int, ...], tuple[str, ...]]]:
    """Each stage's stacked MXFP4 tensors: GGUF name → (shape [experts, rows, cols], the
    sources in expert order: weight, scale, weight, scale...)."""
    out = {}
    for stage in range(n_stages):
        for proj, gguf in names.EXPERTS:
            by_id = found.get((stage, proj), {})
            # counted before any loop over n_routed_experts: a hostile config may say 2^31 - 1
            if len(by_id) != cfg.n_routed_experts or any(e not in by_id for e in range(len(by_id))):
                raise WeightsError(f"{where}: stage {stage} has {len(by_id)} of {cfg.n_routed_experts} routed experts' "
                                   f"{proj} (n_routed_experts); the checkpoint is incomplete or config.json is not its")
            w0, s0 = by_id[0]
            rows, cols = w0.shape[0], w0.shape[1] * 2
            for e in range(cfg.n_routed_experts):
                w, s = by_id[e]
                if w.dtype not in ("I8", "U8") or s.dtype not in ("F8_E8M0", "U8"):
                    raise WeightsError(f"{where}: {w.name} is {w.dtype} with scale {s.dtype}; DeepSeek-V4 stores "
                                       "routed experts as FP4 pairs in I8 with F8_E8M0 scales")
                if w.shape != (rows, cols // 2) or s.shape != (rows, cols // 32) or cols % 32:
                    raise WeightsError(f"{where}: {w.name} {list(w.shape)} / {s.name} {list(s.shape)} are not "
                                       f"[{rows}, {cols // 2}] FP4 pairs with [{rows}, {cols // 32}] scales")
            srcs = tuple(n for e in range(cfg.n_routed_experts) for n in (by_id[e][0].name, by_id[e][1].name))
            out[f"blk.{stage}.{gguf}"] = ((cfg.n_routed_experts, rows, cols), srcs)
    return out


def _check_shapes(cfg: DSV4DSparkConfig, tensors: list, n_stages: int, where: str) -> None:
    """Every tensor llama.cpp's loader creates, at the shape config.json implies (numpy order)."""
    H, heads, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
    ql, ol, g, hc = cfg.q_lora_rank, cfg.o_lora_rank, cfg.o_groups, cfg.hc_mult
    E, ff, mix = cfg.n_routed_experts, cfg.moe_intermediate_size * cfg.n_shared_experts, (2 + hc) * hc
    per_stage = {"attn_q_a.weight": (ql, H), "attn_q_a_norm.weight": (ql,), "attn_q_b.weight": (heads * hd, ql),
                 "attn_kv.weight": (hd, H), "attn_kv_a_norm.weight": (hd,), "attn_sinks.weight": (heads,),
                 "attn_output_a.weight": (g * ol, heads * hd // g), "attn_output_b.weight": (H, g * ol),
                 "attn_norm.weight": (H,), "ffn_norm.weight": (H,), "ffn_gate_inp.weight": (E, H),
                 "exp_probs_b.bias": (E,), "ffn_gate_shexp.weight": (ff, H), "ffn_down_shexp.weight": (H, ff),
                 "ffn_up_shexp.weight": (ff, H), "ffn_gate_exps.weight": (E, cfg.moe_intermediate_size, H),
                 "ffn_down_exps.weight": (E, H, cfg.moe_intermediate_size),
                 "ffn_up_exps.weight": (E, cfg.moe_intermediate_size, H),
                 **{f"hc_{s}_fn.weight": (mix, hc * H) for s in ("attn", "ffn")},
                 **{f"hc_{s}_base.weight": (mix,) for s in ("attn", "ffn")},
                 **{f"hc_{s}_scale.weight": (3,) for s in ("attn", "ffn")}}
    want = {f"blk.{i}.{n}": s for i in range(n_stages) for n, s in per_stage.items()}
    want |= {"fc.weight": (H, len(cfg.target_layer_ids) * H), "enc.output_norm.weight": (H,),
             "output_norm.weight": (H,), "output_hc_fn.weight": (hc, hc * H), "output_hc_base.weight": (hc,),
             "output_hc_scale.weight": (1,)}
    have = {p.dst: p for p in tensors}
    missing = [n for n in want if n not in have]
    if missing:
        raise WeightsError(f"{where}: the draft has no {missing[0]}" + (f" (and {len(missing) - 1} more)"
                           if len(missing) > 1 else "") + f"; config.json implies {n_stages} full stages. Download "
                           "every shard the index lists under mtp.*")
    for n, shape in want.items():
        if have[n].shape != shape:
            src = have[n].src or n
            raise WeightsError(f"{where}: {src} has shape {list(have[n].shape)} but config.json implies {list(shape)}")
    w1, w2 = have.get("markov_w1.weight"), have.get("markov_w2.weight")
    if (w1 is None) != (w2 is None):
        raise WeightsError(f"{where}: half a Markov head (markov_w1 and markov_w2 come together); the checkpoint is "
                           "incomplete")
    if w1 is not None and w1.shape[0] != cfg.vocab_size:
        raise WeightsError(f"{where}: {w1.src} has {w1.shape[0]} rows but vocab_size is {cfg.vocab_size}")


def _meta(cfg: DSV4DSparkConfig, n_stages: int, tokenizer: Sequence[KV], metadata: MetadataInputs | None,
          tensors: list[tuple[str, tuple[int, ...]]]) -> DrafterMeta:
    from ..formats.meta import without_mask

    hp, file_type_at = names.hparams(cfg, n_stages)
    tok, mask_at = without_mask(list(tokenizer))
    # mainline sets a chat template in the model's __init__, before any other key: the target's
    # own (a GGUF of it, a tokenizer_config.json) ends up there
    template = [kv for kv in tok if kv.key == CHAT_TEMPLATE]
    tok = [kv for kv in tok if kv.key != CHAT_TEMPLATE]
    if mask_at is not None and template and mask_at > [kv.key for kv in tokenizer].index(CHAT_TEMPLATE):
        mask_at -= 1
    # mainline: set_type() then Metadata.set_gguf_meta_model(), after the template, before any hparam
    general = [KV("general.type", "model", T.STRING), *([] if metadata is None else general_kvs(metadata, tensors))]
    return DrafterMeta(taps=tuple(cfg.target_layer_ids), block_size=cfg.block_size,
                       mask_token_id=cfg.noise_token_id, n_target_features=len(cfg.target_layer_ids) * cfg.hidden_size,
                       vocab_size=cfg.vocab_size, general=[*template, *general], hparams=hp, tokenizer=tok,
                       mask_at=mask_at, file_type=names.MXFP4_MOE, file_type_at=file_type_at, quantization_version=2,
                       dspark=True)


def repack_experts(sources: Sequence[SourceTensor]) -> Iterator[np.ndarray | Zeros]:
    """One stage's routed experts as ggml MXFP4 blocks, [experts, rows, blocks × 17 bytes], one
    expert at a time (memory stays at one expert's bytes, not the stacked tensor's).

    DeepSeek stores element 2i in a byte's low nibble and 2i+1 in its high one, one E8M0 scale
    per 32; a ggml ``block_mxfp4`` is the scale byte then 16 bytes holding elements j (low) and
    j + 16 (high). Only bits move: both index ggml's E2M1 value table (``repack_mxfp4_blocks``).
    An expert whose codes and scales are both holes of a sparse checkpoint repacks to zeros.
    """
    import numpy as np

    from ..fileio.safetensors import is_hole, read_raw

    w0 = sources[0]
    rows, nb = w0.shape[0], w0.shape[1] // 16
    for e in range(len(sources) // 2):
        w, s = sources[2 * e], sources[2 * e + 1]
        if is_hole(w) and is_hole(s):
            yield Zeros(rows * nb * 17)
            continue
        packed = read_raw(w).view(np.uint8).reshape(rows, nb, 16)
        scale = read_raw(s).view(np.uint8).reshape(rows, nb)
        vals = np.stack((packed & 0x0F, packed >> 4), axis=-1).reshape(rows, nb, 32)
        blocks = np.empty((rows, nb, 17), dtype=np.uint8)
        blocks[..., 0] = scale
        blocks[..., 1:] = vals[..., :16] | (vals[..., 16:] << 4)
        yield blocks

