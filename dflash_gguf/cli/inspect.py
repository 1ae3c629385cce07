"""`inspect`: what a drafter GGUF is, in both tap conventions."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._app import app
from ._common import esc, out, print_json


def dspark_line(d: dict) -> str:
    """One line on a DSpark drafter's heads: what the runtime will do with them."""
    rank = "no Markov head" if d["markov_rank"] is None else f"Markov head rank {d['markov_rank']}"
    full = d["vocab_size"] if d["vocab_size"] is not None else "?"
    vocab = (f"full vocabulary ({full})" if d["draft_vocab_size"] is None
             else f"draft vocabulary {d['draft_vocab_size']} of {full} (d2t)")
    conf = "confidence head" if d["confidence_head"] else "no confidence head"
    v4 = d.get("deepseek_v4")
    anchor = {True: "samples the anchor slot", False: "slot 0 is a bonus anchor",
              None: "samples the anchor slot (runtime default)" if v4 else "sample_from_anchor missing (runtime: true)"
              }[d["sample_from_anchor"]]
    extra = ["Gemma4 block"] if d["gemma4_layout"] else []
    if v4:
        extra.append(f"DeepSeek-V4 stages: {v4['stages']}, {v4['routed_experts']} routed experts "
                     f"({v4['experts_per_token']} per token), {v4['hyper_connections']} hyper-connection streams, "
                     f"sliding window {v4['sliding_window']}")
    return ", ".join([rank, vocab, conf, anchor] + extra)


def provenance_line(p: dict) -> str:
    """Where the file came from and what wrote it, from its own keys."""
    src = p["source_repo_url"] or p["source_url"]
    if src is None:
        where = "source not recorded (converted from a local directory, or by another tool)"
    else:
        where = f"source {src}" + (f" at commit {p['commit']}" if p["commit"] else "")
    who = f"written by dflash-gguf {p['converter']}" if p["converter"] else "not written by dflash-gguf"
    return f"{where}; {who}"


@app.command("inspect")
def inspect_cmd(
    path: Annotated[Path, typer.Argument(help="A GGUF file.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")] = False,
) -> None:
    """Show a GGUF's format, metadata, tensors and (for drafters) its taps in both conventions."""
    from ..convert.describe import inspect_gguf

    info = inspect_gguf(path)
    if json_out:
        print_json(info.to_json())
        return
    from rich.table import Table  # here: see cli/__init__ (and --json needs no rich at all)

    what = info.format or ("legacy DSpark GGUF (fork format)" if info.legacy_dspark else "not a DFlash drafter")
    out.print(f"[bold]{esc(path)}[/bold]: architecture {esc(info.arch)}, format {esc(what)}")
    if info.legacy_dspark:
        out.print(f"  mainline llama.cpp cannot load it; migrate: {info.legacy_dspark} [--drop-shared-tensors]",
                  markup=False)
    if info.taps_zlab is not None:
        out.print(f"  taps (z-lab, output of layer L):      {list(info.taps_zlab)}", markup=False)
        out.print(f"  taps (llama.cpp, input of layer L+1): {[i + 1 for i in info.taps_zlab]}", markup=False)
        out.print(f"  stored in the file:                   {list(info.taps_stored)}", markup=False)
    if info.dspark is not None:
        out.print(f"  DSpark: {dspark_line(info.dspark)}", markup=False)
    if info.format is not None:  # a drafter: where it came from (a target's keys are its own business)
        out.print(f"  {provenance_line(info.provenance)}", markup=False)
    kv = Table(title=f"metadata ({len(info.kvs)})")
    for c in ("key", "type", "value"):
        kv.add_column(c)
    for j in info.kvs:
        s = str(j["value"])
        kv.add_row(esc(j["key"]), j["type"], esc(s if len(s) <= 80 else s[:77] + "..."))
    out.print(kv)
    tt = Table(title=f"tensors ({len(info.tensors)})")
    for c in ("name", "ne", "type", "bytes"):
        tt.add_column(c)
    for t in info.tensors:
        tt.add_row(esc(t["name"]), str(t["ne"]), t["type"], f"{t['nbytes']:,}")
    out.print(tt)
