"""The numba kernels a job needs, whether numba's cache already holds them, and compiling them
before the job starts.

A kernel is compiled on its first call unless numba's on-disk cache holds it: seconds per type on
a fresh machine (docs/quantize.md measures each), a fraction of a second once cached. Compiling
inside the job would stall its first tensor with nothing said, so the CLI asks :func:`pending`,
says what it compiles while :func:`prepare` runs, and ``dflash-gguf kernels`` compiles every kernel
ahead of time (a CI image step). Where the cache lives is numba's rule: ``NUMBA_CACHE_DIR`` when set
(the directory a CI cache should keep), else ``__pycache__`` beside the kernel modules when
writable, else the user's cache directory.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np
from gguf import GGMLQuantizationType

from . import _numba
from .base import registered

#: The BF16 -> float32 decoder every BF16 input is read through (quants/rows.py).
BF16_DECODE = "bf16_to_f32"


@dataclass(frozen=True)
class Kernel:
    name: str  # the _numba kernel name
    qtypes: tuple[str, ...]  # the ggml types it writes (empty for the BF16 decoder)
    block_size: int

    def label(self) -> str:
        return ", ".join(self.qtypes) or "BF16 input"


def kernels_for(qtypes: Iterable[GGMLQuantizationType] | None = None, *, bf16_input: bool = True) -> list[Kernel]:
    """The kernels that quantizing to ``qtypes`` runs (every kernel when None), in a stable order;
    the BF16 decoder first when ``bf16_input``. Types without a kernel need nothing."""
    wanted = None if qtypes is None else set(qtypes)
    by_name: dict[str, list[str]] = {}
    sizes: dict[str, int] = {}
    for qt, cls in sorted(registered().items(), key=lambda kv: int(kv[0])):
        if cls.numba_kernel is None or (wanted is not None and qt not in wanted):
            continue
        by_name.setdefault(cls.numba_kernel, []).append(qt.name)
        sizes[cls.numba_kernel] = cls.block_size
    out = [Kernel(BF16_DECODE, (), 1)] if bf16_input else []
    return out + [Kernel(n, tuple(ts), sizes[n]) for n, ts in by_name.items()]


def _call(k: Kernel) -> None:
    """One call on the argument types every real call uses: compiles, or loads from the cache."""
    fn = _numba.kernel(k.name)
    if k.name == BF16_DECODE:
        fn(np.zeros(1, np.uint16), np.zeros(1, np.uint32))
    else:
        _numba.run(fn, np.zeros((1, k.block_size), np.float32))


def is_cached(k: Kernel) -> bool | None:
    """Whether numba's cache holds a current build of ``k`` (None: cannot tell).

    Reads numba's own cache index through its dispatcher (``_cache``, a private attribute: numba
    has no public query). An index for an older source file reads as empty, as numba itself
    would treat it, so a stale build is reported as not cached."""
    try:
        return bool(_numba.kernel(k.name)._cache._cache_file._load_index())
    except Exception:  # noqa: BLE001 - another numba version's internals: say "unknown", never fail the job
        return None


def cache_dir(k: Kernel | None = None) -> str | None:
    """Where numba keeps (or would keep) the kernel's build."""
    try:
        return str(_numba.kernel((k or Kernel("q8_0", (), 32)).name)._cache._cache_path)
    except Exception:  # noqa: BLE001 - see is_cached
        return None


def pending(kernels: Iterable[Kernel]) -> list[Kernel]:
    """The kernels a job would compile: all of them while numba is on, less those cached. No
    kernel asked for imports nothing (a copy-only job never loads numba)."""
    kernels = list(kernels)
    if not kernels or not _numba.enabled():
        return []
    return [k for k in kernels if is_cached(k) is not True]


@dataclass(frozen=True)
class Prepared:
    kernel: Kernel
    was_cached: bool | None
    seconds: float


def prepare(kernels: Iterable[Kernel], on_kernel: Callable[[Kernel], None] | None = None) -> list[Prepared]:
    """Compile (or load) each kernel now, timing each; nothing when numba is off."""
    done = []
    if not _numba.enabled():
        return done
    for k in kernels:
        if on_kernel is not None:
            on_kernel(k)
        cached = is_cached(k)
        t0 = time.perf_counter()
        _call(k)
        done.append(Prepared(k, cached, time.perf_counter() - t0))
    return done
