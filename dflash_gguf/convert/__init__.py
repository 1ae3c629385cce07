"""Conversion: config → plan → tensors → file (convert, retarget, inspect).

The converter's names are imported on first use: ``inspect`` (``describe``) and the CLI's
start-up must not pay for its imports (numpy, gguf-py, safetensors).
"""
from __future__ import annotations

import importlib

_EXPORTS = {name: "checkpoint" for name in
            ("Conversion", "ConvertResult", "convert", "encode", "plan_conversion", "write_conversion")}
_EXPORTS.update(RetargetResult="retargeting", retarget="retargeting")
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
