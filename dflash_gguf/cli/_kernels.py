"""Say so before a job compiles numba kernels: a first run on a machine spends seconds per type
compiling, which used to look like a hang before the first tensor (quants/compiled.py)."""
from __future__ import annotations

from typing import Iterable

from ._common import err


def compile_pending(qtypes: Iterable, *, bf16_input: bool) -> None:
    """Compile the kernels quantizing to ``qtypes`` needs and numba's cache lacks, one line on
    stderr before and after (CI logs show it too); nothing when all are cached or numba is off,
    or when nothing is quantized (a copy-only job, which then imports neither numpy nor numba)."""
    qtypes = tuple(qtypes)
    if not qtypes:
        return
    from ..quants import compiled

    todo = compiled.pending(compiled.kernels_for(qtypes, bf16_input=bf16_input))
    if not todo:
        return
    where = compiled.cache_dir(todo[0]) or "numba's cache"
    err.print(f"compiling numba kernels for {'; '.join(k.label() for k in todo)}: once per machine, "
              f"kept in {where} (set NUMBA_CACHE_DIR to choose; `dflash-gguf kernels` compiles them ahead)",
              markup=False)
    done = compiled.prepare(todo)
    err.print(f"compiled in {sum(p.seconds for p in done):.1f} s", markup=False)
