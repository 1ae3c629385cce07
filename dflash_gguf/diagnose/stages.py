"""Running the stages: the torch reference through ``parity`` (stages 1-4) and the real runtime
through ``bench`` (stage 5), on the same prompt token ids, each stage changing one thing.

Parity runs once for stages 1-2 (the checkpoint and every GGUF on the full-precision target),
and with ``target_quant`` once more for stage 3 (the same drafters, the target's weights
round-tripped). Stage 4 is parity's emulated reference drafter for the checkpoint, and for each
GGUF that same emulation applied to the GGUF's own config (its constants as the file has them),
run here. Stage 5 starts one llama-server per GGUF (``bench``), or measures the running servers
given; a drafter the runtime refuses (pairing, a crash) has no stage-5 value, and says why.
"""
from __future__ import annotations

import dataclasses
import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..errors import DflashError, MemoryGuardError, PairingError, QuantizationError, ServerError, UsageError
from ..metrics.spread import Stat
from .report import DiagnoseReport, Lane, StageRun, StageValue

Progress = Callable[[str], None]


@dataclass(frozen=True)
class DiagnoseOptions:
    max_new_tokens: int = 64
    temperature: float = 0.0
    seed: int = 0
    runs: int = 1
    jobs: int = 0  # parity's: prompts at once on CPU (0 = one per core)
    device: str = "auto"
    dtype: str = "float32"
    quants: tuple[str, ...] = ()  # file types to make from the full-precision GGUF (--quants)
    quants_dir: Path | None = None  # where those files go (kept); None: a temp dir, removed
    target_quant: str | None = None  # stage 3
    emulate: str = "llama.cpp"  # stage 4
    target_gguf: Path | None = None  # stage 5's target (and convert's tokenizer source)
    server_bin: Path | None = None  # stage 5: launch llama-server
    servers: tuple[tuple[str | None, str], ...] = ()  # stage 5: (drafter GGUF it serves, URL) of running servers
    server_log: Path | None = None  # the one running server's LLAMA_TRACE log: its step counts
    expect: float | None = None  # the published mean acceptance length

    def __post_init__(self) -> None:
        object.__setattr__(self, "quants", tuple(check_file_type("--quants", q) for q in self.quants))
        if self.target_quant is not None:
            object.__setattr__(self, "target_quant", check_file_type("--target-quant", self.target_quant))
        if self.expect is not None and not (math.isfinite(self.expect) and self.expect >= 1):
            raise UsageError(f"--expect {self.expect}: a mean acceptance length is at least 1")
        if self.server_bin is not None and self.servers:
            raise UsageError("--server-bin launches llama-server, --server measures a running one: give one of them")
        if self.server_log is not None and len(self.servers) != 1:
            raise UsageError("--server-log is the log of the one running server --server names: give exactly one --server")
        if self.server_bin is not None and self.target_gguf is None:
            raise UsageError("stage 5 launches llama-server with the target as GGUF: give --target-gguf T.gguf")

    def parity(self, **changes):
        from ..parity import ParityOptions

        return ParityOptions(max_new_tokens=self.max_new_tokens, temperature=self.temperature, seed=self.seed,
                             runs=self.runs, jobs=self.jobs, device=self.device, dtype=self.dtype, **changes)


def check_file_type(flag: str, name: str) -> str:
    """A llama-quantize file type we can write, by its canonical name (``q4_k_m`` -> ``Q4_K_M``).

    Raises:
        UsageError: unknown, or one dflash_gguf does not write (importance-matrix types).
    """
    from ..quants.ftypes import ftype_refusal, resolve_ftype

    try:
        canon = resolve_ftype(name)
    except QuantizationError as exc:
        raise UsageError(f"{flag} {name!r}: {exc}") from None
    why = ftype_refusal(canon)
    if why or canon == "COPY":
        raise UsageError(f"{flag} {name!r}: {why or 'COPY changes nothing'}")
    return canon


def run_diagnose(target: str | Path, drafter: str | Path, prompts: Sequence[Sequence[int]], *,
                 drafter_ggufs: Sequence[str | Path] = (), options: DiagnoseOptions = DiagnoseOptions(),
                 progress: Progress | None = None) -> DiagnoseReport:
    """Every stage that can run, on the same prompts. See the module docstring.

    Raises:
        UsageError: no prompts, a missing drafter dir or GGUF, a bad option.
        ConfigError / WeightsError / GGUFFormatError / TargetError: unreadable inputs (one line).
    """
    say = progress or (lambda _m: None)
    if not prompts or any(len(p) == 0 for p in prompts):
        raise UsageError("no prompt tokens: pass --prompt-ids, --prompt or --prompts-file")
    _check_inputs(target, drafter, drafter_ggufs, options)
    lanes = [Lane("checkpoint", None, "checkpoint")]
    for p, name in zip(drafter_ggufs, _unique_names([Path(p) for p in drafter_ggufs])):
        lanes.append(_gguf_lane(Path(p), name, "given"))
    stages: list[StageRun] = []
    server: dict = {}
    with tempfile.TemporaryDirectory(prefix="dflash-diagnose-") as tmp:
        made = _make_quants(target, drafter, lanes, options, Path(options.quants_dir or tmp), say)
        lanes += made
        _reference_stages(target, drafter, prompts, lanes, options, stages, say)
        server = _runtime_stage(prompts, lanes, options, stages, Path(tmp), say)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(options).items()}
    settings.update(target=str(target), drafter=str(drafter), prompts=len(prompts),
                    prompt_tokens=[len(p) for p in prompts])
    if options.quants_dir is None:
        for x in made:  # their temp dir is gone: the name says what they were, the path would mislead
            x.path = None
    return DiagnoseReport(settings, stages, lanes, options.expect, server)


def _check_inputs(target, drafter, ggufs, opts: DiagnoseOptions) -> None:
    from ..parity import check_drafter_dir

    check_drafter_dir(drafter)
    if not Path(drafter).is_dir():
        raise UsageError(f"--drafter {drafter}: no such directory (the checkpoint: config.json + safetensors)")
    if not Path(target).exists():
        raise UsageError(f"--target {target}: no such file or directory")
    for flag, p in [*(("--drafter-gguf", g) for g in ggufs), ("--target-gguf", opts.target_gguf)]:
        if p is not None and not Path(p).is_file():
            raise UsageError(f"{flag} {p}: no such file")
    known = {str(Path(g)) for g in ggufs}
    for path, url in opts.servers:
        if path is not None and str(Path(path)) not in known:
            raise UsageError(f"--server {path}={url}: {path} is not one of the --drafter-gguf files")
    if any(path is None for path, _ in opts.servers) and (len(opts.servers) > 1 or len(ggufs) != 1):
        raise UsageError("--server URL: say which drafter the server runs (--server D.gguf=URL) unless exactly one "
                         "--drafter-gguf is given")


def _unique_names(paths: list[Path]) -> list[str]:
    names = [p.name for p in paths]
    return [str(p) if names.count(p.name) > 1 else p.name for p in paths]


def _gguf_lane(path: Path, name: str, origin: str) -> Lane:
    return Lane(name, str(path), origin, file_type(path), path.stat().st_size)


def file_type(path: str | Path) -> str | None:
    """The GGUF's ``general.file_type`` by llama-quantize's name (BF16, Q4_K_M), or None."""
    from ..fileio.gguf_header import read_header
    from ..quants.ftypes import ALIASES, QUANT_OPTIONS

    ft = read_header(path).get("general.file_type")
    if not isinstance(ft, int) or isinstance(ft, bool):
        return None
    return next((n for n, i in QUANT_OPTIONS if i == ft and n not in ALIASES and n != "COPY"), None)


def _make_quants(target, drafter, lanes: list[Lane], opts: DiagnoseOptions, out: Path, say: Progress) -> list[Lane]:
    """--quants: each type made by our quantizer from the first full-precision GGUF given, else
    from the checkpoint converted to BF16 here (that file joins the drafters: it is the
    full-precision one the quantized files are compared with)."""
    if not opts.quants:
        return []
    from ..quants.gguf_file import quantize_gguf

    out.mkdir(parents=True, exist_ok=True)
    made: list[Lane] = []
    given = [Path(x.path) for x in lanes if x.path is not None]

    def check(dst: Path) -> Path:  # the files are replaced on a rerun, but never one of the inputs
        if dst.exists() and any(g.exists() and dst.samefile(g) for g in given):
            raise UsageError(f"--quants-dir {out}: {dst.name} would replace the --drafter-gguf of that name; "
                             "give another --quants-dir")
        return dst

    src_lane = next((x for x in lanes if x.full_precision), None)
    if src_lane is None:
        from ..convert import convert

        src = check(out / f"{Path(drafter).name}-BF16.gguf")
        say(f"converting {drafter} to BF16 (the source of --quants)")
        t = Path(opts.target_gguf or target)
        convert(drafter, src, outtype="bf16", force=True,
                target_gguf=t if t.is_file() else None, target_dir=t if t.is_dir() else None)
        src_lane = _gguf_lane(src, src.name, "converted")
        made.append(src_lane)
    src = Path(src_lane.path)
    for q in opts.quants:
        dst = check(out / f"{src.stem}-{q}.gguf")
        say(f"quantizing {src.name} to {q}")
        quantize_gguf(src, dst, q, force=True)
        made.append(_gguf_lane(dst, dst.name, "quantized"))
    return made


# --- stages 1-4: the torch reference -------------------------------------------------------------

def _reference_stages(target, drafter, prompts, lanes: list[Lane], opts: DiagnoseOptions, stages: list[StageRun],
                      say: Progress) -> None:
    from ..parity import require_torch, run_parity

    ggufs = [x for x in lanes if not x.is_checkpoint]
    try:
        require_torch()
    except UsageError as exc:
        for s in ("reference", "conversion", "target", "runtime-semantics"):
            stages.append(StageRun(s, False, f"the torch reference cannot run: {exc}"))
        return
    ck = lanes[0]
    say("stages 1-2: the checkpoint and each GGUF drafter with the full-precision target")
    first = run_parity(target, drafter, prompts, drafter_ggufs=[x.path for x in ggufs],
                       options=opts.parity(emulate=None if opts.target_quant else opts.emulate))
    ck.values["reference"] = _value([p.reference for p in first.prompts])
    stages.append(StageRun("reference", True))
    for i, x in enumerate(ggufs):
        x.values["conversion"] = _value([p.drafters[i] for p in first.prompts], logits=True)
    stages.append(StageRun("conversion", bool(ggufs), None if ggufs else "no GGUF drafter: give --drafter-gguf or --quants"))
    last = first
    if opts.target_quant:
        say(f"stage 3: the same drafters with the target's weights through {opts.target_quant}")
        last = run_parity(target, drafter, prompts, drafter_ggufs=[x.path for x in ggufs],
                          options=opts.parity(target_quant=opts.target_quant.lower(), emulate=opts.emulate))
        ck.values["target"] = _value([p.reference for p in last.prompts])
        for i, x in enumerate(ggufs):
            x.values["target"] = _value([p.drafters[i] for p in last.prompts])
        stages.append(StageRun("target", True, notes=[f"target weights through {opts.target_quant}"]))
    else:
        stages.append(StageRun("target", False, "no --target-quant"))
    say(f"stage 4: {opts.emulate} semantics, the checkpoint and each GGUF")
    ck.values["runtime-semantics"] = _value([p.emulated for p in last.prompts])
    _emulate_ggufs(target, drafter, prompts, ggufs, opts)
    stages.append(StageRun("runtime-semantics", True, notes=[f"--emulate {opts.emulate}"]))


def _value(rows, logits: bool = False, notes: Sequence[str] = ()) -> StageValue:
    """One drafter's per-prompt RunSummary rows pooled, as parity's report pools them."""
    from ..metrics.kl import KLStats
    from ..parity.report import acceptance_json

    a = acceptance_json([r.run_steps for r in rows], rows[0].n_draft)
    runs = a.get("runs")  # mean ± sd over runs, each run pooled over the prompts
    al = Stat(**runs["mean_acceptance_length"]) if runs else Stat.of([a["mean_acceptance_length"]])
    rate = Stat(**runs["acceptance_rate"]) if runs else Stat.of([a["acceptance_rate"]])
    lp = None
    parts = [r.logit_parity for r in rows if r.logit_parity is not None]
    if logits and parts:
        kl = KLStats.pool([p.divergence for p in parts])
        lp = {"top1": kl.same_top, "mean_kl": kl.mean, "max_abs": max(p.max_abs for p in parts), "positions": kl.count,
              "first_divergence": next((p.first_divergence for p in parts if p.first_divergence), None)}
    all_notes = list(dict.fromkeys([*notes, *(n for r in rows for n in r.notes)]))
    return StageValue(al, rate, a["per_position"], a["steps"], lp, all_notes)


def _emulate_ggufs(target, drafter, prompts, ggufs: list[Lane], opts: DiagnoseOptions) -> None:
    """Stage 4 for each GGUF: parity's emulation (``emulated_config``, the draft-context cap)
    applied to the drafter as the GGUF defines it, on the stage-3 (or stage-2) target."""
    if not ggufs:
        return
    from .. import reference as ref
    from ..parity.emulate import LLAMA_CPP_DRAFT_CONTEXT, emulated_config
    from ..parity.report import summarize
    from ..parity.target import load_target, target_stop_ids
    from ..reference.load import drafter_from_state
    from ..reference.pool import map_prompts, prompt_jobs

    popts = opts.parity(target_quant=opts.target_quant.lower() if opts.target_quant else None, emulate=opts.emulate)
    tmodel = load_target(target, popts)
    stops = target_stop_ids(target)
    cap = LLAMA_CPP_DRAFT_CONTEXT
    config = Path(drafter) / "config.json"
    for x in ggufs:
        try:
            g = ref.drafter_from_gguf(x.path, config, dtype=popts.dtype, device=popts.device)
            ecfg, changes = emulated_config(g.cfg, popts.emulate)
            model = drafter_from_state(ecfg, dict(g.state_dict()), dtype=popts.dtype, device=popts.device)
        except DflashError as exc:  # stage 2 loaded it: what fails here is the rebuild, not the file
            x.skipped["runtime-semantics"] = f"cannot rebuild it with {popts.emulate} semantics: {exc}"
            continue
        pos = x.values["conversion"].per_position  # its width is the drafter's drafts per round
        width = len(pos) if pos is not None else 0

        def one(prompt, model=model, name=x.name, quant=x.quant):
            runs = [ref.generate(model, tmodel, prompt, popts.max_new_tokens, stops, temperature=popts.temperature,
                                 top_p=popts.top_p, top_k=popts.top_k, seed=popts.seed + r, draft_context=cap)
                    for r in range(popts.runs)]
            return summarize(name, quant, runs, None, width)

        rows = map_prompts(one, [list(p) for p in prompts], prompt_jobs(popts.jobs, model.fc.weight.device, len(prompts)))
        notes = [*changes, f"draft context capped at the last {cap} positions (historical llama.cpp cross_ctx default)"]
        if all(len(p) + popts.max_new_tokens - 2 <= cap for p in prompts):
            notes.append("the cap never binds on these prompts: same context as the reference")
        x.values["runtime-semantics"] = _value(rows, notes=notes)


# --- stage 5: the real runtime -------------------------------------------------------------------

def _runtime_stage(prompts, lanes: list[Lane], opts: DiagnoseOptions, stages: list[StageRun], tmp: Path,
                   say: Progress) -> dict:
    if opts.server_bin is None and not opts.servers:
        stages.append(StageRun("runtime", False, "no --server-bin/--server"))
        return {}
    from ..bench import BenchOptions, build_report, run_bench

    suite = tmp / "diagnose-prompts.jsonl"  # token ids: the server sees exactly the prompts parity ran
    suite.write_text("".join(json.dumps({"id": f"prompt-{i + 1}", "prompt_ids": list(p)}) + "\n"
                             for i, p in enumerate(prompts)), encoding="utf-8")
    common = dict(suites=(str(suite),), runs=opts.runs, n_predict=opts.max_new_tokens, temperature=opts.temperature,
                  seed=opts.seed, baseline=False)
    ggufs = [x for x in lanes if not x.is_checkpoint]
    if opts.server_bin is not None:
        jobs = [(x, BenchOptions(target=opts.target_gguf, drafters=(Path(x.path),), server_bin=opts.server_bin,
                                 **common)) for x in ggufs if x.path is not None]
    else:
        by_path = {str(Path(x.path)): x for x in ggufs if x.path is not None}
        jobs = [(by_path[str(Path(p))] if p is not None else ggufs[0],
                 BenchOptions(servers=((f"server{i + 1}", url),), server_log=opts.server_log, **common))
                for i, (p, url) in enumerate(opts.servers)]
    server: dict = {}
    measured = 0
    for x, bo in jobs:
        say(f"stage 5: {x.name} in the runtime")
        try:
            result = run_bench(bo)
        except ServerError as exc:  # the runtime failed with this drafter (a crash): a finding, and the others still run
            x.failed["runtime"] = str(exc)
            continue
        except (PairingError, MemoryGuardError) as exc:  # not taken at all: the pair does not fit, or memory
            x.skipped["runtime"] = f"{type(exc).__name__}: {exc}"
            continue
        server = server or result.server_info
        rows = build_report(result).rows
        if not rows:
            x.skipped["runtime"] = "the runtime answered no request"
            continue
        row = rows[0]
        notes = list(dict.fromkeys([*row.notes, *result.notes]))
        if row.source is None:  # drafted nothing: one token per target pass
            n = len(row.runs)
            x.values["runtime"] = StageValue(Stat.of([1.0] * n), Stat.of([0.0] * n), None, 0,
                                             notes=notes or ["the server drafted nothing with this drafter"])
        elif row.mean_length is None:
            x.skipped["runtime"] = (f"the server reported no step count, so no mean acceptance length (acceptance "
                                    f"rate {row.acceptance_rate.mean:.3f}); a running llama-server gives them in its "
                                    "log: start it with LLAMA_TRACE=1 ... --log-file FILE and pass --server-log FILE")
            continue
        else:
            steps = sum((r.acceptance or {}).get("steps") or 0 for r in row.runs)
            x.values["runtime"] = StageValue(row.mean_length, row.acceptance_rate,
                                             None if row.per_position is None else [s.mean for s in row.per_position],
                                             steps, notes=notes)
        measured += 1
    how = f"llama-server {opts.server_bin}" if opts.server_bin else "running server(s)"
    stages.append(StageRun("runtime", measured > 0 or any("runtime" in x.failed for x in ggufs),
                           None if measured else "no drafter could be measured in the runtime",
                           notes=[f"{how}; the prompts sent as token ids"]))
    return server
