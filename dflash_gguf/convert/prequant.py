"""Pre-quantized checkpoints (``quantization_config``): which source tensors are scales, and how
a weight is dequantized, exactly as llama.cpp's converter does it (``conversion/base.py``:
``ModelBase.dequant_model`` and its ``dequant_simple``; ``ModelBase.__init__`` for what
``--outtype auto`` means; ``tensor_force_quant`` for ``--fp8-as-q8``).

One table, ``METHODS``: each supported method is a function that pairs weights with their
scales; ``REFUSED`` says, for every method mainline reads and we do not, what mainline writes.
The plan (``convert/plan.py``) asks ``split`` once; the writer and compare-weights ask
``dequantize`` for one weight at a time (float32, as mainline's ``weight.float() * scale``).
NVFP4 weights are not dequantized but repacked (``convert/prequant_fp4.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Sequence

from ..config.quantization import QuantizationConfig
from ..errors import WeightsError
from ..fileio.gguf_constants import GGMLQuantizationType as Q
from ..fileio.safetensors import CHUNK_BYTES, FLOAT_DTYPES, FP8_DTYPES, SourceTensor, iter_raw, read_raw, to_f32

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Dequant:
    """How one weight is made: ``weight.float() * scale``, the scale repeated per block."""

    scale: SourceTensor
    block: tuple[int, ...] | None  # weight_block_size / block_structure; None: scale broadcasts as is
    fp8: bool  # an FP8 weight: --fp8-as-q8 writes it as Q8_0


@dataclass(frozen=True)
class Prequantized:
    label: str  # e.g. "fp8, 128×128 blocks": the plan's reason for each dequantized weight
    weights: dict[str, Dequant]  # weight name (without ``model.``) → how it is dequantized
    consumed: frozenset[str]  # scale tensors folded into their weights, and unused activation scales
    # weights not stored as such (pack-quantized): stand-ins the plan routes, after every stored tensor
    added: dict[str, SourceTensor] = field(default_factory=dict)
    # weights stored packed and dequantized in place (BitNet): stand-ins of their dequantized shape
    replaced: dict[str, SourceTensor] = field(default_factory=dict)


def _blocks(block: tuple[int, ...] | None) -> str:
    return f"{'×'.join(map(str, block))} blocks" if block else "scale per tensor/channel"


def _pair(by_name: Mapping[str, SourceTensor], scale: str, weight: str, block, fp8: bool, where: str,
          weights: dict[str, Dequant], consumed: set[str]) -> None:
    if weight not in by_name:
        raise WeightsError(f"{where}: scale {by_name[scale].name} has no weight {weight}; the checkpoint is "
                           "incomplete (re-download it)")
    w, s = by_name[weight], by_name[scale]
    if w.dtype not in FP8_DTYPES + FLOAT_DTYPES or s.dtype not in FLOAT_DTYPES:
        raise WeightsError(f"{where}: {w.name} is {w.dtype} with scale {s.name} {s.dtype}; a pre-quantized weight "
                           "must be FP8 (or a float type) and its scale F32, BF16 or F16. The checkpoint does not "
                           "match its quantization_config")
    if scale_shape(s.shape, block, w.shape) is None:
        raise WeightsError(f"{where}: scale {s.name} has shape {list(s.shape)}, which does not fit weight {w.name} "
                           f"{list(w.shape)} with {_blocks(block)}; the checkpoint is corrupt")
    weights[weight] = Dequant(s, block, fp8)
    consumed.add(scale)


def _fp8(q: QuantizationConfig, by_name: Mapping[str, SourceTensor], where: str):
    """DeepSeek-style block-scaled FP8: ``W_scale_inv`` (and Mistral's ``qscale_weight``);
    activation scales are unused and dropped."""
    weights: dict[str, Dequant] = {}
    consumed: set[str] = set()
    for n in by_name:
        if n.endswith("_scale_inv"):
            _pair(by_name, n, n.removesuffix("_scale_inv"), q.block_size, True, where, weights, consumed)
        elif n.endswith(".qscale_weight"):
            _pair(by_name, n, n.removesuffix("qscale_weight") + "weight", q.block_size, True, where, weights, consumed)
        elif n.endswith((".activation_scale", "_activation_scale", ".qscale_act")):
            consumed.add(n)
    return f"fp8, {_blocks(q.block_size)}", weights, consumed


def _compressed_tensors(q: QuantizationConfig, by_name: Mapping[str, SourceTensor], where: str):
    """compressed-tensors ``float-quantized`` (FP8 per channel or per block): ``W_scale``;
    ``pack-quantized`` (int group-quantized, ``convert/prequant_packed.py``)."""
    if q.nvfp4:  # nvfp4-pack-quantized (or mixed-precision of it): every weight repacked (convert/prequant_fp4.py)
        from .prequant_fp4 import split_nvfp4

        weights, consumed, added = split_nvfp4(q, by_name, where)
        return Prequantized("compressed-tensors NVFP4", dict(weights), frozenset(consumed), added)
    if q.format == "pack-quantized":
        from .prequant_packed import split_packed, usable

        if not usable(q):
            raise WeightsError(refusal(q))
        return split_packed(q, by_name, where)
    if q.format != "float-quantized" or q.n_groups != 1 or q.strategy not in ("channel", "block") \
            or q.group_size is not None or not q.fp8_weights:
        raise WeightsError(refusal(q))
    weights: dict[str, Dequant] = {}
    consumed: set[str] = set()
    for n in by_name:
        if n.endswith(".weight_scale"):
            _pair(by_name, n, n.removesuffix("_scale"), q.block_size, True, where, weights, consumed)
    return f"compressed-tensors FP8, {q.strategy} scales", weights, consumed


def _modelopt(q: QuantizationConfig, by_name: Mapping[str, SourceTensor], where: str):
    """quant_method ``modelopt``: NVFP4 weights (when the config says NVFP4) repacked
    (``convert/prequant_fp4.py``), then ``dequant_model``'s modelopt branch: each remaining
    ``*.weight_scale`` dequantizes its weight (scales without a weight, and activation / k / v
    scales, are dropped). Mainline skips that branch when NVFP4 left no ``*.weight_scale``."""
    from .prequant_fp4 import split_nvfp4

    weights, consumed, added = split_nvfp4(q, by_name, where) if q.nvfp4 else ({}, set(), {})
    rest = {n: t for n, t in by_name.items() if n not in consumed and n not in weights}
    deq: dict = {}
    if not q.nvfp4 or any(n.endswith((".weight_scale", ".weight_scale_inv")) for n in rest):
        for n in rest:
            if n.endswith(".weight_scale"):
                w = n.removesuffix("_scale")
                if w not in rest:
                    consumed.add(n)
                    continue
                _pair(rest, n, w, None, rest[w].dtype in FP8_DTYPES, where, deq, consumed)
            if n.endswith((".input_scale", ".k_scale", ".v_scale")):
                consumed.add(n)
    kinds = ["NVFP4"] * bool(weights) + ["FP8, per-tensor scales"] * bool(deq)
    return Prequantized(f"modelopt {q.quant_algo or '?'}: {' + '.join(kinds) or 'nothing quantized'}",
                        {**weights, **deq}, frozenset(consumed), added)


def _gptq(q: QuantizationConfig, by_name: Mapping[str, SourceTensor], where: str):
    """GPTQ: qweight/qzeros/scales/g_idx dequantized (``convert/prequant_gptq.py``)."""
    from .prequant_gptq import split_gptq

    return split_gptq(q, by_name, where)


def _bitnet(q: QuantizationConfig, by_name: Mapping[str, SourceTensor], where: str):
    """BitNet: ternary codes and weight_scale dequantized in place (``convert/prequant_bitnet.py``)."""
    from .prequant_bitnet import split_bitnet

    label, weights, consumed, replaced = split_bitnet(q, by_name, where)
    return Prequantized(label, weights, frozenset(consumed), replaced=replaced)


METHODS: dict[str, Callable] = {"fp8": _fp8, "compressed-tensors": _compressed_tensors, "modelopt": _modelopt,
                                "gptq": _gptq, "bitnet": _bitnet}

_CT_FORMATS = {
    "mixed-precision": "refuses it too (it reads mixed-precision only when every group is nvfp4-pack-quantized)",
    "int-quantized": "dequantizes its int8 weights to the outtype",
    "naive-quantized": "dequantizes its int8 weights to the outtype",
}
REFUSED: dict[str, str] = {}  # every method mainline's dequant_model reads is read here too


def refusal(q: QuantizationConfig) -> str:
    """One line: the method, that we do not read it, and what mainline does with it."""
    name = repr(q.method) + (f" ({q.quant_algo})" if q.quant_algo else "")
    if q.method == "compressed-tensors":
        fmt = q.format or "?"
        name += f" format {fmt!r}"
        if fmt == "float-quantized" and q.n_groups == 1 and q.strategy in ("channel", "block") \
                and q.group_size is None:
            mainline = (f"dequantizes its {q.num_bits}-bit {q.weight_type} weights to the outtype (dflash-gguf "
                        "reads 8-bit float ones)")
        elif fmt == "float-quantized" and q.n_groups == 1:
            mainline = (f"refuses it too (it reads channel or block scales only; this one: strategy {q.strategy!r}, "
                        f"group_size {q.group_size})")
        elif fmt == "pack-quantized" and q.n_groups == 1:
            mainline = (f"refuses it too (it reads int weights of group strategy and num_bits 1, 2, 4 or 8 only; this "
                        f"one: type {q.weight_type!r}, strategy {q.strategy!r}, num_bits {q.num_bits}, group_size "
                        f"{q.group_size})")
        elif q.n_groups > 1 and fmt != "mixed-precision":
            mainline = f"refuses it too (it reads one config group; this one has {q.n_groups})"
        else:
            mainline = _CT_FORMATS.get(fmt, "refuses it too (the format is not one it supports)")
    else:
        mainline = REFUSED.get(q.method, "refuses it too (the method is not one it supports)")
    fix = ("Give a BF16/F16/F32 checkpoint" if mainline.startswith("refuses") else
           "Use llama.cpp's convert_hf_to_gguf.py for it, or give a BF16/F16/F32 checkpoint")
    return (f"{q.where}: quant_method {name} is not supported by dflash-gguf yet; llama.cpp's converter "
            f"{mainline}. {fix}")


def split(q: QuantizationConfig | None, by_name: Mapping[str, SourceTensor], where: str) -> Prequantized | None:
    """The checkpoint's scales and the weights they belong to (names without ``model.``), or
    None for a plain float checkpoint.

    Raises:
        WeightsError: a method or format we do not read (``refusal``), a scale without its weight,
            or a scale whose shape does not fit its weight.
    """
    if q is None or not q.method:  # mainline ignores a quantization_config without quant_method
        return None
    method = METHODS.get(q.method)
    if method is None:
        raise WeightsError(refusal(q))
    got = method(q, by_name, where)
    if isinstance(got, Prequantized):
        return got
    label, weights, consumed, *added = got
    return Prequantized(label, weights, frozenset(consumed), *added)


def scale_shape(scale: Sequence[int], block: Sequence[int] | None, weight: Sequence[int]) -> tuple[int, ...] | None:
    """The shape ``dequant_simple`` gives the scale before it multiplies: repeated per block on its
    trailing dims, cut to the weight's shape, then given trailing 1s; None where that does not
    broadcast to the weight (mainline fails there)."""
    s = list(scale)
    if block:
        off = len(s) - len(block)
        if off < 0 or len(s) < len(weight):
            return None
        for i, b in enumerate(block):
            s[off + i] *= b
        s[:len(weight)] = [min(a, w) for a, w in zip(s, weight)]
    s += [1] * (len(weight) - len(s))
    if len(s) != len(weight) or any(a not in (1, w) for a, w in zip(s, weight)):
        return None
    return tuple(s)


def dequantize(weight: SourceTensor, d: Dequant) -> np.ndarray:
    """The weight as mainline's ``dequant_simple`` makes it: ``weight.float() * scale`` in float32,
    the scale ``repeat_interleave``d per block and cut to the weight's shape. One tensor in memory.
    A pack-quantized one (``prequant_packed.Packed``) as its ``dequant_packed`` does, a GPTQ one
    (``prequant_gptq.Gptq``) as its ``dequant_gptq``."""
    import numpy as np

    if getattr(d, "nvfp4", False):  # never dequantized by convert (repacked); the values for the reference
        from .prequant_fp4 import dequantize_nvfp4

        return dequantize_nvfp4(d)
    if getattr(d, "gptq", False):
        from .prequant_gptq import dequantize_gptq

        return dequantize_gptq(d)
    if getattr(d, "bitnet", False):
        from .prequant_bitnet import dequantize_bitnet

        return dequantize_bitnet(d)
    if not isinstance(d, Dequant):
        from .prequant_packed import dequantize_packed

        return dequantize_packed(d)

    w = to_f32(weight, read_raw(weight))
    s = to_f32(d.scale, read_raw(d.scale))
    if d.block:
        off = s.ndim - len(d.block)
        for i, b in enumerate(d.block):
            s = np.repeat(s, b, axis=off + i)
        s = s[tuple(slice(0, n) for n in w.shape)]
    s = s.reshape(s.shape + (1,) * (w.ndim - s.ndim))
    return np.multiply(w, s, dtype=np.float32)


def iter_dequantize(weight: SourceTensor, d: Dequant, chunk_bytes: int = CHUNK_BYTES) -> Iterator[np.ndarray]:
    """``dequantize``, a block of rows at a time (a multiple of the scale's row block): the same
    float32 values, each row multiplied by the same scale row, but memory holds one chunk's
    float32 instead of the tensor's four times over. Weights whose scale is not a 2-D block or
    per-row one come whole."""
    import numpy as np

    s = to_f32(d.scale, read_raw(d.scale)) if isinstance(d, Dequant) else None
    blocked = s is not None and d.block is not None and len(d.block) == 2 and s.ndim == 2
    per_row = s is not None and d.block is None and s.ndim <= 2
    if len(weight.shape) != 2 or not (blocked or per_row) or weight.shape[0] == 0:
        yield dequantize(weight, d)
        return
    rows, cols = weight.shape
    b0 = d.block[0] if blocked else 1
    step = max(b0, max(1, chunk_bytes // max(cols * 4, 1)) // b0 * b0)
    if blocked:
        s = np.repeat(s, d.block[1], axis=1)[:, :cols]  # the columns once; rows per chunk below
    else:
        s = s.reshape(s.shape + (1,) * (2 - s.ndim))  # scalar, [1], [rows] or [rows, 1]
    r0 = 0
    for raw in iter_raw(weight, chunk_bytes=step * (weight.nbytes // rows)):
        w = to_f32(weight, raw).reshape(-1, cols)
        n = w.shape[0]
        if blocked:
            sc = np.repeat(s[r0 // b0:-(-(r0 + n) // b0)], b0, axis=0)[:n]
        else:
            sc = s[r0:r0 + n] if s.shape[0] == rows and rows > 1 else s
        yield np.multiply(w, sc, dtype=np.float32)
        r0 += n


def auto_outtype(inventory: Sequence[SourceTensor]) -> str:
    """What mainline's ``--outtype auto`` picks for a pre-quantized checkpoint: the type of the
    first stored tensor of 2+ dims that is BF16 or F16, in its reading order (shards by name,
    tensors by name), before dequantization (so FP8 weights and F32 scales are skipped); F16
    when there is none."""
    for t in sorted(inventory, key=lambda t: (t.file.name, t.name)):
        if len(t.shape) >= 2 and t.dtype in ("BF16", "F16"):
            return t.dtype.lower()
    return "f16"


def fp8_as_q8_type(gguf_name: str, shape: Sequence[int]) -> Q | None:
    """``--fp8-as-q8``: an FP8 weight of 2+ dims becomes Q8_0 (F16 where its rows are not whole
    32-value blocks, mainline's fallback); norms and 1-D ones stay F32 (None: the usual rule)."""
    if len(shape) < 2 or gguf_name.endswith("_norm.weight"):
        return None
    return Q.Q8_0 if shape[-1] % 32 == 0 else Q.F16
