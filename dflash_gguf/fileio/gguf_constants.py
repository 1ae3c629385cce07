"""The GGUF value types and ggml tensor types, mirrored from gguf-py 0.19 (``gguf.constants``).

Why a copy: ``import gguf`` runs gguf-py's ``__init__``, which imports numpy, yaml and its
writer, reader and quantizers (~100 ms), and the header-only commands (``check``,
``check-instruct``, ``inspect``) need none of that, only these numbers; nor does a convert
that copies tensor bytes (its header is packed by ``kv_encode``). They are IntEnums with
gguf-py's names and values, so they compare, hash and print like gguf-py's (``== ``, dict keys,
``.name``) and can be passed to gguf-py. Modules that need gguf-py anyway (quantizers, compare)
keep using its classes. tests/fileio/test_gguf_constants.py checks the copy against the
installed gguf-py.
"""
from __future__ import annotations

from enum import IntEnum

GGUF_MAGIC = 0x46554747  # "GGUF", little-endian
GGUF_VERSION = 3
GGUF_DEFAULT_ALIGNMENT = 32


class GGUFValueType(IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


class GGMLQuantizationType(IntEnum):
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41


QK_K = 256
_Q = GGMLQuantizationType
#: ggml type -> (elements per block, bytes per block).
GGML_QUANT_SIZES: dict[GGMLQuantizationType, tuple[int, int]] = {
    _Q.F32: (1, 4),
    _Q.F16: (1, 2),
    _Q.Q4_0: (32, 2 + 16),
    _Q.Q4_1: (32, 2 + 2 + 16),
    _Q.Q5_0: (32, 2 + 4 + 16),
    _Q.Q5_1: (32, 2 + 2 + 4 + 16),
    _Q.Q8_0: (32, 2 + 32),
    _Q.Q8_1: (32, 4 + 4 + 32),
    _Q.Q2_K: (256, 2 + 2 + QK_K // 16 + QK_K // 4),
    _Q.Q3_K: (256, 2 + QK_K // 4 + QK_K // 8 + 12),
    _Q.Q4_K: (256, 2 + 2 + QK_K // 2 + 12),
    _Q.Q5_K: (256, 2 + 2 + QK_K // 2 + QK_K // 8 + 12),
    _Q.Q6_K: (256, 2 + QK_K // 2 + QK_K // 4 + QK_K // 16),
    _Q.Q8_K: (256, 4 + QK_K + QK_K // 8),
    _Q.IQ2_XXS: (256, 2 + QK_K // 4),
    _Q.IQ2_XS: (256, 2 + QK_K // 4 + QK_K // 32),
    _Q.IQ3_XXS: (256, 2 + QK_K // 4 + QK_K // 8),
    _Q.IQ1_S: (256, 2 + QK_K // 8 + QK_K // 16),
    _Q.IQ4_NL: (32, 2 + 16),
    _Q.IQ3_S: (256, 2 + QK_K // 4 + QK_K // 8 + QK_K // 32 + 4),
    _Q.IQ2_S: (256, 2 + QK_K // 4 + QK_K // 16),
    _Q.IQ4_XS: (256, 2 + 2 + QK_K // 2 + QK_K // 64),
    _Q.I8: (1, 1),
    _Q.I16: (1, 2),
    _Q.I32: (1, 4),
    _Q.I64: (1, 8),
    _Q.F64: (1, 8),
    _Q.IQ1_M: (256, QK_K // 8 + QK_K // 16 + QK_K // 32),
    _Q.BF16: (1, 2),
    _Q.TQ1_0: (256, 2 + 4 * 13),
    _Q.TQ2_0: (256, 2 + 64),
    _Q.MXFP4: (32, 1 + 16),
    _Q.NVFP4: (64, 4 + 32),
    _Q.Q1_0: (128, 2 + 16),
}
