"""compare-weights for a DeepSeek-V4 checkpoint's DSpark draft (its ``mtp.*`` stages).

The pairing is convert's own plan (``convert.deepseek_v4.plan_dsv4``, chosen the way convert
chooses it: ``config.deepseek_v4.is_dsv4_dspark``), so the two cannot disagree:

* each planned tensor is paired with the GGUF tensor of its planned name;
* an FP8 weight is compared as convert dequantizes it (its 128×128 E8M0 block scales, float32:
  ``sides.dequant_side``) against the GGUF's tensor (Q8_0 as converted: bit-identical, or
  within the Q8_0 band for another encoder);
* a stage's routed experts (FP4 codes in I8 + E8M0 scales, one tensor per expert) are compared
  as the MXFP4 blocks convert repacks them into (``repack_experts``, lossless), byte for byte:
  any byte that differs fails (``bands.Band.lossless``);
* BF16/F32 tensors as stored (a 1-D BF16 written F32 is checked against ggml's cast).

The constants are the plan's keys (``<arch>.*`` and the mask id) against the file's.
"""
from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
from gguf import GGMLQuantizationType as Q

from ..config.deepseek_v4 import DSV4DSparkConfig, is_dsv4_dspark, parse_dsv4_dspark
from ..config.values import read_config_json
from ..errors import ConfigError
from ..fileio.gguf_reader import GGUFFile
from ..fileio.safetensors import SourceTensor
from ..formats.meta import MASK_ID
from .constants import ConstantComparison, _compared, field_source, pair_constants
from .report import EXTRA, MISSING, OUT, CompareReport, TensorComparison
from .sides import Files, Side, dequant_side

if TYPE_CHECKING:
    from ..convert.plan import ConversionPlan

PREFIX = "mtp."  # the draft's tensors; the rest of the checkpoint is the target model
_HELD = 4  # experts' repacked blocks kept for the row chunks that read them

# hparam key (after ``<arch>.``) -> the config.json key it comes from (formats/deepseek_v4.py ``hparams``)
_FIELDS = {
    "context_length": "max_position_embeddings", "embedding_length": "hidden_size",
    "attention.head_count": "num_attention_heads", "attention.head_count_kv": "num_key_value_heads",
    "rope.freq_base": "rope_theta", "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "expert_count": "n_routed_experts", "expert_used_count": "num_experts_per_tok",
    "expert_gating_func": "scoring_func", "attention.key_length": "head_dim", "attention.value_length": "head_dim",
    "rope.dimension_count": "qk_rope_head_dim", "attention.q_lora_rank": "q_lora_rank",
    "attention.sliding_window": "sliding_window", "expert_feed_forward_length": "moe_intermediate_size",
    "expert_shared_count": "n_shared_experts", "expert_weights_scale": "routed_scaling_factor",
    "expert_weights_norm": "norm_topk_prob", "swiglu_clamp_exp": "swiglu_limit", "swiglu_clamp_shexp": "swiglu_limit",
    "attention.indexer.head_count": "index_n_heads", "attention.indexer.key_length": "index_head_dim",
    "attention.indexer.top_k": "index_topk", "attention.output_group_count": "o_groups",
    "attention.output_lora_rank": "o_lora_rank", "attention.compress_rope_freq_base": "compress_rope_theta",
    "hyper_connection.count": "hc_mult", "hyper_connection.sinkhorn_iterations": "hc_sinkhorn_iters",
    "hyper_connection.epsilon": "hc_eps", "block_size": "block_size", "target_layers": "target_layer_ids",
}
_RULES = {"block_count": "the checkpoint's mtp.* stages",
          "attention.compress_ratios": "mainline's rule (every draft stage attends uncompressed: 0s)",
          "hash_layer_count": "mainline's rule (no hash routing in the draft: 0)"}


def dsv4_config(drafter_dir: Path) -> DSV4DSparkConfig | None:
    """The parsed config when ``drafter_dir`` is a DeepSeek-V4 checkpoint carrying a DSpark
    draft; None for anything else (a missing or unreadable config.json is left to the drafter
    path's own errors).

    Raises:
        ConfigError: a DeepSeek-V4 DSpark config.json with a missing or invalid key.
    """
    try:
        raw, path = read_config_json(drafter_dir, "not found")
    except ConfigError:
        return None
    return parse_dsv4_dspark(raw, path) if is_dsv4_dspark(raw) else None


def plan_for(cfg: DSV4DSparkConfig, inventory: Sequence[SourceTensor], f: GGUFFile) -> ConversionPlan:
    """convert's plan for this draft (mainline's format, the only one it has). The target's
    tokenizer only supplies keys that are not compared: the file's own is passed.

    Raises:
        WeightsError: a draft tensor is missing, unknown or mis-shaped (convert refuses it too).
    """
    from ..convert.deepseek_v4 import plan_dsv4
    from ..formats import get_format

    tokenizer = [kv for k, kv in f.kvs.items() if k.startswith("tokenizer.")]
    return plan_dsv4(cfg, get_format("llama.cpp"), inventory, tokenizer=tokenizer)


def pair_dsv4(report: CompareReport, plan: ConversionPlan, inventory: Sequence[SourceTensor], f: GGUFFile,
              files: Files) -> list[tuple[TensorComparison, Side, Side]]:
    """Stage 1 for a DSpark draft of DeepSeek-V4: rows and notes go into ``report``; returns the
    pairs to measure (checkpoint side first)."""
    rows, notes = report.tensors, report.notes
    by_name = {t.name: t for t in inventory}
    by_gguf = {e.name: e for e in f.tensors}
    used: set[str] = set()
    matched = []
    for p in plan.tensors:
        stack = plan.stacked.get(p.dst)
        source = p.src if stack is None else stack_label(stack)
        e = by_gguf.get(p.dst)
        if e is None:
            rows.append(TensorComparison(source, p.dst, None, p.shape, MISSING, source_type=p.src_dtype,
                                         detail=f"expected as {p.dst} in the GGUF ({p.reason})"))
            continue
        used.add(p.dst)
        row = TensorComparison(source, p.dst, e.ggml_type.name, p.shape, OUT, source_type=p.src_dtype,
                               gguf_shape=e.shape, nbytes=e.nbytes)
        rows.append(row)
        if stack is not None:
            side = experts_side(source, p.shape, [by_name[n] for n in stack])
        elif p.src in plan.dequant:
            side = dequant_side(by_name[p.src], plan.dequant[p.src])
        else:
            side = files.source_side(by_name[p.src])
        matched.append((row, side, files.gguf_side(f, e)))
    for name, why in plan.dropped:
        notes.append(f"{name}: not converted by design ({why})")
    n_fp8 = len(plan.dequant)
    if n_fp8:
        notes.append(f"DeepSeek-V4 checkpoint: its {n_fp8} FP8 weights are compared as convert dequantizes them "
                     "(128×128 E8M0 block scales, to float32, as llama.cpp's converter does)")
    if plan.stacked:
        n_src = sum(len(s) // 2 for s in plan.stacked.values())
        notes.append(f"DeepSeek-V4 checkpoint: its {n_src} routed-expert FP4 tensors are compared as the "
                     f"{len(plan.stacked)} stacked MXFP4 tensors convert repacks them into, byte for byte "
                     "(the repack is lossless: a differing byte fails)")
    notes.append(f"DeepSeek-V4 checkpoint: only its {PREFIX}* tensors (the DSpark draft) are converted and compared")
    for e in f.tensors:
        if e.name not in used:
            rows.append(TensorComparison(None, e.name, e.ggml_type.name, None, EXTRA, gguf_shape=e.shape,
                                         nbytes=e.nbytes, detail="no tensor of the checkpoint's DSpark draft maps "
                                         "to it (convert's DeepSeek-V4 DSpark plan)"))
    return matched


def stack_label(sources: Sequence[str]) -> str:
    """``mtp.0.ffn.experts.{0..255}.w1.weight``: the sources of one stacked expert tensor."""
    n = len(sources) // 2
    return re.sub(r"\.experts\.\d+\.", f".experts.{{0..{n - 1}}}.", sources[0], count=1)


def experts_side(name: str, shape: tuple[int, ...], sources: Sequence[SourceTensor]) -> Side:
    """A stage's routed experts as the MXFP4 blocks convert writes ([experts, rows, cols]),
    repacked one expert at a time as its rows are read (a few kept), not the whole stack."""
    from ..convert.deepseek_v4 import repack_experts

    n, per, cols = shape
    row_bytes = cols // 32 * 17
    lock, held = threading.Lock(), {}

    def expert(i: int) -> np.ndarray:
        with lock:
            x = held.get(i)
            if x is None:
                one = _one_expert(repack_experts(sources[2 * i:2 * i + 2]), per * row_bytes)
                x = held[i] = one.reshape(per, row_bytes)
                while len(held) > _HELD:
                    held.pop(next(iter(held)))
            return x

    def read(r0: int, r1: int) -> np.ndarray:
        parts, r = [], r0
        while r < r1:
            i, a = divmod(r, per)
            b = min(per, a + r1 - r)
            parts.append(expert(i)[a:b])
            r += b - a
        return np.concatenate(parts).reshape(-1) if parts else np.empty(0, np.uint8)

    return Side(name, tuple(shape), Q.MXFP4, n * per * row_bytes, read)


def _one_expert(out, nbytes: int) -> np.ndarray:
    """``repack_experts``' bytes for one expert: its first (only) piece; a sparse checkpoint's
    hole (``Zeros``) as the zero bytes it stands for."""
    x = out if isinstance(out, np.ndarray) else next(iter(out))
    return np.asarray(x, dtype=np.uint8).reshape(-1) if isinstance(x, np.ndarray) else np.zeros(nbytes, np.uint8)


def dsv4_constants(cfg: DSV4DSparkConfig, plan: ConversionPlan, f: GGUFFile) -> list[ConstantComparison]:
    """Every ``<arch>.*`` key and the mask id of the plan against the file's."""
    arch = f.arch or ""
    ours = {kv.key.replace(f"{plan.arch}.", f"{arch}.", 1): kv for kv in plan.kvs if _compared(kv.key, plan.arch)}
    theirs = {k: kv for k, kv in f.kvs.items() if _compared(k, arch)}
    return pair_constants(ours, theirs, plan.arch, arch, lambda key: _source(cfg, key, arch))


def _source(cfg: DSV4DSparkConfig, key: str, arch: str) -> str:
    suffix = key.removeprefix(f"{arch}.")
    if key == MASK_ID:
        field = "dspark_noise_token_id"
    elif suffix.startswith("rope.scaling."):
        return "config.rope_scaling (yarn)"
    elif suffix in _RULES:
        return _RULES[suffix]
    else:
        field = _FIELDS.get(suffix)
    if field is None:
        return "the DeepSeek-V4 DSpark plan (config.json)"
    return field_source(cfg.sources, field)
