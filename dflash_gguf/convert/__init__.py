"""Conversion: config → plan → tensors → file (convert, retarget, inspect)."""
from .checkpoint import Conversion, ConvertResult, convert, encode, plan_conversion, write_conversion  # noqa: F401
from .retarget import RetargetResult, retarget  # noqa: F401
