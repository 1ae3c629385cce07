"""The bench matrix: configurations (a no-draft baseline, then each drafter) × suites × chat
modes × runs, one request at a time, recording what the server counted for each request.

A configuration we launch gets its own llama-server (the drafter is a load-time choice), started
after the memory guard and stopped before the next one starts; with ``--server`` the servers are
the user's and stay up. Prompts go in the same order in every configuration, so at temperature
0 each drafter's output can be compared with the baseline's text (speculative decoding is
meant to be lossless).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import PairingError, ServerError
from ..formats.dspark import MARKOV_W1
from . import memory, trace
from .client import Completion, RequestFailed, client_for
from .modes import Mode, modes_for, plan_modes
from .options import BenchOptions, memory_limit, settings, validate
from .server import LlamaServer, ServerSpec
from .suites import Suite, load_suite

TRACE_WAIT_S = 5.0  # the log writer thread trails the HTTP answer by milliseconds; this is generous
WARMUP_TOKENS = 16


@dataclass
class RequestRecord:
    suite: str
    mode: str
    run: int
    prompt_id: str
    text: str
    prompt_n: int | None
    predicted_n: int
    decode_s: float | None
    wall_s: float
    drafted: int | None
    accepted: int | None
    verify_steps: int | None
    steps: list[tuple[int, int]] | None = None     # per verification step, in order (llama.cpp trace)
    per_position: list[int] | None = None          # vLLM counters
    histogram: list[int] | None = None             # SGLang meta_info


@dataclass
class ConfigResult:
    name: str
    drafter: Path | None
    url: str
    spec_type: str | None = None
    n_draft: int | None = None
    model_bytes: int | None = None
    argv: list[str] | None = None
    records: list[RequestRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def is_baseline(self) -> bool:
        return self.name == "baseline"


@dataclass
class BenchResult:
    settings: dict[str, Any]
    suites: list[Suite]
    modes: list[Mode]
    configs: list[ConfigResult]
    server_info: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Event:
    """Progress: ``kind`` is "start" (a configuration, with ``total`` requests), "step", "end"."""

    kind: str
    config: str
    total: int = 0
    message: str = ""


Progress = Callable[[Event], None]


def run_bench(opts: BenchOptions, progress: Progress | None = None) -> BenchResult:
    """Run every configuration; see the module docstring.

    Raises:
        UsageError: contradictory options, a bad suite.
        PairingError: a drafter does not fit the target (``check_pairs``); nothing was started.
        MemoryGuardError: a configuration's files exceed the allowed memory (checked for all
            configurations before anything starts, and again before each start).
        ServerError: a server cannot start, dies, or answers badly (it is stopped first).
        KeyboardInterrupt: Ctrl-C or SIGTERM; the server is stopped on the way out.
    """
    emit = progress or (lambda e: None)
    validate(opts)
    check_pairs(opts)
    suites = [load_suite(s, opts.limit) for s in opts.suites]
    configs = _configs(opts)
    limit, how = memory_limit(opts)
    if opts.launching:
        for c in configs:  # all of them up front: fail in a second, not after an hour of the others
            c.model_bytes = memory.check(c.name, _files(opts, c), limit, how)
    result = BenchResult(settings=settings(opts, limit, how), suites=suites, modes=[], configs=configs)
    for c in configs:
        if opts.launching:
            memory.check(c.name, _files(opts, c), *memory_limit(opts))  # free memory may have shrunk meanwhile
            spec = _server_spec(opts, c)
            with LlamaServer(spec) as srv:
                c.url, c.argv = srv.url, spec.argv(srv.port)
                _run_config(opts, c, suites, result, emit, srv)
        else:
            _reachable(opts, c)
            _run_config(opts, c, suites, result, emit, None)
    return result


def check_pairs(opts: BenchOptions) -> None:
    """The pairing checks of ``check DRAFTER --target TARGET`` on every drafter bench would launch
    (headers only, milliseconds). A pair they refuse (another tokenizer, taps past the target's
    layers, a base target) loads and then drafts nothing, or crashes the server, after minutes of
    loading: refused before any server starts.

    Raises:
        PairingError: error-severity pairing findings (on ``.findings``), every drafter's.
        GGUFFormatError: a drafter's or the target's header is corrupt or truncated.
    """
    if not opts.launching or opts.target is None or not opts.drafters:
        return
    from ..guards.findings import Severity
    from ..guards.run import run_checks

    bad, misfits = [], []
    for d in dict.fromkeys(opts.drafters):
        found = [f for f in run_checks(d, target=opts.target).findings
                 if f.category == "pairing" and f.severity == Severity.ERROR]
        if found:
            bad += found
            misfits.append(d)
    if bad:
        names = ", ".join(str(d) for d in misfits)
        verb = "does" if len(misfits) == 1 else "do"
        raise PairingError(f"{names} {verb} not fit the target {opts.target}: {len(bad)} pairing "
                           f"error{'s' * (len(bad) != 1)} (what dflash-gguf check DRAFTER --target TARGET reports); "
                           "no server was started", bad)


def _reachable(opts: BenchOptions, c: ConfigResult) -> None:
    """A running server answers /health (llama-server, vLLM and SGLang all serve it) before we start."""
    from .client import call

    try:
        call(c.url, "/health", timeout=min(10.0, opts.request_timeout), raw=True)
    except RequestFailed as exc:
        if exc.lost:
            raise ServerError(f"{c.url} ({c.name}): nothing answers ({exc}); start the server first or fix --server") from None
        # an HTTP error status still proves a server is there (llama-server says 503 while loading)


def _configs(opts: BenchOptions) -> list[ConfigResult]:
    if not opts.launching:
        out = [ConfigResult("baseline", None, opts.baseline_server)] if opts.baseline_server else []
        return out + [ConfigResult(name, None, url) for name, url in opts.servers]
    out = [ConfigResult("baseline", None, "")] if opts.baseline else []
    names = _unique_names(opts.drafters)
    for d, name in zip(opts.drafters, names):
        c = ConfigResult(name, d, "")
        c.spec_type, c.n_draft, note = drafter_kind(d)
        if note:
            c.notes.append(note)
        out.append(c)
    return out


def _unique_names(paths: tuple[Path, ...]) -> list[str]:
    names = [p.name for p in paths]
    return [str(p) if names.count(p.name) > 1 else p.name for p in paths]


def drafter_kind(path: Path) -> tuple[str | None, int | None, str | None]:
    """(``--spec-type`` as llama.cpp spells it, drafts per step, a note) from the drafter's header.

    The runtime's rule (common/speculative.cpp): architecture ``dflash`` with a ``markov_w1``
    tensor is DSpark, without it DFlash; a step drafts block_size − 1 tokens (block_size for a
    DSpark head that samples from its anchor).
    """
    from ..fileio.gguf_header import read_header

    h = read_header(path)
    if h.arch != "dflash":
        return None, None, (f"{path.name}: architecture {h.arch!r} is not dflash; llama-server picks the "
                            "speculative type itself")
    dspark = MARKOV_W1 in h.tensors_by_name
    block = h.get("dflash.block_size")
    n = None
    if isinstance(block, int):
        n = block if dspark and h.get("dflash.sample_from_anchor") is True else block - 1
    return ("draft-dspark" if dspark else "draft-dflash"), n, None


def _files(opts: BenchOptions, c: ConfigResult) -> dict[str, Path]:
    files = {"target": opts.target}
    if c.drafter is not None:
        files["drafter"] = c.drafter
    return files


def _server_spec(opts: BenchOptions, c: ConfigResult) -> ServerSpec:
    ctx = opts.ctx_size or max(4096, opts.n_predict + 2048)
    extra = list(opts.server_args)
    if c.drafter is not None:
        c.n_draft = _draft_max(opts, c, extra)
    return ServerSpec(bin=opts.server_bin, target=opts.target, drafter=c.drafter, spec_type=c.spec_type,
                      port=opts.port, ctx_size=ctx, threads=opts.threads, extra_args=tuple(extra),
                      startup_timeout=opts.startup_timeout)


def _draft_max(opts: BenchOptions, c: ConfigResult, extra: list[str]) -> int | None:
    """Drafts per step. llama-server drafts 3 tokens unless told (``--spec-draft-n-max``), a
    fifth of a DFlash block: bench asks for the whole block (block_size − 1, read from the GGUF)
    unless ``--draft-max`` or the user's own ``--server-args`` say otherwise."""
    for flag in ("--spec-draft-n-max",):
        if flag in extra:
            i = extra.index(flag)
            try:
                return int(extra[i + 1])
            except (IndexError, ValueError):
                return c.n_draft
    n = opts.draft_max if opts.draft_max is not None else c.n_draft
    if n is not None:
        if c.n_draft is not None and n > c.n_draft:
            c.notes.append(f"--draft-max {n} exceeds the drafter's block ({c.n_draft} drafts): llama-server clamps it")
            n = c.n_draft
        extra += ["--spec-draft-n-max", str(n)]
    return n


# --- one configuration ----------------------------------------------------------------------

def _run_config(opts: BenchOptions, c: ConfigResult, suites: list[Suite], result: BenchResult, emit: Progress,
                srv: LlamaServer | None) -> None:
    client = client_for(opts.engine, c.url, opts.request_timeout)
    if not result.modes:
        result.modes, notes = _guard(lambda: plan_modes(opts, client), srv, c, "while probing the chat template")
        result.notes += notes
        if opts.engine == "llama.cpp":
            props = _guard(lambda: client.props(), srv, c, "while reading /props")
            result.server_info = {k: props.get(k) for k in ("build_info", "model_path") if props.get(k)}
    follow = _follower(opts, srv)
    if follow is not None:
        follow.mark()
    total = opts.runs * sum(len(s.prompts) * len(modes_for(s, result.modes)) for s in suites)
    emit(Event("start", c.name, total))
    first = suites[0].prompts[0]
    for _ in range(opts.warmup):  # graph allocation and first-touch page faults are not the drafter's fault
        m = result.modes[0]
        _guard(lambda: client.complete(first.payload, min(WARMUP_TOKENS, opts.n_predict), opts.temperature, opts.seed,
                                       chat=m.chat and not first.raw, thinking=m.thinking), srv, c, "during warm-up")
        if follow is not None:
            _claim_task(follow)  # its lines must not be taken for the first measured request's
    for run in range(opts.runs):
        for suite in suites:
            for mode in modes_for(suite, result.modes):
                for i, p in enumerate(suite.prompts):
                    # sampled runs draw differently per run and prompt, reproducibly from --seed
                    seed = opts.seed + run * 100_003 + i if opts.temperature > 0 else opts.seed
                    where = f"on prompt {p.id} ({suite.name}, {mode.label}, run {run + 1}) of {c.name}"
                    comp = _guard(lambda: client.complete(p.payload, opts.n_predict, opts.temperature, seed,
                                                          ignore_eos=opts.ignore_eos, chat=mode.chat and not p.raw,
                                                          thinking=mode.thinking), srv, c, where)
                    rec = _record(suite.name, mode.label, run, p.id, comp)
                    if follow is not None:
                        _attach_trace(rec, _claim_task(follow), c, where)
                    c.records.append(rec)
                    emit(Event("step", c.name, total, p.id))
    emit(Event("end", c.name, total))


def _guard(fn, srv: LlamaServer | None, c: ConfigResult, where: str):
    try:
        return fn()
    except RequestFailed as exc:
        if srv is not None:
            died = srv.died_error(where) if exc.lost else None
            if died is not None:
                raise died from None
            raise ServerError(f"llama-server (pid {srv.pid}) failed {where}: {exc}; {srv.log_tail()}") from None
        hint = "is the server up and is --engine right?" if exc.lost else "check the server's log"
        raise ServerError(f"{c.url} failed {where}: {exc} ({hint})") from None


def _record(suite: str, mode: str, run: int, pid: str, comp: Completion) -> RequestRecord:
    return RequestRecord(suite=suite, mode=mode, run=run, prompt_id=pid, text=comp.text, prompt_n=comp.prompt_n,
                         predicted_n=comp.predicted_n, decode_s=comp.decode_s, wall_s=comp.wall_s,
                         drafted=comp.drafted, accepted=comp.accepted, verify_steps=comp.verify_steps,
                         per_position=comp.per_position, histogram=comp.histogram)


def _follower(opts: BenchOptions, srv: LlamaServer | None) -> trace.LogFollower | None:
    if opts.engine != "llama.cpp":
        return None
    path = srv.log_path if srv is not None else opts.server_log
    return None if path is None else trace.LogFollower(path)


def _claim_task(follow: trace.LogFollower) -> list[trace.TaskTrace]:
    """The tasks the server finished since the last claim, waiting for the log to catch up."""
    deadline = time.monotonic() + TRACE_WAIT_S
    while True:
        done = [t for t in trace.parse(follow.lines()).values() if t.done]
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    follow.advance()
    return done


def _attach_trace(rec: RequestRecord, done: list[trace.TaskTrace], c: ConfigResult, where: str) -> None:
    """This request's verification steps from the log, kept only when they add up to ``timings``."""
    if not done:
        if rec.drafted:
            _note(c, "no LLAMA_TRACE step lines in the server log (a build without them?): per-position "
                     "acceptance, histogram and drift are unavailable")
        return
    if len(done) > 1:
        _note(c, "the server finished several tasks during one request (another client?): steps not attributed")
        return
    t = done[0]
    if (t.drafted, t.accepted) != (rec.drafted or 0, rec.accepted or 0):
        _note(c, f"trace and timings disagree {where}: trace {t.accepted}/{t.drafted}, timings "
                 f"{rec.accepted}/{rec.drafted} (accepted/drafted); that request's steps were dropped")
        return
    if t.unreplayed:
        _note(c, f"{t.unreplayed} checkpoint restore(s) without a replay line {where}")
    rec.steps = list(t.steps)
    rec.verify_steps = len(t.steps)


def _note(c: ConfigResult, text: str) -> None:
    if text not in c.notes:
        c.notes.append(text)
