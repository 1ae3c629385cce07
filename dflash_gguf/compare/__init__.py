"""compare-weights: checkpoint or GGUF vs GGUF, tensor by tensor, dequantized, with verdicts.

Modules: ``api`` (the entry points and the pairing of tensors), ``bands`` (thresholds),
``sides`` (reading a tensor row by row), ``stats`` (per-chunk numbers), ``engine`` (the main
pass and the verdicts), ``diagnose`` (naming the cause of a failure), ``report`` (results).
"""
from .api import compare, compare_ggufs, compare_weights
from .bands import ALL_TYPES, BANDS, EXPECTED_FACTOR, FALLBACK_BAND, Band, band, parse_tolerances
from .engine import CHUNK_VALUES
from .report import (BIT_IDENTICAL, EXTRA, MISSING, OUT, PASSING, SHAPE_MISMATCH, STATUSES, WITHIN, CompareReport,
                     TensorComparison)

__all__ = [
    "ALL_TYPES", "BANDS", "BIT_IDENTICAL", "Band", "CHUNK_VALUES", "CompareReport", "EXPECTED_FACTOR", "EXTRA",
    "FALLBACK_BAND", "MISSING", "OUT", "PASSING", "SHAPE_MISMATCH", "STATUSES", "TensorComparison", "WITHIN", "band",
    "compare", "compare_ggufs", "compare_weights", "parse_tolerances",
]
