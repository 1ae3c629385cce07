"""BitNet checkpoints (``quant_method: bitnet``): ternary weights, four 2-bit codes a byte, and a
per-tensor ``weight_scale``, dequantized exactly as llama.cpp's converter does it
(``conversion/base.py``: ``ModelBase.dequant_model``'s ``dequant_bitnet``).

The stored ``X.weight`` is U8 ``[rows / 4, cols]``: output row ``k * rows/4 + i`` is bits ``2k``
of byte row ``i``, the code ``c`` meaning ``c - 1`` in {-1, 0, 1}; the value is that divided by
``X.weight_scale`` (the checkpoint stores the inverted scale). Mainline dequantizes in place, so
the weight keeps its position among the tensors: the plan routes a stand-in of the same name with
the dequantized shape (``Prequantized.replaced``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping

from ..config.quantization import QuantizationConfig
from ..errors import WeightsError
from ..fileio.safetensors import FLOAT_DTYPES, SourceTensor, read_raw, to_f32

if TYPE_CHECKING:
    import numpy as np

SCALE = "_scale"  # "X.weight_scale" beside "X.weight"


@dataclass(frozen=True)
class Bitnet:
    """How one BitNet weight is made: ``(code - 1) / weight_scale`` in float32."""

    weight: SourceTensor  # U8 [rows / 4, cols] as stored
    scale: SourceTensor  # weight_scale, broadcast over the dequantized weight
    bitnet = True  # (class attribute) what prequant.dequantize dispatches on
    fp8 = False  # --fp8-as-q8 leaves it alone
    block = None

    @property
    def stand_in(self) -> SourceTensor:
        """``X.weight`` as the plan sees it: the stored bytes, the dequantized shape."""
        rows, *rest = self.weight.shape
        return replace(self.weight, shape=(rows * 4, *rest))


def split_bitnet(q: QuantizationConfig, by_name: Mapping[str, SourceTensor], where: str):
    """Each ``*.weight_scale`` with its weight: (label, weights, consumed, stand-ins replacing
    the stored weights in place)."""
    import numpy as np

    weights: dict[str, Bitnet] = {}
    consumed: set[str] = set()
    for n, s in by_name.items():
        if not n.endswith(".weight" + SCALE):
            continue
        wname = n.removesuffix(SCALE)
        w = by_name.get(wname)
        if w is None:
            raise WeightsError(f"{where}: scale {s.name} has no weight {n.removesuffix(SCALE)}; the checkpoint is "
                               "incomplete (re-download it)")
        if w.dtype not in ("U8", "I8") or len(w.shape) < 1 or s.dtype not in FLOAT_DTYPES:
            raise WeightsError(f"{where}: {w.name} is {w.dtype} {list(w.shape)} with scale {s.name} {s.dtype}; a BitNet "
                               "weight is U8 (four 2-bit codes a byte) with an F32/BF16/F16 scale. The checkpoint does "
                               "not match its quantization_config")
        unpacked = (w.shape[0] * 4, *w.shape[1:])
        try:
            np.broadcast_shapes(unpacked, s.shape)
        except ValueError:
            raise WeightsError(f"{where}: scale {s.name} has shape {list(s.shape)}, which does not broadcast over "
                               f"{w.name} unpacked to {list(unpacked)}; the checkpoint is corrupt") from None
        weights[wname] = Bitnet(w, s)
        consumed.add(n)
    return "bitnet, ternary", weights, consumed, {n: b.stand_in for n, b in weights.items()}


def dequantize_bitnet(d: Bitnet) -> np.ndarray:
    """``dequant_bitnet``: the codes unpacked k-major, less 1, divided by the scale (float32)."""
    import numpy as np

    raw = read_raw(d.weight).view(np.uint8)
    shift = np.array([0, 2, 4, 6], dtype=np.uint8).reshape((4,) + (1,) * raw.ndim)
    codes = (raw[np.newaxis] >> shift) & 3
    data = (codes.astype(np.float32) - 1).reshape((raw.shape[0] * 4, *raw.shape[1:]))
    return np.divide(data, to_f32(d.scale, read_raw(d.scale)), dtype=np.float32)
