"""Conversion: config → plan → tensors → file (convert, retarget, inspect).

The converter's names are imported on first use: ``inspect`` (``describe``) and the CLI's
start-up must not pay for its imports (numpy, gguf-py, safetensors).
"""
from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {name: "checkpoint" for name in
            ("Conversion", "ConvertResult", "convert", "encode", "plan_conversion", "write_conversion")}
_EXPORTS.update(RetargetResult="retargeting", retarget="retargeting")
__all__ = list(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
