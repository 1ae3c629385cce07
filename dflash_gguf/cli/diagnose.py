"""`diagnose`: which stage loses acceptance — the conversion, the target, the runtime's rules or the runtime."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import EXIT_DIAGNOSE, DflashError, UsageError
from ._app import app
from ._common import esc, note, out, warn
from ._options import (
    DeviceMapOpt, PromptIdsOpt, PromptOpt, PromptsFileOpt, ServerArgsOpt, TargetBackendOpt, TokenizerDirOpt,
    check_prompt_options, read_prompts, resolve_drafter_and_target, split_server_args,
)
from ._verdict import Output, ReportOpt, VerdictFormatOpt, VerdictJsonOpt


@app.command("diagnose")
def diagnose_cmd(
    target: Annotated[Path, typer.Option("--target", help="The full-precision target for stages 1-4: Hugging Face dir (qwen3/llama), its repo id ORG/NAME[@REV], or a GGUF.")],
    drafter: Annotated[Path, typer.Option("--drafter", help="The original drafter dir (safetensors + config.json) or its repo id ORG/NAME[@REV]: the reference.")],
    drafter_gguf: Annotated[Optional[list[Path]], typer.Option("--drafter-gguf", help="A drafter GGUF to follow through the stages (repeatable).")] = None,
    quants: Annotated[Optional[str], typer.Option("--quants", help="Also quantize the full-precision GGUF drafter (given, else converted from --drafter) to these types, e.g. q8_0,q6_k,q5_k_m,q4_k_m,iq4_xs.")] = None,
    quants_dir: Annotated[Optional[Path], typer.Option("--quants-dir", help="Keep the files --quants makes here (default: a temp dir, removed).")] = None,
    target_gguf: Annotated[Optional[Path], typer.Option("--target-gguf", help="The target as the runtime serves it: stage 3's target when its weights are quantized, stage 5's; also the tokenizer source of --quants' conversion.")] = None,
    target_quant: Annotated[Optional[str], typer.Option("--target-quant", help="Stage 3: --target's weights round-tripped through this type (q8_0, q4_k_m, …); wins over a quantized --target-gguf.")] = None,
    emulate: Annotated[str, typer.Option("--emulate", help="Stage 4: the runtime whose rules are emulated: llama.cpp.")] = "llama.cpp",
    draft_context: Annotated[Optional[int], typer.Option("--draft-context", help="Stage 4: cap the drafter's target context at the last N positions (default: the runtime's, llama.cpp 512).")] = None,
    server_bin: Annotated[Optional[Path], typer.Option("--server-bin", help="Stage 5: start this llama-server with --target-gguf and each drafter GGUF.")] = None,
    server_args: ServerArgsOpt = None,
    server: Annotated[Optional[list[str]], typer.Option("--server", help="Stage 5: [DRAFTER.gguf=]URL of a running server that serves that drafter (repeatable).")] = None,
    engine: Annotated[str, typer.Option("--engine", help="With --server: llama.cpp | vllm | sglang.")] = "llama.cpp",
    server_log: Annotated[Optional[Path], typer.Option("--server-log", help="With one --server: its log (LLAMA_TRACE=1 … --log-file FILE), for the step counts the mean acceptance length needs.")] = None,
    prompt_ids: PromptIdsOpt = None,
    prompt: PromptOpt = None,
    prompts_file: PromptsFileOpt = None,
    tokenizer_dir: TokenizerDirOpt = None,
    suite: Annotated[Optional[list[str]], typer.Option("--suite", help="bench's suites: chat | code | maths | humaneval | FILE.jsonl (repeatable: a verdict and a recommendation per suite).")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="With --suite: the first N prompts of each suite.")] = None,
    runs: Annotated[int, typer.Option("--runs", help="Repeat each stage N times (seed, seed+1, …): mean ± sd, the σ of the 1σ rule.")] = 1,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens")] = 64,
    temperature: Annotated[float, typer.Option("--temperature", help="0 = greedy (runs repeat exactly: sd 0).")] = 0.0,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    jobs: Annotated[int, typer.Option("--jobs", help="CPU: prompts run at once, one torch thread each (0 = one per core).")] = 0,
    device: Annotated[str, typer.Option("--device", help="auto | cpu | cuda (the torch reference).")] = "auto",
    target_backend: TargetBackendOpt = "native",
    device_map: DeviceMapOpt = None,
    expect: Annotated[Optional[float], typer.Option("--expect", help="The published mean acceptance length: the ceiling, shown in the report.")] = None,
    max_stage_loss: Annotated[Optional[float], typer.Option("--max-stage-loss", help="Gate: exit 32 when a stage loses more than F mean acceptance length (beyond 1σ).")] = None,
    fmt: VerdictFormatOpt = None,
    json_out: VerdictJsonOpt = False,
    report_to: ReportOpt = None,
    plots: Annotated[Optional[Path], typer.Option("--plots", help="Write waterfall.png and acceptance_by_position.png here (needs matplotlib).")] = None,
) -> None:
    """Follow the same prompts through the stages from checkpoint to runtime and name the stage that loses acceptance.

    Stages: 1 reference (checkpoint + full-precision target), 2 conversion (each GGUF), 3 target (a quantized
    --target-gguf, or --target-quant), 4 runtime semantics (--emulate), 5 runtime (--server-bin / --server).
    Exit 0, or 32 when --max-stage-loss is exceeded.

    Example: dflash-gguf diagnose --target Qwen3-8B/ --drafter Qwen3-8B-DFlash-b16/ --drafter-gguf d-BF16.gguf --quants q8_0,q4_k_m --prompts-file p.jsonl
    """
    from ..diagnose import DiagnoseOptions, run_suites, suite_prompts
    from ..verdict import Envelope, sources

    ids = _check_prompts(prompt_ids, prompt, prompts_file, suite, limit)
    if max_stage_loss is not None and not max_stage_loss >= 0:
        raise UsageError(f"--max-stage-loss {max_stage_loss}: give a mean acceptance length ≥ 0")
    if plots is not None:
        from ..bench.plots import require_matplotlib  # the same extra, the same message

        require_matplotlib()  # before the stages run, not after
    if server_bin is not None:
        from ..bench.server import find_server_bin

        try:
            server_bin = find_server_bin(server_bin)
        except DflashError as exc:  # a wrong path is the user's flag: say so before any stage runs
            raise UsageError(str(exc)) from None
    ggufs = list(drafter_gguf or [])
    opts = DiagnoseOptions(
        max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, runs=runs, jobs=jobs, device=device,
        target_backend=target_backend, device_map=device_map,
        quants=tuple(q for q in (quants or "").replace(" ", "").split(",") if q), quants_dir=quants_dir,
        target_quant=target_quant, emulate=emulate, draft_context=draft_context, target_gguf=target_gguf,
        server_bin=server_bin, server_args=split_server_args(server_args), servers=tuple(_server(s) for s in server or []),
        engine=engine, server_log=server_log,
        expect=expect)
    _check_parity_values(opts)
    o = Output(fmt, json_out, report_to, (target, drafter, *ggufs, target_gguf, prompts_file))
    env = Envelope("diagnose", 0, [], tuple(str(p) for p in (drafter, *ggufs)))
    try:
        drafter, target = resolve_drafter_and_target(drafter, target)
        if suite:
            sets = suite_prompts(suite, target, tokenizer_dir, limit)
        else:
            sets = [(None, ids if ids is not None else read_prompts(prompt_ids, prompt, prompts_file, target,
                                                                    tokenizer_dir))]
        reports = run_suites(target, drafter, sets, drafter_ggufs=ggufs, options=opts,
                             progress=lambda m: note(f"diagnose: {m}"))
        paths = _plots(reports, plots) if plots is not None else []
    except DflashError as exc:  # CI reads the report: a failed run is still one document
        env.findings.append(sources.failure("diagnose", drafter, exc))
        o.fail(env, exc)
        raise
    from ..diagnose.verdict import judge, recommend

    judged = [(r, judge(r), recommend(r)) for r in reports]
    gate, code = _gate(judged, max_stage_loss, env, drafter)
    payloads = [r.to_json(v, rec) for r, v, rec in judged]
    env.payload = ({**payloads[0], "gate": gate, "plots": paths} if len(reports) == 1 else
                   {"schema": payloads[0]["schema"], "suites": payloads, "gate": gate, "plots": paths})
    env.conclude(code, _summary(judged, code, max_stage_loss))
    o.emit(env, lambda: _render_all(judged, paths))
    raise typer.Exit(env.exit_code)


def _check_prompts(prompt_ids, prompt, prompts_file, suite, limit) -> list[list[int]] | None:
    """--suite or exactly one of parity's prompt options; --prompt-ids parsed."""
    if limit is not None and not suite:
        raise UsageError("--limit takes the first N prompts of each --suite: give --suite")
    if suite:
        if any(x is not None for x in (prompt_ids, prompt, prompts_file)):
            raise UsageError("give --suite or one of --prompt-ids, --prompt, --prompts-file, not both")
        if limit is not None and limit < 1:
            raise UsageError(f"--limit {limit}: must be at least 1")
        return None
    return check_prompt_options(prompt_ids, prompt, prompts_file)


def _plots(reports, plots: Path) -> list[str]:
    """One set of PNGs; with several suites, one set per suite in its own folder."""
    from ..diagnose.plots import write_plots

    if len(reports) == 1:
        return [str(p) for p in write_plots(reports[0], plots)]
    return [str(p) for r in reports for p in write_plots(r, plots / _folder(r.settings["suite"]))]


def _folder(name: str) -> str:
    """A suite's name as a folder name (a suite given as a path keeps its stem)."""
    stem = Path(name).stem if name.endswith(".jsonl") else name
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in stem) or "suite"


def _gate(judged, max_stage_loss, env, drafter) -> tuple[dict | None, int]:
    """--max-stage-loss over every suite: one finding per suite that exceeds it (or whose runtime
    failed with a drafter: that loses all of it)."""
    if max_stage_loss is None:
        return None, 0
    from ..verdict.findings import ERROR, Finding

    failed = [(r, v) for r, v, _ in judged if v.loss > max_stage_loss or v.failures]
    for r, v in failed:
        lost = next(x for x in r.lanes if x.name == v.drafter)  # the file to blame
        where = "" if r.settings.get("suite") is None else f"suite {r.settings['suite']}: "
        env.findings.append(Finding("diagnose", "diagnose-max-stage-loss", ERROR, lost.path or str(drafter),
                                    where + v.text + (f" > --max-stage-loss {max_stage_loss:g}"
                                                      if v.loss > max_stage_loss else ""), f"stage {v.stage}"))
    loss = max(v.loss for _, v, _ in judged)
    return {"max_stage_loss": max_stage_loss, "loss": loss, "passed": not failed}, EXIT_DIAGNOSE if failed else 0


def _summary(judged, code: int, max_stage_loss) -> str:
    head = "diagnose: PASS" if code == 0 else f"diagnose: FAIL (exit {code})"
    loss = max(v.loss for _, v, _ in judged)
    tail = "" if not code else (f"; loss {loss:.3f} > --max-stage-loss {max_stage_loss:g}"
                                if loss > max_stage_loss else "; the runtime failed with a drafter")
    if len(judged) == 1:
        _, v, rec = judged[0]
        return f"{head}: {v.text}{tail}" + (f"; recommended: {rec.drafter.name}" if rec.drafter is not None else "")
    per = "; ".join(f"{r.settings['suite']}: {v.text}" + (f" (recommended: {rec.drafter.name})"
                                                          if rec.drafter is not None else "") for r, v, rec in judged)
    return f"{head}: {per}{tail}"


def _server(text: str) -> tuple[str | None, str]:
    """``[DRAFTER.gguf=]URL``."""
    path, sep, url = text.partition("=")
    if not sep or path.startswith(("http://", "https://")):
        path, url = None, text
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--server {text!r}: expected [DRAFTER.gguf=]http://HOST:PORT")
    return path, url


def _check_parity_values(opts) -> None:
    """parity's own checks of --runs, --max-new-tokens, … before any file is made or read."""
    if opts.jobs < 0:
        raise UsageError(f"--jobs {opts.jobs}: give 0 (one prompt per core) or a positive count")
    opts.parity()  # raises UsageError naming the flag
    from ..parity import EMULATIONS

    if opts.emulate not in EMULATIONS:
        raise UsageError(f"--emulate {opts.emulate!r}: supported: {', '.join(EMULATIONS)}")


def _cell(report, lane, stage: str, deltas) -> str:
    v = lane.values.get(stage)
    if v is None:
        return "FAILED" if stage in lane.failed else "skipped" if stage in lane.skipped else "-"
    al, rate = v.mean_acceptance_length, v.acceptance_rate
    runs = len(al.values) > 1
    text = f"{al.mean:.3f}" + (f" ± {al.sd:.3f}" if runs else "")
    d = deltas.get((lane.name, stage))
    if d is not None:
        text += f" ({d.delta:+.3f}{', real' if d.real else ''})"
    return text + f"\nrate {rate.mean:.3f}" + (f" ± {rate.sd:.3f}" if runs else "")


def _render_all(judged, plots: list[str]) -> None:
    for report, verdict, rec in judged:
        _render(report, verdict, rec)
    if plots:
        note("plots: " + ", ".join(plots))


def _render(report, verdict, rec) -> None:
    from rich.table import Table

    from ..diagnose.report import STAGES, number

    st = report.settings
    temp = "greedy" if st["temperature"] == 0 else f"temperature {st['temperature']}, seed {st['seed']}"
    shown = [s for s in STAGES if any(s in x.values for x in report.lanes)]
    deltas = {(d.drafter, d.stage): d for d in report.deltas()}
    suite = "" if st.get("suite") is None else f"suite {st['suite']}: "
    t = Table(title=f"diagnose: {suite}mean acceptance length (change from the stage before; 'real' = beyond 1σ), "
                    f"{st['prompts']} prompt(s) × {st['runs']} run(s), {st['max_new_tokens']} new tokens, {temp}")
    for c in ("drafter", "type", "bytes", *(f"{number(s)} {s}" for s in shown), "top-1 / KL (teacher-forced)"):
        t.add_column(c, overflow="fold")
    for lane in report.lanes:
        lp = lane.values.get("conversion").logit_parity if "conversion" in lane.values else None
        t.add_row(esc(lane.name), lane.quant or ("checkpoint" if lane.is_checkpoint else "?"),
                  "-" if lane.file_size is None else f"{lane.file_size:,}",
                  *(_cell(report, lane, s, deltas) for s in shown),
                  "-" if not lp else f"{lp['top1']:.4f} / {lp['mean_kl']:.3g}")
    out.print(t)
    for s in report.stages:
        if not s.ran:
            out.print(f"stage {number(s.name)} ({s.name}) not run: {s.why}", markup=False)
        elif s.name == "target":  # which target it was: round-tripped, or the served file itself
            out.print(f"stage 3 (target): {'; '.join(s.notes)}", markup=False)
    for lane in report.lanes:
        for s, why in lane.skipped.items():
            warn(f"{esc(lane.name)}: stage {number(s)} ({s}) skipped: {esc(why)}")
        for s, why in lane.failed.items():
            warn(f"{esc(lane.name)}: stage {number(s)} ({s}) FAILED: {esc(why)}")
    for s in shown:
        for lane in report.lanes:
            v = lane.values.get(s)
            if v is not None and v.per_position:
                out.print(f"stage {number(s)} {s} · {lane.name}: acc per pos "
                          + " ".join(f"{x:.2f}" for x in v.per_position), markup=False)
    exp = report.expectation()
    if exp is not None:
        parts = [f"published mean acceptance length {exp['published']:g}"]
        if "reference" in exp:
            parts.append(f"the reference reaches {exp['reference']:.3f}")
        if exp.get("best_at_last_stage") is not None:
            parts.append(f"the best at stage {number(exp['last_stage'])} ({exp['last_stage']}) "
                         f"{exp['best_at_last_stage']:.3f}")
        out.print("expect: " + "; ".join(parts), markup=False)
    out.print(f"verdict{'' if st.get('suite') is None else ' (' + st['suite'] + ')'}: {verdict.stage or 'none'}: "
              f"{verdict.text}", markup=False)
    for f in verdict.facts:
        out.print(f"  - {f}", markup=False)
    out.print(f"recommendation{'' if st.get('suite') is None else ' (' + st['suite'] + ')'}: {rec.text}", markup=False)
