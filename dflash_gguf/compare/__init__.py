"""compare-weights: checkpoint or GGUF vs GGUF, tensor by tensor, dequantized, with verdicts."""
from .api import (  # noqa: F401  (the package's public API)
    BIT_IDENTICAL, EXTRA, MISSING, OUT, SHAPE_MISMATCH, WITHIN,
    ALL_TYPES, BANDS, Band, CHUNK_VALUES, CompareReport, EXPECTED_FACTOR, FALLBACK_BAND, PASSING,
    STATUSES, TensorComparison, band, compare, compare_ggufs, compare_weights, parse_tolerances,
)
