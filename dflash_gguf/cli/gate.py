"""`gate`: one verdict a CI can act on for a drafter release.

Exit codes (docs/exit-codes.md): 0 the candidate passes; 50 it is refused (an error-severity
finding no waiver covers); 2 usage (a bad policy file, no --drafter-gguf); 3/5 the checkpoint
cannot be read.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import EXIT_GATE, DflashError, UsageError
from ._app import app
from ._common import esc, out
from ._verdict import Output, ReportOpt, VerdictFormatOpt, VerdictJsonOpt


@app.command("gate")
def gate_cmd(
    drafter: Annotated[Path, typer.Option("--drafter", help="The drafter checkpoint dir (safetensors + config.json): the reference.")],
    drafter_gguf: Annotated[list[Path], typer.Option("--drafter-gguf", help="A drafter GGUF to release (repeatable).")],
    target: Annotated[Optional[Path], typer.Option("--target", help="The target: a GGUF (checked, paired, instruct verdict) or a Hugging Face dir.")] = None,
    policy: Annotated[Optional[Path], typer.Option("--policy", help="TOML: parity thresholds, severity overrides, waivers (docs/gate.md).")] = None,
    allow_base_target: Annotated[bool, typer.Option("--allow-base-target", help="The drafter was trained against a base model: a base target is not an error.")] = False,
    require_parity: Annotated[bool, typer.Option("--require-parity", help="Fail when parity cannot run (no torch, no prompts).")] = False,
    prompt_ids: Annotated[Optional[str], typer.Option("--prompt-ids", help="Parity's prompt: comma-separated token ids.")] = None,
    prompt: Annotated[Optional[str], typer.Option("--prompt", help="Parity's prompt as text (the target's tokenizer).")] = None,
    prompts_file: Annotated[Optional[Path], typer.Option("--prompts-file", help="Parity's prompts: JSONL, as parity reads it.")] = None,
    tokenizer_dir: Annotated[Optional[Path], typer.Option("--tokenizer-dir", help="Where tokenizer.json / tokenizer.model live (default: --target).")] = None,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens")] = 64,
    device: Annotated[str, typer.Option("--device", help="Parity's device: auto | cpu | cuda.")] = "auto",
    fmt: VerdictFormatOpt = None,
    json_out: VerdictJsonOpt = False,
    report_to: ReportOpt = None,
) -> None:
    """Gate a drafter release: check --deep, check-instruct, pairing, compare-weights (with constants) and parity (with its gates, when torch is installed), as one verdict.

    Exit 0 = pass; 50 = refused (an error no waiver covers). The last line is the verdict. --format github / junit / sarif for CI (docs/ci.md). Details: docs/gate.md.

    Example: dflash-gguf gate --drafter Qwen3-8B-DFlash-b16/ --drafter-gguf d-Q8_0.gguf --target Qwen3-8B-Q8_0.gguf --prompts-file p.jsonl
    """
    from ..gate import GateInputs, load_policy, run_gate
    from ..verdict import Envelope, sources

    o = Output(fmt, json_out, report_to, (drafter, *drafter_gguf, target, policy, prompts_file))
    files = tuple(str(p) for p in (*drafter_gguf, target) if p is not None)
    try:
        pol = load_policy(policy)
        prompts = _prompts(prompt_ids, prompt, prompts_file, target, tokenizer_dir)
        report = run_gate(GateInputs(drafter, tuple(drafter_gguf), target, prompts, allow_base_target, require_parity,
                                     max_new_tokens, device), pol)
    except DflashError as exc:
        o.fail(Envelope("gate", exc.exit_code, [sources.failure("gate", drafter, exc)], files), exc)
        raise
    env = Envelope("gate", 0 if report.passed else EXIT_GATE, report.findings, files, payload=report.to_json(),
                   summary=report.summary, coverage=report.coverage)
    o.emit(env, lambda: _render(report))
    raise typer.Exit(env.exit_code)


def _prompts(prompt_ids: str | None, prompt: str | None, prompts_file: Path | None, target: Path | None,
             tokenizer_dir: Path | None) -> tuple[tuple[int, ...], ...]:
    given = [x is not None for x in (prompt_ids, prompt, prompts_file)]
    if sum(given) > 1:
        raise UsageError("give at most one of --prompt-ids, --prompt, --prompts-file")
    if prompt_ids is not None:
        try:
            return (tuple(int(t) for t in prompt_ids.replace(" ", "").split(",") if t),)
        except ValueError:
            raise UsageError(f"--prompt-ids {prompt_ids!r}: expected comma-separated integers") from None
    if (prompt is not None or prompts_file is not None) and target is None:
        raise UsageError("--prompt / --prompts-file are tokenized with the target's tokenizer: pass --target")
    if prompt is not None or prompts_file is not None:
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            return ()  # parity cannot run anyway: the stage says so (and --require-parity fails it)
        from ..parity import read_prompts_file, tokenize

        if prompt is not None:
            return (tuple(tokenize(prompt, target, tokenizer_dir)),)
        return tuple(tuple(p) for p in read_prompts_file(prompts_file, target, tokenizer_dir))
    return ()


_MARK = {"passed": "[green]pass[/green]", "failed": "[red]FAIL[/red]", "skipped": "[yellow]skip[/yellow]"}


def _render(report) -> None:
    for s in report.stages:
        out.print(f"{_MARK[s.status]} {s.name}: {esc(s.summary)}")
    for f in report.findings:
        if f.severity == "info" and f.waived is None:
            continue
        state = f"waived ({f.waived})" if f.waived is not None else f.severity
        where = f" [{f.where}]" if f.where else ""
        out.print(f"  {f.stage} {state} {f.rule_id}: {Path(f.file).name}{where}: {f.message}  "
                  f"(fingerprint {f.fingerprint})", markup=False)

