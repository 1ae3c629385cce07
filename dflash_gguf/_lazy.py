"""Package names imported on first use: a package's start-up cost is only what its caller touches
(the CLI's header-only commands must not import numpy, gguf-py or torch)."""
from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``exports[name]`` (a submodule name)
    the first time ``name`` is looked up."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(f".{exports[name]}", package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
