"""Compiled kernels (numba) for every type the quantizers write but the float ones: Q8_0, Q4_0,
Q5_0, Q4_1, Q5_1, Q4_K, Q5_K, Q6_K, Q3_K, Q2_K, IQ4_NL and IQ4_XS: the numpy path's bytes, faster.

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
import sys

import numpy as np

#: Set to 0 (or false/no/off) to force the numpy path.
ENV_VAR = "DFLASH_GGUF_NUMBA"

# Kernel name (BlockQuant.numba_kernel, or a helper) -> the module defining it; Q5_K shares
# Q4_K's fit; ``bf16_to_f32`` decodes a GGUF's BF16 input (quants/gguf_file.py).
# ``*_values``: the same kernel also writing the values its bytes dequantize to (a compare's y).
_MODULES = {"q8_0": "q8_0", "q4_k": "q4_k", "q5_k": "q4_k", "q6_k": "q6_k", "bf16_to_f32": "decode",
            "q4_k_values": "q4_k", "q5_k_values": "q4_k", "q6_k_values": "q6_k",
            "q4_0": "legacy", "q5_0": "legacy", "q4_1": "legacy", "q5_1": "legacy",
            "q3_k": "k_low", "q2_k": "k_low", "iq4_nl": "iq4", "iq4_xs": "iq4"}

_available: bool | None = None  # None: numba not tried yet


def _numba_importable() -> bool:
    global _available
    if _available is None:
        try:  # a dependency, but the numpy path must keep working without it
            _import_numba()
        except ImportError:  # pragma: no cover - exercised where numba is absent
            _available = False
        else:
            _available = True
    return _available


# While numba loads, these look absent (None in sys.modules makes their import fail at once).
_SCIPY = ("scipy", "scipy.linalg.cython_blas")


def _import_numba() -> None:
    """``import numba``, and its numpy support, without scipy.

    numba imports scipy to check its version, and its numpy support (loaded with the CPU
    target on the first kernel call) imports scipy.linalg to learn whether BLAS can back
    jitted np.correlate/np.convolve: ~0.5 s of a compare's start, numpy.f2py included, for
    nothing any kernel here uses. So scipy is made to look absent while numba loads, unless
    this process imported it already (then it is left alone). numba handles a missing scipy:
    the one lasting effect is that jitted np.correlate/np.convolve in this process run
    numba's own loop instead of BLAS. Anything that imports scipy afterwards gets it."""
    blocked = [m for m in _SCIPY if m not in sys.modules and "scipy.linalg" not in sys.modules]
    for m in blocked:
        sys.modules[m] = None  # type: ignore[assignment]
    try:
        import numba  # noqa: F401
        import numba.np.arraymath  # noqa: F401  (what the first kernel call would load, scipy probe included)
    finally:
        for m in blocked:
            if sys.modules.get(m, 0) is None:
                del sys.modules[m]


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


def has_kernel(name: str) -> bool:
    """Whether a kernel of that name exists (without importing numba)."""
    return name in _MODULES


def kernel(name: str):
    """The compiled kernel ``name`` (a key of ``_MODULES``: ``"q8_0"``, ``"q4_k"``, ``"iq4_xs"``, ...,
    the ``"*_values"`` variants, ``"bf16_to_f32"``), importing its module on first use.

    Raises:
        KeyError: no kernel of that name.
        ImportError: numba is not installed.
    """
    if not _numba_importable():
        raise ImportError("numba is not installed (pip install numba==0.68.1)")
    return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)


def run(kernel, blocks: np.ndarray) -> np.ndarray:
    """``kernel(blocks)`` on C-contiguous, writable float32: numba compiles one specialisation
    per array type, so a read-only chunk (a memmap's) is copied rather than compiled for."""
    b = np.ascontiguousarray(blocks, dtype=np.float32)
    if not b.flags.writeable:
        b = b.copy()
    return kernel(b)
