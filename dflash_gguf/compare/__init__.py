"""compare-weights: checkpoint or GGUF vs GGUF, tensor by tensor, dequantized, with verdicts.

Modules: ``api`` (the entry points and the pairing of tensors), ``deepseek_v4`` (the pairing
and keys of a DeepSeek-V4 checkpoint's DSpark draft), ``bands`` (thresholds), ``sides`` (reading
a tensor row by row), ``stats`` (per-chunk numbers), ``engine`` (the main pass and the
verdicts), ``diagnose`` (naming the cause of a failure), ``report`` (results).
The public names below are imported on first use: the CLI's start-up needs the statuses
(``report``), not the numpy engine.
"""
from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "compare": "api", "compare_ggufs": "api", "compare_weights": "api",
    **dict.fromkeys(["ALL_TYPES", "BANDS", "EXPECTED_FACTOR", "FALLBACK_BAND", "Band", "band", "parse_tolerances"],
                    "bands"),
    "CHUNK_VALUES": "engine",
    **dict.fromkeys(["BIT_IDENTICAL", "EXTRA", "MISSING", "OUT", "PASSING", "SHAPE_MISMATCH", "STATUSES", "WITHIN",
                     "CompareReport", "TensorComparison"], "report"),
}
__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
