"""`retarget`: an existing drafter GGUF rewritten for another runtime's format.

Its own module (not convert's) so that a convert run does not build this command (see COMMANDS
in cli/__init__).
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ._app import app
from ._common import esc, note_stale, out, print_json
from ._options import DryRunOpt, ForceOpt, FormatOpt, JsonOpt, OutfileOpt


@app.command("retarget")
def retarget_cmd(
    src: Annotated[Path, typer.Argument(help="An existing drafter GGUF (any of the four formats, or a legacy DSpark GGUF).")],
    output: OutfileOpt = None,
    format: FormatOpt = "llama.cpp",
    target_gguf: Annotated[Optional[Path], typer.Option("--target-gguf", help="Add the target's tokenizer (for files that lack one; a legacy DSpark GGUF needs it).")] = None,
    target_dir: Annotated[Optional[Path], typer.Option("--target-dir", help="Same, from the target's Hugging Face dir.")] = None,
    drop_shared: Annotated[bool, typer.Option("--drop-shared-tensors", help="Leave out token_embd.weight and output.weight: mainline borrows the target's (full-vocabulary drafters only).")] = False,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    force: ForceOpt = False,
) -> None:
    """Rewrite a drafter GGUF into another runtime's format; tensor bytes are not touched.

    Fixes "unknown model architecture" and wrong tap offsets without re-converting. A legacy
    DSpark GGUF (architecture dspark) becomes the mainline file: keys renamed, taps +1, the
    vocabulary from --target-gguf.

    Example: dflash-gguf retarget old-dspark.gguf --target-gguf target.gguf -o drafter.gguf --drop-shared-tensors
    """
    from ..convert import retarget  # its writer imports numpy and gguf-py when it writes

    result = retarget(src, output, format=format, target_gguf=target_gguf, target_dir=target_dir, force=force,
                      dry_run=dry_run, drop_shared=drop_shared)
    note_stale(result.written)
    if json_out:
        print_json({"source_format": result.source_format, "format": result.target_format, "architecture": result.arch,
                    "tensors": [{"from": a, "to": b} for a, b in result.renamed], "dropped": list(result.dropped),
                    "output": None if result.written is None else str(result.written.path)})
        return
    out.print(f"{esc(src.name)}: [bold]{result.source_format}[/bold] → [bold]{result.target_format}[/bold] "
              f"(architecture {result.arch})")
    changed = [(a, b) for a, b in result.renamed if a != b]
    for a, b in changed:
        out.print(f"  {a} → {b}", markup=False)
    out.print(f"  {len(result.renamed)} tensors, {len(changed)} renamed, bytes unchanged", markup=False)
    if result.dropped:
        out.print(f"  dropped (the target lends them): {', '.join(result.dropped)}", markup=False)
    if result.written is not None:
        out.print(f"wrote {result.written.path} ({result.written.file_size:,} bytes)", markup=False)
