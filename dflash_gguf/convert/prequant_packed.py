"""compressed-tensors ``pack-quantized`` (W4A16 and kin): int weights packed in int32
``weight_packed`` with ``weight_scale`` per group, ``weight_shape`` and an optional packed
``weight_zero_point``, dequantized exactly as llama.cpp's converter does it
(``conversion/base.py``: ``ModelBase.dequant_model``'s ``dequant_packed``).

The weight itself (``X.weight``) is not stored: ``split_packed`` makes a stand-in source tensor
of that name (the packed tensor's bytes, the real shape) that the plan routes like any other; mainline
adds these weights after every stored tensor (``new_tensors``), and the plan orders them so.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping

from ..config.quantization import QuantizationConfig
from ..errors import WeightsError
from ..fileio.safetensors import FLOAT_DTYPES, SourceTensor, read_raw, to_f32

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Packed:
    """How one packed weight is made: integers unpacked along rows (zero points along columns),
    less their offset, times the group's scale, in float32."""

    packed: SourceTensor  # weight_packed: I32 [rows, words], 32 / num_bits values a word, low bits first
    scale: SourceTensor  # weight_scale: [rows, cols / group_size]
    zero_point: SourceTensor | None  # weight_zero_point: I32 packed along dim 0; None: 2^(bits-1)
    shape: tuple[int, int]  # weight_shape
    num_bits: int
    group_size: int
    fp8: bool = False  # --fp8-as-q8 leaves it alone
    block: None = None

    @property
    def stand_in(self) -> SourceTensor:
        """The ``*.weight`` the checkpoint does not store: the packed bytes, the weight's name and shape."""
        return replace(self.packed, name=self.packed.name.removesuffix("_packed"), shape=self.shape)


def usable(q: QuantizationConfig) -> bool:
    """What mainline's pack-quantized branch asserts (strategy group, int weights, integer
    num_bits and group_size), and bit widths that divide 32 (the package packs others across
    words, which mainline's unpacking does not follow)."""
    return (q.n_groups == 1 and q.strategy == "group" and q.weight_type in (None, "int")
            and isinstance(q.num_bits, int) and q.num_bits in (1, 2, 4, 8)
            and isinstance(q.group_size, int) and q.group_size > 0)


def split_packed(q: QuantizationConfig, by_name: Mapping[str, SourceTensor], where: str):
    """Each ``*.weight_packed`` with its scale, shape and zero point: (label, weights, consumed,
    stand-ins), the stand-ins being the ``*.weight`` tensors the plan routes."""
    weights: dict[str, Packed] = {}
    consumed: set[str] = set()
    added: dict[str, SourceTensor] = {}
    for n in by_name:
        if not n.endswith(".weight_packed"):
            continue
        base = n.removesuffix("_packed")
        parts = {k: by_name.get(base + k) for k in ("_scale", "_shape")}
        lacking = [base + k for k, t in parts.items() if t is None]
        if lacking:
            raise WeightsError(f"{where}: {by_name[n].name} has no {lacking[0]}; the checkpoint is incomplete "
                               "(re-download it)")
        zp = by_name.get(base + "_zero_point")
        d = _packed(by_name[n], parts["_scale"], parts["_shape"], zp, q, where)
        weights[base] = d
        added[base] = d.stand_in
        consumed.update([n, base + "_scale", base + "_shape"] + ([base + "_zero_point"] if zp is not None else []))
    label = f"compressed-tensors int{q.num_bits}, groups of {q.group_size}"
    return label, weights, consumed, added


def _packed(w: SourceTensor, s: SourceTensor, shape_t: SourceTensor, zp: SourceTensor | None,
            q: QuantizationConfig, where: str) -> Packed:
    bits, gs = q.num_bits, q.group_size
    if shape_t.dtype not in ("I64", "I32") or shape_t.shape != (2,):
        raise WeightsError(f"{where}: {shape_t.name} is {shape_t.dtype} {list(shape_t.shape)}; a weight_shape must be "
                           "two integers. The checkpoint is corrupt")
    rows, cols = (int(v) for v in read_raw(shape_t))
    per_word = 32 // bits
    bad = None
    if w.dtype != "I32" or s.dtype not in FLOAT_DTYPES or (zp is not None and zp.dtype != "I32"):
        bad = (f"{w.name} is {w.dtype}, {s.name} {s.dtype}" + (f", {zp.name} {zp.dtype}" if zp else "")
               + "; packed weights and zero points must be I32 and scales F32, BF16 or F16")
    elif rows <= 0 or cols <= 0 or cols % gs:
        bad = f"{shape_t.name} is [{rows}, {cols}], not whole groups of {gs}"
    elif len(w.shape) != 2 or w.shape[0] != rows or w.shape[1] * per_word < cols:
        bad = f"{w.name} {list(w.shape)} does not hold [{rows}, {cols}] {bits}-bit values"
    elif s.shape != (rows, cols // gs):
        bad = f"{s.name} {list(s.shape)} is not one scale per group of {gs} of [{rows}, {cols}]"
    elif zp is not None and (len(zp.shape) != 2 or zp.shape[1] != cols // gs or zp.shape[0] * per_word < rows):
        bad = f"{zp.name} {list(zp.shape)} does not hold [{rows}, {cols // gs}] {bits}-bit zero points"
    if bad:
        raise WeightsError(f"{where}: {bad}; the checkpoint does not match its quantization_config")
    return Packed(w, s, zp, (rows, cols), bits, gs)


def dequantize_packed(d: Packed) -> np.ndarray:
    """The weight as mainline's ``dequant_packed`` makes it: ``(unpacked - offset) * scale`` in
    float32, the offset 2^(bits-1) or the unpacked zero point."""
    import numpy as np

    rows, cols = d.shape
    mask = (1 << d.num_bits) - 1
    shifts = np.arange(0, 32 - (d.num_bits - 1), d.num_bits, dtype=np.int32)
    w = read_raw(d.packed)
    unpacked = ((w[..., None] >> shifts) & mask).reshape(rows, -1)[:, :cols]
    unpacked = unpacked.reshape(rows, cols // d.group_size, d.group_size)
    if d.zero_point is None:
        offset = np.int32(1 << (d.num_bits - 1))
    else:
        z = read_raw(d.zero_point)
        offset = ((z[:, None, :] >> shifts.reshape(1, -1, 1)) & mask).reshape(-1, z.shape[1])[:rows, :, None]
    s = to_f32(d.scale, read_raw(d.scale))
    out = np.multiply((unpacked - offset).astype(np.float32), s[..., None], dtype=np.float32)
    return out.reshape(rows, cols)
