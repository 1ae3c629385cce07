"""F32 / F16 / BF16 "quantizers": per-element conversions, block size 1 (ggml_quantize_chunk)."""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType

from .base import BlockQuant


class F32(BlockQuant, qtype=GGMLQuantizationType.F32):
    chunk_values = 1 << 22

    @classmethod
    def quantize_blocks(cls, blocks: np.ndarray) -> np.ndarray:
        # a copy: the input may be a reused scratch buffer (quants/rows.py) that the next task
        # overwrites before these bytes are written
        return np.array(blocks, dtype="<f4", order="C", copy=True).view(np.uint8)


class F16(BlockQuant, qtype=GGMLQuantizationType.F16):
    chunk_values = 1 << 22

    @classmethod
    def quantize_blocks(cls, blocks: np.ndarray) -> np.ndarray:
        # ggml_fp32_to_fp16_row: RNE, subnormals, overflow -> inf; NumPy's cast gives the
        # same bits for every non-NaN float32 (NaN is refused before we get here).
        return blocks.astype("<f2").view(np.uint8)


class BF16(BlockQuant, qtype=GGMLQuantizationType.BF16):
    chunk_values = 1 << 22

    @classmethod
    def quantize_blocks(cls, blocks: np.ndarray) -> np.ndarray:
        # ggml_compute_fp32_to_bf16 (ggml-impl.h), non-NaN branch: round to nearest even on
        # the top 16 bits, no flush-to-zero. Finite/inf inputs cannot overflow uint32 here.
        u = np.ascontiguousarray(blocks, dtype=np.float32).view(np.uint32)
        h = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)
        return h.astype("<u2").view(np.uint8)
