"""ggml-bit-exact quantizers and llama-quantize's per-tensor type plan.

``quantize(x, "q4_K")`` returns the same block bytes as ggml's C reference quantizer
(``ggml_quantize_chunk`` without an importance matrix, x86-64 build without FMA), which is
what ``llama-quantize`` writes. ``dequantize`` inverts it with ggml's own float order.
The per-tensor type choice for ``Q8_0`` / ``Q4_K_M`` files lives in :mod:`.policy`.
"""
from .._lazy import lazy_exports

__all__ = [
    "QUANTIZE_TYPES",
    "block_size",
    "default_threads",
    "dequantize",
    "quantize",
    "quantize_finite",
    "quantize_finite_with_values",
    "resolve_qtype",
    "row_nbytes",
    "type_size",
]

# Imported on first use: a job that only copies tensors (COPY, BF16 from BF16) plans and writes
# without numpy, gguf-py or the quantizer modules (~0.15 s of a ~1.2 s 2 GB copy).
__getattr__ = lazy_exports(__name__, {**dict.fromkeys(__all__, "api"), "default_threads": "threads"})
