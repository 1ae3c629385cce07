"""GPTQ checkpoints (``quant_method: gptq``): int weights packed in int32 ``qweight`` (along the
input dim), ``qzeros`` (along the output dim), F16 ``scales`` per group and ``g_idx`` (each input
row's group), dequantized exactly as llama.cpp's converter does it (``conversion/base.py``:
``ModelBase.dequant_model``'s ``dequant_gptq``).

As with pack-quantized weights (``convert/prequant_packed.py``), ``X.weight`` is not stored:
``split_gptq`` makes a stand-in of that name and shape that the plan routes after every stored
tensor (mainline's ``new_tensors``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping

from ..config.quantization import QuantizationConfig
from ..errors import WeightsError
from ..fileio.safetensors import FLOAT_DTYPES, SourceTensor, read_raw, to_f32

if TYPE_CHECKING:
    import numpy as np

PARTS = (".qweight", ".qzeros", ".scales", ".g_idx")


@dataclass(frozen=True)
class Gptq:
    """How one GPTQ weight is made: ``(scales[g_idx] * (w - z[g_idx])).T`` in float32."""

    qweight: SourceTensor  # I32 [in / (32 / bits), out]: values of rows i*pf .. i*pf + pf - 1, low bits first
    qzeros: SourceTensor  # I32 [groups, out / (32 / bits)]
    scales: SourceTensor  # F16 [groups, out]
    g_idx: SourceTensor  # I32 [in]: the group of each input row
    shape: tuple[int, int]  # [out, in], the weight as written
    bits: int
    offset: int  # 1: the "gptq" checkpoint format stores zero points less one; 0: "gptq_v2"
    gptq = True  # (class attribute) what prequant.dequantize dispatches on
    fp8 = False  # --fp8-as-q8 leaves it alone
    block = None

    @property
    def stand_in(self) -> SourceTensor:
        """The ``*.weight`` the checkpoint does not store: the qweight's bytes, the weight's name and shape."""
        return replace(self.qweight, name=self.qweight.name.removesuffix(".qweight") + ".weight", shape=self.shape)


def split_gptq(q: QuantizationConfig, by_name: Mapping[str, SourceTensor], where: str):
    """Each ``*.qweight`` with its zeros, scales and g_idx: (label, weights, consumed, stand-ins)."""
    if q.num_bits not in (2, 4, 8):  # mainline: asserts 2, 3, 4 or 8, and has no 3-bit unpacking
        why = ("3-bit unpacking is not implemented there" if q.num_bits == 3
               else f"it asserts bits 2, 3, 4 or 8; this one: {q.num_bits!r}")
        raise WeightsError(f"{q.where}: quant_method 'gptq' with bits {q.num_bits!r}: llama.cpp's converter fails "
                           f"on it too ({why}). Give a BF16/F16/F32 checkpoint")
    weights: dict[str, Gptq] = {}
    consumed: set[str] = set()
    for n in by_name:
        if not n.endswith(".qweight"):
            continue
        base = n.removesuffix(".qweight")
        lacking = [base + k for k in PARTS if base + k not in by_name]
        if lacking:
            raise WeightsError(f"{where}: {by_name[n].name} has no {lacking[0]}; the checkpoint is incomplete "
                               "(re-download it)")
        d = _gptq(*(by_name[base + k] for k in PARTS), q, where)
        weights[base + ".weight"] = d
        consumed.update(base + k for k in PARTS)
    label = f"gptq int{q.num_bits}" + (f", groups of {q.group_size}" if isinstance(q.group_size, int) else "")
    return label, weights, consumed, {n: d.stand_in for n, d in weights.items()}


def _gptq(w: SourceTensor, z: SourceTensor, s: SourceTensor, g: SourceTensor, q: QuantizationConfig,
          where: str) -> Gptq:
    """Checks what ``dequant_gptq`` needs (else its reshapes, indexing or dtype assertion fail)."""
    pf = 32 // q.num_bits
    bad = None
    if w.dtype != "I32" or z.dtype != "I32" or s.dtype not in FLOAT_DTYPES or g.dtype not in ("I32", "I64"):
        bad = (f"{w.name} is {w.dtype}, {z.name} {z.dtype}, {s.name} {s.dtype}, {g.name} {g.dtype}; dflash-gguf "
               "reads I32 qweight/qzeros, F16/BF16/F32 scales and integer g_idx")
    elif len(w.shape) != 2 or len(s.shape) != 2 or s.shape[1] != w.shape[1]:
        bad = f"{w.name} {list(w.shape)} and {s.name} {list(s.shape)} are not [in / {pf}, out] and [groups, out]"
    elif z.shape != (s.shape[0], s.shape[1] // pf) or s.shape[1] % pf:
        bad = f"{z.name} {list(z.shape)} does not hold {list(s.shape)} {q.num_bits}-bit zero points"
    elif g.shape != (w.shape[0] * pf,):
        bad = f"{g.name} {list(g.shape)} is not one group index per input row ({w.shape[0] * pf})"
    if bad:
        raise WeightsError(f"{where}: {bad}; the checkpoint does not match its quantization_config")
    return Gptq(w, z, s, g, (w.shape[1], w.shape[0] * pf), q.num_bits, 0 if q.format == "gptq_v2" else 1)


def dequantize_gptq(d: Gptq) -> np.ndarray:
    """The weight as mainline's ``dequant_gptq`` makes it: each value ``(x >> shift) & maxq`` (its
    int8/int16 casts keep exactly those bits), zero points plus ``offset``, then
    ``(scales[g_idx] * (w - z[g_idx])).T`` in float32."""
    import numpy as np

    bits, maxq = d.bits, (1 << d.bits) - 1
    shifts = np.arange(0, 32, bits, dtype=np.uint32)
    qw = read_raw(d.qweight).view(np.uint32)  # logical shifts: the same low bits as torch's arithmetic ones
    w = ((qw[:, None, :] >> shifts[None, :, None]) & maxq).reshape(-1, qw.shape[1]).astype(np.int32)
    qz = read_raw(d.qzeros).view(np.uint32)
    z = ((qz[:, :, None] >> shifts[None, None, :]) & maxq).reshape(qz.shape[0], -1).astype(np.int32) + d.offset
    g = read_raw(d.g_idx).astype(np.int64)
    if g.size and (g.min() < 0 or g.max() >= z.shape[0]):
        raise WeightsError(f"{d.g_idx.file}: {d.g_idx.name} holds group {int(g.max() if g.max() >= z.shape[0] else g.min())}"
                           f" but there are {z.shape[0]} groups; the checkpoint is corrupt")
    s = to_f32(d.scales, read_raw(d.scales))
    out = np.multiply(s[g], (w - z[g]).astype(np.float32), dtype=np.float32)
    return np.ascontiguousarray(out.T)
