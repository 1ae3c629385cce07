"""`parity`: reference vs GGUF drafters — logit parity and acceptance on the same inputs."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import EXIT_PARITY_GATE, DflashError, UsageError
from ._app import app
from ._common import esc, note, out, warn
from ._options import (
    DeviceMapOpt, PromptIdsOpt, PromptOpt, PromptsFileOpt, TargetBackendOpt, TokenizerDirOpt, check_prompt_options,
    read_prompts, resolve_drafter_and_target,
)
from ._verdict import Output, ReportOpt, VerdictFormatOpt, VerdictJsonOpt

FLAG_TOP1 = 0.9  # below this teacher-forced top-1 agreement a GGUF drafter is flagged


@app.command("parity")
def parity_cmd(
    target: Annotated[Path, typer.Option("--target", help="Target: Hugging Face dir (qwen3/llama), its repo id ORG/NAME[@REV], or a qwen3/llama GGUF.")],
    drafter: Annotated[Path, typer.Option("--drafter", help="The original drafter dir (safetensors + config.json) or its repo id ORG/NAME[@REV]: the reference.")],
    drafter_gguf: Annotated[Optional[list[Path]], typer.Option("--drafter-gguf", help="A GGUF of the drafter to compare (repeatable).")] = None,
    prompt_ids: PromptIdsOpt = None,
    prompt: PromptOpt = None,
    prompts_file: PromptsFileOpt = None,
    tokenizer_dir: TokenizerDirOpt = None,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens")] = 64,
    block_size: Annotated[Optional[int], typer.Option("--block-size", help="Default: the drafter's block_size.")] = None,
    temperature: Annotated[float, typer.Option("--temperature")] = 0.0,
    top_p: Annotated[float, typer.Option("--top-p")] = 1.0,
    top_k: Annotated[int, typer.Option("--top-k")] = 0,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    runs: Annotated[int, typer.Option("--runs", help="Repeat each run N times (seed, seed+1, …): mean ± sd.")] = 1,
    device: Annotated[str, typer.Option("--device", help="auto | cpu | cuda")] = "auto",
    dtype: Annotated[str, typer.Option("--dtype", help="float32 | bfloat16")] = "float32",
    jobs: Annotated[int, typer.Option("--jobs", help="CPU: prompts run at once, one torch thread each (0 = one per core); a GPU runs them in turn.")] = 0,
    target_backend: TargetBackendOpt = "native",
    device_map: DeviceMapOpt = None,
    target_quant: Annotated[Optional[str], typer.Option("--target-quant", help="q8_0 | q4_k_m: round-trip the target's weights through our quantizers.")] = None,
    emulate: Annotated[Optional[str], typer.Option("--emulate", help="Also run the reference drafter with a runtime's semantics: llama.cpp.")] = None,
    draft_context: Annotated[Optional[int], typer.Option("--draft-context", help="With --emulate: the draft-context cap (default: the runtime's, llama.cpp 512).")] = None,
    dump: Annotated[Optional[Path], typer.Option("--dump", help="Write per-step inputs/outputs as safetensors + index.json.")] = None,
    against: Annotated[Optional[Path], typer.Option("--against", help="Compare another runtime's dump (same format) with ours.")] = None,
    fmt: VerdictFormatOpt = None,
    json_out: VerdictJsonOpt = False,
    report_to: ReportOpt = None,
    min_acceptance_length: Annotated[Optional[float], typer.Option("--min-acceptance-length", help="Gate: every GGUF drafter's mean acceptance length (pooled over the prompts) at least X (exit 31).")] = None,
    max_acceptance_drop: Annotated[Optional[float], typer.Option("--max-acceptance-drop", help="Gate: a GGUF drafter's mean acceptance length at most this fraction below the reference's (0.1 = 10 %; beyond 1σ with --runs > 1; exit 31).")] = None,
    min_top1: Annotated[Optional[float], typer.Option("--min-top1", help="Gate: teacher-forced top-1 agreement with the reference drafter at least P (exit 31).")] = None,
) -> None:
    """Run DFlash speculative decoding with the torch reference and measure GGUF drafters against it.

    Exit 0 = lossless (and every gate passed); 30 = not lossless; 31 = a gate failed. --json / --report FILE.json: the full report, written whatever the outcome.

    Example: dflash-gguf parity --target Qwen3-8B/ --drafter Qwen3-8B-DFlash-b16/ --drafter-gguf d-Q8_0.gguf --prompt "Hello"
    """
    from ..parity import (
        ParityFailure, ParityOptions, check_drafter_dir, require_torch, run_parity,
    )
    from ..parity.gates import Gates, evaluate
    from ..verdict import Envelope, sources
    from ..verdict.envelope import Coverage
    from ..verdict.rules import rules_of

    gates = Gates(min_acceptance_length, max_acceptance_drop, min_top1)

    check_prompt_options(prompt_ids, prompt, prompts_file)
    check_drafter_dir(drafter)
    if target_quant is not None and target_quant.lower() not in ("q8_0", "q4_k_m"):
        raise UsageError(f"--target-quant {target_quant!r}: choose q8_0 or q4_k_m")
    if dtype not in ("float32", "bfloat16"):
        raise UsageError(f"--dtype {dtype!r}: choose float32 or bfloat16")
    opts = ParityOptions(max_new_tokens=max_new_tokens, block_size=block_size, temperature=temperature, top_p=top_p,
                         top_k=top_k, seed=seed, runs=runs, device=device, dtype=dtype,
                         target_quant=None if target_quant is None else target_quant.lower(), emulate=emulate,
                         draft_context=draft_context, target_backend=target_backend, device_map=device_map,
                         jobs=jobs)
    o = Output(fmt, json_out, report_to, (target, drafter, *(drafter_gguf or []), prompts_file, dump))
    env = Envelope("parity", 0, [], tuple(str(p) for p in (drafter, *(drafter_gguf or []))),
                   coverage=tuple(Coverage(str(p), "parity", rules_of("parity", gates=gates.active))
                                  for p in (drafter_gguf or [drafter])))
    try:
        require_torch()  # before the prompts are tokenized: the run needs it
        drafter, target = resolve_drafter_and_target(drafter, target)  # after: no download for a run that cannot start
        prompts = read_prompts(prompt_ids, prompt, prompts_file, target, tokenizer_dir)
        report = run_parity(target, drafter, prompts, drafter_ggufs=drafter_gguf or [], options=opts, dump=dump,
                            against=against)
    except DflashError as exc:  # CI reads the report: a failed run is still one document
        env.findings.append(sources.failure("parity", drafter, exc))
        o.fail(env, exc)
        raise
    results = evaluate(report, gates)
    env.findings += sources.parity_findings(report, results, drafter)
    env.payload = {**report.to_json(), "gates": [g.to_json() for g in results]}
    env.conclude(ParityFailure.exit_code if not report.lossless else
                 EXIT_PARITY_GATE if any(not g.passed for g in results) else 0)

    def text() -> None:
        _render(report)
        for g in results:
            note(f"gate {g.gate} {'passed' if g.passed else 'FAILED'}: {Path(g.drafter).name}: {g.detail}")

    o.emit(env, text)
    raise typer.Exit(env.exit_code)


def _render(report) -> None:
    from rich.table import Table

    for p in report.prompts:
        st = report.settings
        rules = f", {st['drafter_family']} per {st['attention_rules']}" if st.get("attention_rules") else ""
        t = Table(title=f"prompt of {len(p.prompt_ids)} tokens, {st['max_new_tokens']} new, "
                        f"block {st['block_size']}{esc(rules)}, device {report.device}")
        for c in ("drafter", "format", "mean AL (incl. bonus)", "accept rate (acc/drafted)", "tok/s", "lossless",
                  "top-1 (teacher-forced)", "mean KL", "max |Δlogit|", "first divergence"):
            t.add_column(c)
        rows = [p.reference, *p.drafters] + ([p.emulated] if p.emulated else [])
        for r in rows:
            lp = r.logit_parity
            al = f"{r.mean_acceptance_length.mean:.3f}"
            if r.mean_acceptance_length.sd:
                al += f" ± {r.mean_acceptance_length.sd:.3f}"
            if r.delta_vs_reference:
                d = r.delta_vs_reference
                al += f" ({d['mean_acceptance_length']:+.3f}{'' if d['real'] else ', within 1σ'})"
            fd = lp.first_divergence if lp else None
            t.add_row(
                _name(r), r.format or "-", al, f"{r.acceptance_rate.mean:.3f}", f"{r.tokens_per_s.mean:.1f}",
                "-" if r.lossless is None else ("yes" if r.lossless else "NO"),
                "-" if lp is None else (f"{lp.top1_agreement:.4f}" + ("  FLAGGED" if lp.top1_agreement < FLAG_TOP1 else "")),
                "-" if lp is None else f"{lp.divergence.mean:.2e}", "-" if lp is None else f"{lp.max_abs:.3g}",
                "-" if lp is None else ("none" if fd is None else f"step {fd['step']} pos {fd['position']}"),
            )
        out.print(t)
        if p.emulated and p.emulated.notes:
            note(f"emulated {report.settings['emulate']}: " + "; ".join(p.emulated.notes))
        for r in p.drafters:
            for n in r.notes:
                warn(f"{Path(r.name).name}: {n}")
            lp = r.logit_parity
            if lp and lp.top1_agreement < FLAG_TOP1:
                warn(f"{r.name}: teacher-forced top-1 agreement {lp.top1_agreement:.3f} < {FLAG_TOP1}: "
                     "this GGUF does not compute what the checkpoint computes")
    _render_pooled(report)
    if report.against is not None:
        a = report.against
        out.print(f"against: {a['tensors_compared']} tensors compared, identical={a['identical']}, "
                  f"max |Δ| by tensor: " + ", ".join(f"{k}={v:.3g}" for k, v in sorted(a["max_abs_by_tensor"].items())))


def _render_pooled(report) -> None:
    """llama-server's acceptance numbers and llama-perplexity's KL summary, pooled over the prompts
    (the JSON's "pooled"), so a parity run reads like a bench run and a perplexity run."""
    from rich.table import Table

    pooled = report.pooled()
    runs = report.settings.get("runs", 1)
    t = Table(title=f"acceptance (llama-server) and KL(target ‖ drafter) (llama-perplexity), "
                    f"{pooled['prompts']} prompt(s) × {runs} run(s)")
    for c in ("drafter", "steps", "mean len", "accept rate", "KL mean", "median", "99%", "max", "same top"):
        t.add_column(c)
    rows = [pooled["reference"], *pooled["drafters"]] + ([pooled["emulated"]] if "emulated" in pooled else [])
    for r in rows:
        a, kl = r["acceptance"], r.get("target_divergence", {"positions": 0})
        spread = a.get("runs", {})
        length, rate = f"{a['mean_acceptance_length']:.3f}", f"{a['acceptance_rate']:.3f}"
        if spread:
            length += f" ± {spread['mean_acceptance_length']['sd']:.3f}"
            rate += f" ± {spread['acceptance_rate']['sd']:.3f}"
        t.add_row(_name(r), str(a["steps"]), length, rate, *_kl_cells(kl))
    out.print(t)
    for r in rows:
        a = r["acceptance"]
        drift = a["drift"]
        out.print(f"{_name(r)}: acc per pos {' '.join(f'{x:.2f}' for x in a['per_position'])}; "
                  f"histogram (0..{len(a['histogram']) - 1} accepted) {' '.join(map(str, a['histogram']))}; "
                  f"drift {drift['first']:.3f} → {drift['last']:.3f}", markup=False)
        if "logit_divergence" in r:
            mean, median, p99, mx, top = _kl_cells(r["logit_divergence"])
            out.print(f"{_name(r)}: KL(reference ‖ GGUF), teacher-forced, {r['logit_divergence']['positions']} "
                      f"positions: mean {mean}, median {median}, 99% {p99}, max {mx}; same top {top}", markup=False)


def _kl_cells(kl: dict) -> tuple[str, ...]:
    """mean ± uncertainty, median, 99 %, max, same top, as llama-perplexity prints them."""
    if not kl.get("positions"):
        return ("-",) * 5

    def g(x):
        return "inf" if x is None else f"{x:.4g}"

    return (f"{g(kl['mean'])} ± {g(kl['mean_uncertainty'])}", g(kl["median"]), g(kl["p99"]), g(kl["max"]),
            f"{100 * kl['same_top']:.2f} ± {100 * kl['same_top_uncertainty']:.2f} %")


def _name(r) -> str:
    name, fmt = (r["name"], r["format"]) if isinstance(r, dict) else (r.name, r.format)
    return esc(Path(name).name if fmt else name)
