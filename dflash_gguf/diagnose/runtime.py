"""Stage 5, the real runtime, through ``bench``: one llama-server per drafter GGUF started with the
target as served (``--server-bin``), or the running servers given (``--server``: llama-server,
vLLM or SGLang, bench's clients). Every prompt set goes to one server as its own suite of token
ids, so a drafter's server starts once however many suites there are. A drafter the runtime
refuses (pairing, memory) is skipped with the reason; a crash is a finding (``failed``).
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Callable, Sequence

from ..errors import MemoryGuardError, PairingError, ServerError
from ..metrics.spread import Stat
from .options import DiagnoseOptions
from .report import Lane, StageRun, StageValue

Progress = Callable[[str], None]


def runtime_stage(prompt_sets: Sequence[Sequence[Sequence[int]]], lanes: Sequence[list[Lane]],
                  opts: DiagnoseOptions, stages: Sequence[list[StageRun]], tmp: Path, say: Progress) -> dict:
    """Fill every prompt set's lanes (``lanes[k]``, the same drafters in the same order for each
    set ``k``) with their stage-5 values and append each set's StageRun; returns the server's
    /props (build_info) of the first server that answered."""
    if opts.server_bin is None and not opts.servers:
        for st in stages:
            st.append(StageRun("runtime", False, "no --server-bin/--server"))
        return {}
    from ..bench import BenchOptions, build_report, run_bench

    files = []
    for k, prompts in enumerate(prompt_sets):  # token ids: the server sees exactly the prompts parity ran
        f = tmp / f"set-{k}.jsonl"
        f.write_text("".join(json.dumps({"id": f"prompt-{i + 1}", "prompt_ids": list(p)}) + "\n"
                             for i, p in enumerate(prompts)), encoding="utf-8")
        files.append(f)
    common = dict(suites=tuple(str(f) for f in files), runs=opts.runs, n_predict=opts.max_new_tokens,
                  temperature=opts.temperature, seed=opts.seed, baseline=False)
    ggufs = [j for j, x in enumerate(lanes[0]) if not x.is_checkpoint]
    if opts.server_bin is not None:
        jobs = [(j, BenchOptions(target=opts.target_gguf, drafters=(Path(lanes[0][j].path),),
                                 server_bin=opts.server_bin, server_args=opts.server_args, **common))
                for j in ggufs if lanes[0][j].path is not None]
    else:
        by_path = {str(Path(lanes[0][j].path)): j for j in ggufs if lanes[0][j].path is not None}
        jobs = [(by_path[str(Path(p))] if p is not None else ggufs[0],
                 BenchOptions(servers=((f"server{i + 1}", url),), server_log=opts.server_log, engine=opts.engine,
                              **common))
                for i, (p, url) in enumerate(opts.servers)]
    server: dict = {}
    measured = [0] * len(prompt_sets)
    for j, bo in jobs:
        say(f"stage 5: {lanes[0][j].name} in the runtime")
        try:
            result = run_bench(bo)
        except ServerError as exc:  # the runtime failed with this drafter (a crash): a finding, and the others still run
            for ls in lanes:
                ls[j].failed["runtime"] = str(exc)
            continue
        except (PairingError, MemoryGuardError) as exc:  # not taken at all: the pair does not fit, or memory
            for ls in lanes:
                ls[j].skipped["runtime"] = f"{type(exc).__name__}: {exc}"
            continue
        server = server or result.server_info
        rows = build_report(result).rows
        for k, ls in enumerate(lanes):
            row = next((r for r in rows if r.suite == files[k].stem), None)
            if _fill(ls[j], row, result.notes):
                measured[k] += 1
    how = (f"llama-server {opts.server_bin}" + (f" {shlex.join(opts.server_args)}" if opts.server_args else "")
           if opts.server_bin else
           "running llama-server(s)" if opts.engine == "llama.cpp" else f"running {opts.engine} server(s)")
    for k, st in enumerate(stages):
        failed = any("runtime" in x.failed for x in lanes[k])
        st.append(StageRun("runtime", measured[k] > 0 or failed,
                           None if measured[k] else "no drafter could be measured in the runtime",
                           notes=[f"{how}; the prompts sent as token ids"]))
    return server


def _fill(x: Lane, row, bench_notes: list[str]) -> bool:
    """One drafter's stage-5 value from its bench row; False (and why in ``skipped``) without one."""
    if row is None:
        x.skipped["runtime"] = "the runtime answered no request"
        return False
    notes = list(dict.fromkeys([*row.notes, *bench_notes]))
    if row.source is None:  # drafted nothing: one token per target pass
        n = len(row.runs)
        x.values["runtime"] = StageValue(Stat.of([1.0] * n), Stat.of([0.0] * n), None, 0,
                                         notes=notes or ["the server drafted nothing with this drafter"])
    elif row.mean_length is None:
        x.skipped["runtime"] = (f"the server reported no step count, so no mean acceptance length (acceptance "
                                f"rate {row.acceptance_rate.mean:.3f}); a running llama-server gives them in its "
                                "log: start it with LLAMA_TRACE=1 ... --log-file FILE and pass --server-log FILE")
        return False
    else:
        steps = sum((r.acceptance or {}).get("steps") or 0 for r in row.runs)
        x.values["runtime"] = StageValue(row.mean_length, row.acceptance_rate,
                                         None if row.per_position is None else [s.mean for s in row.per_position],
                                         steps, notes=notes)
    return True
