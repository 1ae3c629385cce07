"""Conversion: config → plan → tensors → file (convert, retarget, inspect)."""
from .checkpoint import (  # noqa: F401  (the package's public API)
    ConvertResult, RetargetResult, convert, encode, plan_conversion, retarget,
)
