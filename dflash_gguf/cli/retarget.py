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
    src: Annotated[Path, typer.Argument(help="An existing drafter GGUF (any of the four formats).")],
    output: OutfileOpt = None,
    format: FormatOpt = "llama.cpp",
    target_gguf: Annotated[Optional[Path], typer.Option("--target-gguf", help="Add the target's tokenizer (for files that lack one).")] = None,
    target_dir: Annotated[Optional[Path], typer.Option("--target-dir", help="Same, from the target's Hugging Face dir.")] = None,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    force: ForceOpt = False,
) -> None:
    """Rewrite a drafter GGUF into another runtime's format; tensor bytes are not touched.

    Fixes "unknown model architecture" and wrong tap offsets without re-converting.
    """
    from ..convert import retarget  # its writer imports numpy and gguf-py when it writes

    result = retarget(src, output, format=format, target_gguf=target_gguf, target_dir=target_dir, force=force,
                      dry_run=dry_run)
    note_stale(result.written)
    if json_out:
        print_json({"source_format": result.source_format, "format": result.target_format, "architecture": result.arch,
                    "tensors": [{"from": a, "to": b} for a, b in result.renamed],
                    "output": None if result.written is None else str(result.written.path)})
        return
    out.print(f"{esc(src.name)}: [bold]{result.source_format}[/bold] → [bold]{result.target_format}[/bold] "
              f"(architecture {result.arch})")
    changed = [(a, b) for a, b in result.renamed if a != b]
    for a, b in changed:
        out.print(f"  {a} → {b}", markup=False)
    out.print(f"  {len(result.renamed)} tensors, {len(changed)} renamed, bytes unchanged", markup=False)
    if result.written is not None:
        out.print(f"wrote {result.written.path} ({result.written.file_size:,} bytes)", markup=False)
