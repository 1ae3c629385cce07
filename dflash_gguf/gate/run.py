"""``run_gate``: every check a drafter release needs, in order, as one verdict.

1. ``check --deep`` on every drafter GGUF (header and data) and ``check`` on a target GGUF;
2. ``check-instruct`` on the target (a GGUF's metadata; a Hugging Face dir's chat template);
3. pairing: each drafter GGUF against a target GGUF (``check --target``);
4. ``compare-weights`` of each drafter GGUF against the checkpoint, constants included;
5. ``parity`` with the policy's gates, when torch is installed and prompts are given.

A stage that cannot read a candidate (a truncated file, a corrupt header) does not stop the
gate: the failure is a finding of that stage, and the next stages run where they still can.
The library never prints; ``cli/gate.py`` renders the ``GateReport``.
"""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from ..errors import DflashError, InputError, UsageError
from ..verdict import sources
from ..verdict.envelope import Coverage
from ..verdict.findings import ERROR, INFO, Finding
from ..verdict.rules import PARITY_REQUIRED, rules_of
from .report import FAILED, PASSED, SKIPPED, GateReport, StageResult
from .policy import Policy


# What --allow-base-target turns into notes: every finding that says "the target is a base model"
BASE_TARGET_RULES = frozenset({"instruct-verdict-base", sources.NO_CHAT_TEMPLATE, "pair-target-base"})


@dataclass(frozen=True)
class GateInputs:
    drafter: Path  # the checkpoint dir: the reference
    drafter_ggufs: tuple[Path, ...]  # the release candidates
    target: Path | None = None  # a GGUF or a Hugging Face dir
    prompts: tuple[tuple[int, ...], ...] = ()  # parity's prompt ids; none: parity is skipped
    allow_base_target: bool = False
    require_parity: bool = False
    max_new_tokens: int = 64
    device: str = "auto"


def run_gate(inputs: GateInputs, policy: Policy = Policy()) -> GateReport:
    """Run every stage and apply the policy (severities, waivers) to what they found.

    Raises:
        UsageError: no candidate.  InputError: the checkpoint dir or the target does not exist.
    """
    if not inputs.drafter_ggufs:
        raise UsageError("gate needs at least one --drafter-gguf (the files to release)")
    if not inputs.drafter.is_dir():  # the reference, not a candidate: no stage can judge without it
        raise InputError(f"{inputs.drafter}: not a directory; --drafter is the checkpoint the candidates are "
                         "judged against (config.json + safetensors)")
    if inputs.target is not None and not inputs.target.exists():
        raise InputError(f"{inputs.target}: no such file or directory (--target)")
    target_gguf = inputs.target if inputs.target is not None and inputs.target.is_file() else None
    check, pairing = _check_stages(inputs.drafter_ggufs, target_gguf)
    # A candidate check could not read is reported once, there: the later stages judge the rest.
    unread = {f.file for f in check.findings if f.rule_id.startswith("check-")}
    readable = replace(inputs, drafter_ggufs=tuple(p for p in inputs.drafter_ggufs if str(p) not in unread))
    stages = [check, _instruct_stage(inputs), pairing, _compare_stage(readable), _parity_stage(readable, policy)]
    for s in stages:
        if inputs.allow_base_target:
            s.findings = [f.with_severity(INFO) if f.rule_id in BASE_TARGET_RULES else f for f in s.findings]
        s.findings = policy.apply(s.findings)
        if s.status != SKIPPED:
            s.status = FAILED if any(f.blocking for f in s.findings) else PASSED
    return GateReport(stages)


def _check_stages(ggufs: Sequence[Path], target: Path | None) -> tuple[StageResult, StageResult]:
    from ..guards.run import run_checks

    check, pairing = StageResult("check", PASSED, ""), StageResult("pairing", PASSED, "")
    for path in ggufs:
        check.coverage.append(Coverage(str(path), "check", rules_of("check", deep=True)))
        if target is not None:
            pairing.coverage.append(Coverage(str(path), "pairing", rules_of("pairing")))
        try:
            report = run_checks(path, target=target, deep=True)
        except DflashError as exc:
            check.findings.append(sources.failure("check", path, exc))
            continue
        for f in sources.check_findings(report):
            (pairing if f.stage == sources.PAIRING else check).findings.append(f)
    if target is not None:
        check.coverage.append(Coverage(str(target), "check", rules_of("check")))
        try:
            report = run_checks(target)
            check.findings += sources.check_findings(report)
        except DflashError as exc:
            check.findings.append(sources.failure("check", target, exc))
    n = len(ggufs) + (target is not None)
    check.summary = f"{n} file(s), drafters scanned to the last byte"
    if target is None:
        pairing.status, pairing.summary = SKIPPED, "no target GGUF (--target T.gguf pairs each drafter with it)"
    else:
        pairing.summary = f"{len(ggufs)} drafter(s) against {target.name}"
    return check, pairing


def _instruct_stage(inputs: GateInputs) -> StageResult:
    stage = StageResult("check-instruct", PASSED, "")
    t = inputs.target
    if t is None:
        stage.status, stage.summary = SKIPPED, "no --target"
        return stage
    if t.is_dir():
        stage.coverage.append(Coverage(str(t), stage.name, (sources.NO_CHAT_TEMPLATE,)))
        stage.summary = f"{t.name}: Hugging Face dir, chat template"
        if not _has_chat_template(t):
            stage.findings.append(sources.no_chat_template(t))
        return stage
    from ..guards.instruct import classify
    from ..guards.shards import load_complete

    stage.coverage.append(Coverage(str(t), stage.name, rules_of(stage.name)))

    try:
        v = classify(load_complete(t).model)
    except DflashError as exc:
        stage.findings.append(sources.failure("check-instruct", t, exc))
        return stage
    stage.summary = f"{t.name}: {v.verdict.value} ({v.reason})"
    stage.findings += sources.instruct_findings(t, v)
    return stage


def _has_chat_template(d: Path) -> bool:
    if (d / "chat_template.jinja").is_file() or (d / "chat_template.json").is_file():
        return True
    try:
        cfg = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and bool(cfg.get("chat_template"))


def _compare_stage(inputs: GateInputs) -> StageResult:
    from ..compare import compare_weights

    stage = StageResult("compare-weights", PASSED, "")
    if not inputs.drafter_ggufs:
        stage.status, stage.summary = SKIPPED, "no candidate could be read (see check)"
        return stage
    counts = []
    for path in inputs.drafter_ggufs:
        stage.coverage.append(Coverage(str(path), stage.name, rules_of(stage.name)))
        try:
            r = compare_weights(inputs.drafter, path)
        except DflashError as exc:
            stage.findings.append(sources.failure("compare-weights", path, exc))
            continue
        counts.append(f"{path.name}: {r.summary}")
        stage.findings += sources.compare_findings(r, path)
    stage.summary = "; ".join(counts) or "nothing compared"
    return stage


def _parity_stage(inputs: GateInputs, policy: Policy) -> StageResult:
    stage = StageResult("parity", PASSED, "")
    why = None
    if importlib.util.find_spec("torch") is None:
        why = "torch is not installed (pip install 'dflash-gguf[torch]')"
    elif inputs.target is None:
        why = "no --target"
    elif not inputs.prompts:
        why = "no prompts (--prompt-ids, --prompt or --prompts-file)"
    if why is not None:
        stage.status, stage.summary = SKIPPED, why
        if inputs.require_parity:
            stage.status = FAILED
            stage.findings.append(Finding("parity", PARITY_REQUIRED, ERROR, str(inputs.drafter),
                                          f"--require-parity, but parity cannot run: {why}"))
        return stage
    if not inputs.drafter_ggufs:
        stage.status, stage.summary = SKIPPED, "no candidate could be read (see check)"
        return stage
    from ..parity import ParityOptions, run_parity
    from ..parity.gates import Gates, evaluate

    gates = Gates(**{k: policy.thresholds.get(k) for k in ("min_acceptance_length", "max_acceptance_drop",
                                                          "min_top1")})
    rules = rules_of(stage.name, gates=gates.active)
    stage.coverage += [Coverage(str(p), stage.name, rules) for p in inputs.drafter_ggufs]
    try:
        report = run_parity(inputs.target, inputs.drafter, [list(p) for p in inputs.prompts],
                            drafter_ggufs=list(inputs.drafter_ggufs),
                            options=ParityOptions(max_new_tokens=inputs.max_new_tokens, device=inputs.device))
    except DflashError as exc:
        stage.findings.append(sources.failure("parity", inputs.drafter, exc))
        stage.summary = "could not run (below)"
        return stage
    results = evaluate(report, gates)
    stage.findings += sources.parity_findings(report, results, inputs.drafter)
    stage.summary = f"{len(report.prompts)} prompt(s), {len(results)} gate check(s) on {report.device}"
    return stage
