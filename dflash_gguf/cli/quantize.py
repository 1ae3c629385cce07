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
    ftype: Annotated[Optional[str], typer.Argument(help="llama-quantize's file type (case-insensitive): Q8_0, Q6_K, Q5_K_M, Q5_K_S, Q5_1, Q5_0, Q4_K_M, Q4_K_S, Q4_1, Q4_0, Q3_K_L, Q3_K_M, Q3_K_S, Q2_K, IQ4_XS, IQ4_NL, F16, BF16, F32, COPY (aliases Q4_K, Q5_K, Q3_K; or its number); required, as for llama-quantize.")] = None,
    allow_requantize: Annotated[bool, typer.Option("--allow-requantize", help="Accept already-quantized inputs.")] = False,
    tensor_type: Annotated[Optional[list[str]], typer.Option("--tensor-type", help="PATTERN=TYPE: tensors whose name matches the regex PATTERN (std::regex search, first match wins) get the ggml TYPE (repeatable), as llama-quantize's.")] = None,
    tensor_type_file: Annotated[Optional[Path], typer.Option("--tensor-type-file", help="A file of PATTERN=TYPE entries separated by whitespace, as llama-quantize's.")] = None,
    output_tensor_type: Annotated[Optional[str], typer.Option("--output-tensor-type", help="ggml type of output.weight.")] = None,
    token_embedding_type: Annotated[Optional[str], typer.Option("--token-embedding-type", help="ggml type of token_embd.weight.")] = None,
    pure: Annotated[bool, typer.Option("--pure", help="Every quantized tensor gets the file type's default type: no k-quant mixture (overrides still apply).")] = False,
    leave_output_tensor: Annotated[bool, typer.Option("--leave-output-tensor", help="Copy output.weight as it is.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the per-tensor plan; write nothing.")] = False,
    json_out: JsonOpt = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite DST if it exists.")] = False,
    threads: Annotated[Optional[int], typer.Option("--threads", help="Worker threads (default: all usable cores); "
                                                  "the output is the same for any count.")] = None,
) -> None:
    """Quantize a GGUF with llama-quantize's per-tensor plan and overrides; the bytes equal llama-quantize's.

    Types that need an importance matrix in llama-quantize (IQ1/IQ2/IQ3_XXS, Q2_K_S, …) are refused with its reason. Details: docs/quantize.md.

    Example: dflash-gguf quantize drafter-bf16.gguf drafter-Q4_K_M.gguf q4_k_m --output-tensor-type q8_0
    """
    if ftype is None:
        ftype, dst = _type_from_dst(dst, dry_run)
    _known_type(ftype)
    overrides = _overrides(tensor_type, tensor_type_file, output_tensor_type, token_embedding_type, pure,
                           leave_output_tensor)
    from rich.table import Table

    from ..quants.gguf_file import quantize_gguf  # numpy, gguf-py (and numba if installed)

    if dst is None and not dry_run:
        raise typer.BadParameter("missing OUT path (or pass --dry-run)", param_hint="DST")
    plan = quantize_gguf(src, None, ftype, allow_requantize=allow_requantize, dry_run=True, threads=threads,
                         overrides=overrides)
    if dry_run:
        result = plan
    else:
        from ._kernels import compile_pending

        converted = [t for t in plan.tensors if t.quantized]  # the rest is copied as stored
        compile_pending({t.ggml_type for t in converted}, bf16_input=any(t.src_type.name == "BF16" for t in converted))
        total = sum(t.nbytes for t in plan.tensors)
        with byte_progress(total, f"quantizing → {dst.name}", enabled=not json_out) as advance:
            result = quantize_gguf(src, dst, ftype, allow_requantize=allow_requantize, force=force, progress=advance,
                                   threads=threads, overrides=overrides)
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
    from ..quants.ftypes import ALL_FTYPE_IDS, FTYPE_IDS

    if dst is not None and (str(dst).upper() in ALL_FTYPE_IDS or str(dst).strip().isdigit()):
        if dry_run:
            return str(dst), None
        raise UsageError(f"quantize: {dst} is the TYPE; name the output before it: "
                         f"dflash-gguf quantize IN.gguf OUT.gguf {dst} (or add --dry-run)")
    raise UsageError(f"quantize: missing TYPE (one of {', '.join(t.lower() for t in FTYPE_IDS)}): "
                     "dflash-gguf quantize IN.gguf OUT.gguf TYPE")


def _known_type(ftype: str) -> None:
    """A name llama-quantize does not know is a usage error (exit 2), as for convert's --outtype; a
    known one it refuses (an importance-matrix type) is refused by the plan, with its reason."""
    from ..errors import QuantizationError
    from ..quants.ftypes import resolve_ftype

    try:
        resolve_ftype(ftype)
    except QuantizationError as exc:
        raise UsageError(f"quantize: {exc}") from None


def _overrides(tensor_type: list[str] | None, tensor_type_file: Path | None, output_tensor_type: str | None,
               token_embedding_type: str | None, pure: bool, leave_output_tensor: bool):
    """llama-quantize's overrides, parsed as it parses them (a bad one is a usage line)."""
    from ..errors import QuantizationError
    from ..quants.ftypes import Overrides, parse_ggml_type, parse_tensor_type, parse_tensor_type_file

    try:
        pairs = [parse_tensor_type(a) for a in tensor_type or []]
        if tensor_type_file is not None:
            try:
                text = tensor_type_file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"--tensor-type-file {tensor_type_file}: {getattr(exc, 'strerror', None) or exc}") from None
            pairs += parse_tensor_type_file(text)
        return Overrides(tuple(pairs), None if output_tensor_type is None else parse_ggml_type(output_tensor_type),
                         None if token_embedding_type is None else parse_ggml_type(token_embedding_type), pure,
                         leave_output_tensor)
    except QuantizationError as exc:
        raise UsageError(f"quantize: {exc}") from None
