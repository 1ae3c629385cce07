"""Package names imported on first use: a package's start-up cost is only what its caller touches
(the CLI's header-only commands must not import numpy, gguf-py or torch)."""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``exports[name]`` (a submodule name)
    the first time ``name`` is looked up."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(f".{exports[name]}", package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def require(package: str, what: str, extra: str, alternative: str = "") -> Any:
    """Import the optional ``package`` (top level) and return it; missing, raise the one UsageError
    line that names the extra installing it (``what`` needs the 'torch' package: pip install
    'dflash-gguf[torch]'), the one place that message is worded. ``alternative``: another way out."""
    from .errors import UsageError

    try:
        __import__(package)  # not importlib: tests stand in for a missing package by patching __import__
    except ImportError:
        hint = f" ({alternative})" if alternative else ""
        raise UsageError(f"{what} needs the '{package}' package: pip install 'dflash-gguf[{extra}]'{hint}") from None
    return sys.modules[package]
