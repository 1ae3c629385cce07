"""`quantize`: llama-quantize's positional order (IN OUT TYPE), bit-exact ggml blocks."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import UsageError
from ._app import app
from ._common import byte_progress, esc, note_stale, out, print_json
from ._options import JsonOpt


@app.command("quantize")
def quantize_cmd(
    src: Annotated[Path, typer.Argument(help="Input GGUF (F32/F16/BF16 tensors).")],
    dst: Annotated[Optional[Path], typer.Argument(help="Output GGUF.")] = None,
    ftype: Annotated[Optional[str], typer.Argument(help="q8_0 or q4_k_m (case-insensitive); required, as for llama-quantize.")] = None,
    allow_requantize: Annotated[bool, typer.Option("--allow-requantize", help="Accept already-quantized inputs.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the per-tensor plan; write nothing.")] = False,
    json_out: JsonOpt = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite DST if it exists.")] = False,
    threads: Annotated[Optional[int], typer.Option("--threads", help="Worker threads (default: all usable cores); "
                                                  "the output is the same for any count.")] = None,
) -> None:
    """Quantize a GGUF to Q8_0 or Q4_K_M with llama-quantize's per-tensor plan; bytes equal ggml's.

    Example: dflash-gguf quantize drafter-bf16.gguf drafter-Q4_K_M.gguf q4_k_m
    """
    if ftype is None:
        ftype, dst = _type_from_dst(dst, dry_run)
    from rich.table import Table

    from ..quants.gguf_file import quantize_gguf  # numpy, gguf-py (and numba if installed)

    if dst is None and not dry_run:
        raise typer.BadParameter("missing OUT path (or pass --dry-run)", param_hint="DST")
    plan = quantize_gguf(src, None, ftype, allow_requantize=allow_requantize, dry_run=True, threads=threads)
    if dry_run:
        result = plan
    else:
        total = sum(t.nbytes for t in plan.tensors)
        with byte_progress(total, f"quantizing → {dst.name}", enabled=not json_out) as advance:
            result = quantize_gguf(src, dst, ftype, allow_requantize=allow_requantize, force=force, progress=advance,
                                   threads=threads)
        note_stale(result.written)
    if json_out:
        print_json(result.to_json())
        return
    table = Table(title=f"{esc(src.name)} → {result.ftype.upper()} ({len(result.tensors)} tensors)")
    for c in ("name", "ne", "from", "to", "why"):
        table.add_column(c)
    for t in result.tensors:
        table.add_row(esc(t.name), str(list(reversed(t.shape))), t.src_type.name, t.ggml_type.name, t.reason)
    out.print(table)
    counts: dict[str, int] = {}
    for t in result.tensors:
        counts[t.ggml_type.name] = counts.get(t.ggml_type.name, 0) + 1
    mix = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    if result.written is not None:
        out.print(f"[bold green]wrote[/bold green] {esc(result.written.path)} ({result.written.file_size:,} bytes; {mix})")
    else:
        out.print(f"dry run: nothing written ({mix})")


def _type_from_dst(dst: Path | None, dry_run: bool) -> tuple[str, Path | None]:
    """No third argument. ``IN TYPE --dry-run`` writes nothing, so it needs no OUT: the second
    argument is the type. Otherwise the type is missing: there is no default, as in llama-quantize
    (a silent Q8_0 would be the wrong file for anyone who meant Q4_K_M)."""
    from ..quants.policy import FTYPE_IDS

    types = [t.lower() for t in FTYPE_IDS]
    if dst is not None and str(dst).lower() in types:
        if dry_run:
            return str(dst), None
        raise UsageError(f"quantize: {dst} is the TYPE; name the output before it: "
                         f"dflash-gguf quantize IN.gguf OUT.gguf {dst} (or add --dry-run)")
    raise UsageError(f"quantize: missing TYPE ({' or '.join(types)}): dflash-gguf quantize IN.gguf OUT.gguf TYPE")
