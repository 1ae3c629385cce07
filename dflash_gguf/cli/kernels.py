"""`kernels`: compile (or load) the numba kernels now, so no later job compiles them."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from ..errors import UsageError
from ._app import app
from ._common import out, print_json
from ._options import JsonOpt


@app.command("kernels")
def kernels_cmd(
    types: Annotated[Optional[list[str]], typer.Argument(help="ggml types (q4_K, iq4_xs, ...); default: every kernel.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Compile the quantizers' numba kernels into numba's cache, timing each (a CI image step).

    A first `quantize` on a machine otherwise compiles the kernels it needs itself (seconds per
    type). The cache is NUMBA_CACHE_DIR when set. Details: docs/quantize.md.

    Example: NUMBA_CACHE_DIR=~/.cache/dflash-gguf-numba dflash-gguf kernels
    """
    from ..quants import _numba, compiled

    qtypes = None if not types else {q for t in types for q in _ggml_types(t)}
    kernels = compiled.kernels_for(qtypes, bf16_input=True)
    if not _numba.enabled():
        why = "numba is not installed" if not _numba.AVAILABLE else f"{_numba.ENV_VAR}=0"
        raise UsageError(f"kernels: {why}, so the numpy path runs and there is nothing to compile")
    done = compiled.prepare(kernels)
    rows = [{"kernel": p.kernel.name, "types": list(p.kernel.qtypes), "was_cached": p.was_cached,
             "seconds": round(p.seconds, 3)} for p in done]
    where = compiled.cache_dir()
    if json_out:
        print_json({"cache_dir": where, "kernels": rows})
        return
    from rich.table import Table

    table = Table(title=f"numba kernels ({where})")
    for c in ("kernel", "types", "state", "seconds"):
        table.add_column(c)
    state = {True: "loaded from cache", False: "compiled", None: "compiled or loaded"}
    for r, p in zip(rows, done):
        table.add_row(r["kernel"], p.kernel.label(), state[p.was_cached], f"{p.seconds:.2f}")
    out.print(table)


def _ggml_types(name: str):
    """A ggml type; a file type (Q4_K_M) mixes several, so it is refused with that hint."""
    from ..errors import QuantizationError
    from ..quants import resolve_qtype

    try:
        return {resolve_qtype(name)}
    except QuantizationError as exc:
        raise UsageError(f"kernels: {exc}; name ggml types (q4_K q6_K ...), or none for every kernel") from None
