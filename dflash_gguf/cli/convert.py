"""`convert`: parse flags, call the library, render the plan / summary."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from ..convert.outtypes import OUTTYPES, QUANT_OUTTYPES
from ._app import app
from ._common import byte_progress, esc, note_stale, out, print_json, warn
from ._options import DryRunOpt, ForceOpt, FormatOpt, JsonOpt

if TYPE_CHECKING:  # the converter (numpy, gguf-py, safetensors) is imported when a command runs
    from ..convert import ConvertResult
    from ..convert.plan import ConversionPlan

# mainline's --outfile: a directory or no -o gets its default name, {ftype} is filled in
OutfileOpt = Annotated[Optional[Path], typer.Option(
    "-o", "--outfile", help="Output GGUF path; {ftype} becomes the outtype. Default: {Name}-{Size}-{Type}.gguf "
                            "in the drafter dir (in the given dir when it is a directory; ORG-NAME-{ftype}.gguf "
                            "here for a repo id), as llama.cpp names it.")]
MetadataOpt = Annotated[Optional[Path], typer.Option(
    "--metadata", exists=True, dir_okay=False,
    help="JSON of general.* keys overriding the model card's (llama.cpp's --metadata).")]
ModelNameOpt = Annotated[Optional[str], typer.Option("--model-name", help="general.name (llama.cpp's --model-name).")]

@app.command("convert")
def convert_cmd(
    drafter_dir: Annotated[Path, typer.Argument(help="Drafter dir: config.json + model.safetensors (or sharded index), or a Hugging Face repo id ORG/NAME[@REV].")],
    output: OutfileOpt = None,
    format: FormatOpt = "llama.cpp",
    outtype: Annotated[str, typer.Option("--outtype", "-t", help=f"{', '.join(OUTTYPES)}; norms and 1-D stay F32.")] = "auto",
    target_gguf: Annotated[Optional[Path], typer.Option("--target-gguf", help="Target model GGUF: tokenizer.* copied.")] = None,
    target_dir: Annotated[Optional[Path], typer.Option("--target-dir", help="Target Hugging Face dir (or repo id ORG/NAME[@REV]: its config and tokenizer only): vocab built from its tokenizer.")] = None,
    dry_run: DryRunOpt = False,
    json_out: JsonOpt = False,
    force: ForceOpt = False,
    metadata: MetadataOpt = None,
    model_name: ModelNameOpt = None,
    fp8_as_q8: Annotated[bool, typer.Option(
        "--fp8-as-q8", help="Pre-quantized FP8 checkpoint: write its FP8 weights (2+ dims) as Q8_0, the rest as "
                            "--outtype (llama.cpp's --fp8-as-q8).")] = False,
) -> None:
    """Convert a DFlash drafter checkpoint (safetensors + config.json) to GGUF.

    Example: dflash-gguf convert z-lab/Qwen3-8B-DFlash-b16 --target-gguf Qwen3-8B.gguf -o drafter.gguf
    """
    from ..convert import plan_conversion, write_conversion  # numpy, gguf-py, safetensors: see cli/__init__
    from ..convert.checkpoint import input_paths
    from ..convert.metadata import output_path
    from ..fileio.outputs import check_output
    # a Hugging Face repo id (ORG/NAME[@REV]) becomes its cached snapshot: the drafter's files, and
    # only the target's config and tokenizer, never its weights (docs/hub.md)
    from ..hub import DRAFTER_FILES, TARGET_CONFIG_FILES, resolve_dir

    # a plain path is refused now, not after downloading or reading the target; a default, directory
    # or {ftype} name is known only once the plan has the name, size label and file type
    named_now = output is not None and "{" not in output.name and not _is_dir(output)
    if named_now and not dry_run:
        check_output(output, inputs=input_paths(drafter_dir, target_gguf, target_dir), force=force)
    from ..config.deepseek_v4 import hub_files

    drafter_dir = resolve_dir(drafter_dir, flag="convert", allow_patterns=DRAFTER_FILES, progress=not json_out,
                              narrow=hub_files)
    if target_dir is not None:
        target_dir = resolve_dir(target_dir, flag="--target-dir", allow_patterns=TARGET_CONFIG_FILES,
                                 progress=not json_out)
    conv = plan_conversion(drafter_dir, format=format, outtype=outtype.lower(), target_gguf=target_gguf,
                           target_dir=target_dir, metadata=metadata, model_name=model_name, fp8_as_q8=fp8_as_q8)
    if dry_run:
        if json_out:
            print_json({**conv.plan.to_json(), "target_checks": conv.target_checks})
        else:
            render_plan(conv.plan)
        return
    if not named_now:
        output = output_path(output, drafter_dir, conv.plan.kvs)
        check_output(output, inputs=conv.inputs, force=force)
    if conv.plan.outtype in QUANT_OUTTYPES:  # a float outtype runs no kernel (and imports no numpy)
        from ._kernels import compile_pending

        # a checkpoint's BF16 is decoded by safetensors/numpy, not the GGUF reader's kernel
        compile_pending({t.ggml_type for t in conv.plan.tensors}, bf16_input=False)
    with byte_progress(conv.plan.total_bytes, f"converting → {output.name}", enabled=not json_out) as advance:
        result = write_conversion(conv, output, force=force, progress=advance)
    note_stale(result.written)
    if json_out:
        print_json(_result_json(result))
    else:
        render_summary(result)


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # a name too long to stat: check_output says so in its own words
        return False


def render_plan(plan: ConversionPlan) -> None:
    from rich.table import Table

    out.print(f"[bold]plan[/bold]: format {plan.format}, architecture {esc(plan.arch)}, outtype {plan.outtype}")
    kv = Table(title="metadata", show_lines=False)
    for c in ("key", "type", "value"):
        kv.add_column(c)
    for item in plan.kvs:
        j = item.to_json()
        kv.add_row(esc(j["key"]), j["type"], esc(_short(j["value"])))
    out.print(kv)
    tt = Table(title=f"tensors ({len(plan.tensors)}, {plan.total_bytes:,} bytes)")
    for c in ("source", "GGUF name", "shape (ne)", "type", "why"):
        tt.add_column(c)
    for t in plan.tensors:
        tt.add_row(esc(t.src or "(generated)"), esc(t.dst), str(list(reversed(t.shape))), t.ggml_type.name, t.reason)
    out.print(tt)
    _render_notes(plan)


def render_summary(result: ConvertResult) -> None:
    plan, w = result.plan, result.written
    types: dict[str, int] = {}
    for t in plan.tensors:
        types[t.ggml_type.name] = types.get(t.ggml_type.name, 0) + 1
    out.lead("wrote", "bold green", f"{w.path}  ({w.file_size:,} bytes)")
    out.print(f"  format        {plan.format}  (general.architecture = {plan.arch})", markup=False)
    out.print(f"  tensors       {w.n_tensors}  ({', '.join(f'{n} {k}' for k, n in sorted(types.items()))})", markup=False)
    out.print(f"  metadata      {w.n_kv} keys", markup=False)
    delta = plan.taps_stored[0] - plan.taps_zlab[0] if plan.taps_zlab else 0
    how = "+1 applied: stored as layer-input ids" if delta == 1 else "stored unchanged (layer-output ids)"
    out.print(f"  target layers z-lab {list(plan.taps_zlab)} → file {list(plan.taps_stored)}  ({how})", markup=False)
    src = plan.sources
    out.print(f"  rope theta    from {src.get('rope_theta')}; block_size from {src.get('block_size')}; "
              f"taps from {src.get('target_layer_ids')}", markup=False)
    for note in result.target_checks:
        out.print(f"  target        {note}", markup=False)
    _render_notes(plan)


def _render_notes(plan: ConversionPlan) -> None:
    for name, why in plan.dropped:
        warn(f"dropped {name}: {why}")
    for w in plan.warnings:
        warn(w)


def _short(v) -> str:
    s = str(v)
    return s if len(s) <= 80 else s[:77] + "..."


def _result_json(result: ConvertResult) -> dict:
    w = result.written
    return {**result.plan.to_json(), "target_checks": result.target_checks,
            "output": {"path": str(w.path), "file_size": w.file_size, "n_tensors": w.n_tensors, "n_kv": w.n_kv}}
