"""dflash-gguf: convert, quantize, check and verify DFlash drafters as GGUF.

Public API (stable): ``quantize(x, qtype)`` and ``dequantize(data, qtype, shape)`` with
ggml-bit-exact block bytes. They are imported lazily so ``import dflash_gguf`` stays cheap.
"""
from __future__ import annotations

__version__ = "0.2.0"
__all__ = ["quantize", "dequantize", "__version__"]


def __getattr__(name: str):
    if name in ("quantize", "dequantize"):
        from . import quants

        return getattr(quants, name)
    raise AttributeError(f"module 'dflash_gguf' has no attribute {name!r}")
