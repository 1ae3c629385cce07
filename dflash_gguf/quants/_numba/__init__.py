"""Compiled kernels (numba) for Q8_0, Q4_K, Q5_K and Q6_K: the numpy path's bytes, faster.

numba is a dependency; the kernels are used whenever it imports. ``DFLASH_GGUF_NUMBA=0`` (or
:func:`set_enabled`) forces the numpy path, which is also what runs where numba cannot be
imported. Each kernel maps ``(n_blocks, block_size)`` C-contiguous float32 to
``(n_blocks, type_size)`` uint8 and mirrors ggml-quants.c's ``quantize_row_*_ref`` operation by
operation. :mod:`.common` holds what makes them bit-exact; one module per type family holds the
kernels, imported by :func:`kernel` on first use. ``BlockQuant`` (quants/base.py) picks between
a kernel and the numpy path. numba itself is imported on the first question that needs it
(``enabled()`` with the kernels wanted, ``AVAILABLE``, :func:`kernel`), as that costs ~0.3 s: a
process that runs the numpy path by choice never pays it.
"""
from __future__ import annotations

import importlib
import os

import numpy as np

#: Set to 0 (or false/no/off) to force the numpy path.
ENV_VAR = "DFLASH_GGUF_NUMBA"

# Kernel name (BlockQuant.numba_kernel, or a helper) -> the module defining it; Q5_K shares
# Q4_K's fit; ``bf16_to_f32`` decodes a GGUF's BF16 input (quants/gguf_file.py).
_MODULES = {"q8_0": "q8_0", "q4_k": "q4_k", "q5_k": "q4_k", "q6_k": "q6_k", "bf16_to_f32": "decode"}

_available: bool | None = None  # None: numba not tried yet


def _numba_importable() -> bool:
    global _available
    if _available is None:
        try:  # a dependency, but the numpy path must keep working without it
            import numba  # noqa: F401
        except ImportError:  # pragma: no cover - exercised where numba is absent
            _available = False
        else:
            _available = True
    return _available


def __getattr__(name: str):
    if name == "AVAILABLE":  # whether numba is importable at all (imports it)
        return _numba_importable()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _wanted(value: str | None) -> bool:
    return (value or "1").strip().lower() not in ("0", "false", "no", "off")


# None: wanted, decided (by importing numba) on the first enabled()
_enabled: bool | None = None if _wanted(os.environ.get(ENV_VAR)) else False


def enabled() -> bool:
    """Whether the quantizers use the numba kernels (else the numpy path)."""
    global _enabled
    if _enabled is None:
        _enabled = _numba_importable()
    return _enabled


def set_enabled(flag: bool) -> bool:
    """Switch between the numba kernels and the numpy path; returns the previous setting.

    Raises:
        RuntimeError: ``flag`` is true but numba is not installed.
    """
    global _enabled
    if flag and not _numba_importable():
        raise RuntimeError("numba is not installed (pip install numba==0.68.1)")
    prev, _enabled = enabled(), bool(flag)
    return prev


def kernel(name: str):
    """The compiled kernel ``name`` (``"q8_0"``, ``"q4_k"``, ``"q5_k"``, ``"q6_k"``,
    ``"bf16_to_f32"``), importing its module on first use.

    Raises:
        KeyError: no kernel of that name.
        ImportError: numba is not installed.
    """
    return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)


def run(kernel, blocks: np.ndarray) -> np.ndarray:
    """``kernel(blocks)`` on C-contiguous, writable float32: numba compiles one specialisation
    per array type, so a read-only chunk (a memmap's) is copied rather than compiled for."""
    b = np.ascontiguousarray(blocks, dtype=np.float32)
    if not b.flags.writeable:
        b = b.copy()
    return kernel(b)
