"""Running the stages: the torch reference through ``parity`` (stages 1-4) and the real runtime
through ``bench`` (stage 5, ``runtime.py``), on the same prompt token ids, each stage changing one
thing.

Per prompt set (the prompt options' one, or one per ``--suite``), parity runs once for stages
1-2 (the checkpoint and every GGUF on the full-precision target) and, when there is a stage-3
target (``target.py``: ``--target-quant``, or the quantized ``--target-gguf`` itself), once more
for stage 3 with the same drafters. Stage 4 is parity's emulated reference drafter for the
checkpoint, and for each GGUF that same emulation applied to the GGUF's own config (its
constants as the file has them), run here. The files ``--quants`` makes are made once for
every set.
"""
from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from ..errors import DflashError, UsageError
from ..metrics.spread import Stat
from .options import DiagnoseOptions
from .report import DiagnoseReport, Lane, StageRun, StageValue
from .target import Stage3Target, file_type, plan_stage3

Progress = Callable[[str], None]
PromptSet = tuple[str | None, Sequence[Sequence[int]]]  # (suite name or None, token ids of each prompt)


def run_diagnose(target: str | Path, drafter: str | Path, prompts: Sequence[Sequence[int]], *,
                 drafter_ggufs: Sequence[str | Path] = (), options: DiagnoseOptions = DiagnoseOptions(),
                 progress: Progress | None = None) -> DiagnoseReport:
    """Every stage that can run, on one prompt set. See the module docstring.

    Raises:
        UsageError: no prompts, a missing drafter dir or GGUF, a bad option.
        ConfigError / WeightsError / GGUFFormatError / TargetError: unreadable inputs (one line).
    """
    return run_suites(target, drafter, [(None, prompts)], drafter_ggufs=drafter_ggufs, options=options,
                      progress=progress)[0]


def run_suites(target: str | Path, drafter: str | Path, prompt_sets: Sequence[PromptSet], *,
               drafter_ggufs: Sequence[str | Path] = (), options: DiagnoseOptions = DiagnoseOptions(),
               progress: Progress | None = None) -> list[DiagnoseReport]:
    """One report per prompt set (each with its own verdict and recommendation); the drafter
    files are made once, and stage 5 starts each drafter's server once for every set."""
    say = progress or (lambda _m: None)
    if not prompt_sets or any(not ps or any(len(p) == 0 for p in ps) for _, ps in prompt_sets):
        raise UsageError("no prompt tokens: pass --prompt-ids, --prompt, --prompts-file or --suite")
    _check_inputs(target, drafter, drafter_ggufs, options)
    stage3, no_stage3 = plan_stage3(target, options.target_quant, options.target_gguf)
    base = [Lane("checkpoint", None, "checkpoint")]
    for p, name in zip(drafter_ggufs, _unique_names([Path(p) for p in drafter_ggufs])):
        base.append(_gguf_lane(Path(p), name, "given"))
    lanes: list[list[Lane]] = []
    stages: list[list[StageRun]] = []
    with tempfile.TemporaryDirectory(prefix="dflash-diagnose-") as tmp:
        made = _make_quants(target, drafter, base, options, Path(options.quants_dir or tmp), say)
        base += made
        for name, prompts in prompt_sets:
            lanes.append([dataclasses.replace(x, values={}, skipped={}, failed={}) for x in base])
            stages.append([])
            if name is not None:
                say(f"suite {name}: {len(prompts)} prompt(s)")
            _reference_stages(target, drafter, prompts, lanes[-1], options, stages[-1], stage3, no_stage3, say)
        from .runtime import runtime_stage

        server = runtime_stage([ps for _, ps in prompt_sets], lanes, options, stages, Path(tmp), say)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(options).items()}
    settings.update(target=str(target), drafter=str(drafter),
                    target_stage3=None if stage3 is None else stage3.to_json())
    reports = []
    for (name, prompts), ls, st in zip(prompt_sets, lanes, stages):
        if options.quants_dir is None:
            for x in ls:  # their temp dir is gone: the name says what they were, the path would mislead
                if x.origin in ("converted", "quantized"):
                    x.path = None
        reports.append(DiagnoseReport({**settings, "suite": name, "prompts": len(prompts),
                                       "prompt_tokens": [len(p) for p in prompts]}, st, ls, options.expect, server))
    return reports


def _check_inputs(target, drafter, ggufs, opts: DiagnoseOptions) -> None:
    from ..parity import check_drafter_dir

    check_drafter_dir(drafter)
    if not Path(drafter).is_dir():
        raise UsageError(f"--drafter {drafter}: no such directory (the checkpoint: config.json + safetensors)")
    if not Path(target).exists():
        raise UsageError(f"--target {target}: no such file or directory")
    if opts.target_backend == "transformers" and not Path(target).is_dir():
        raise UsageError(f"--target {target}: --target-backend transformers loads a Hugging Face directory; give "
                         "the target's dir (a quantized GGUF goes in --target-gguf)")
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
                      stage3: Stage3Target | None, no_stage3: str | None, say: Progress) -> None:
    from ..parity import require_torch, run_parity
    from ..parity.target import load_target

    ggufs = [x for x in lanes if not x.is_checkpoint]
    try:
        require_torch()
    except UsageError as exc:
        for s in ("reference", "conversion", "target", "runtime-semantics"):
            stages.append(StageRun(s, False, f"the torch reference cannot run: {exc}"))
        return
    ck = lanes[0]
    emulate = dict(emulate=opts.emulate, draft_context=opts.draft_context)
    say("stages 1-2: the checkpoint and each GGUF drafter with the full-precision target")
    # stage 4 runs on the target, with the options, of the last parity run: stage 3's when it runs
    tpath, popts = target, opts.parity(target, **({} if stage3 else emulate))
    tmodel = load_target(tpath, popts)  # loaded once for every stage that runs on it
    first = run_parity(tpath, drafter, prompts, drafter_ggufs=[x.path for x in ggufs], options=popts,
                       target_model=tmodel)
    ck.values["reference"] = _value([p.reference for p in first.prompts])
    stages.append(StageRun("reference", True))
    for i, x in enumerate(ggufs):
        x.values["conversion"] = _value([p.drafters[i] for p in first.prompts], logits=True)
    stages.append(StageRun("conversion", bool(ggufs), None if ggufs else "no GGUF drafter: give --drafter-gguf or --quants"))
    last = first
    if stage3 is not None:
        say(f"stage 3: the same drafters with {stage3.label}")
        tpath = stage3.path if stage3.path is not None else target
        popts = opts.parity(tpath, target_quant=_round_trip(stage3), **emulate)
        del tmodel  # a large target: one in memory at a time
        tmodel = load_target(tpath, popts)
        last = run_parity(tpath, drafter, prompts, drafter_ggufs=[x.path for x in ggufs], options=popts,
                          target_model=tmodel)
        ck.values["target"] = _value([p.reference for p in last.prompts])
        for i, x in enumerate(ggufs):
            x.values["target"] = _value([p.drafters[i] for p in last.prompts])
        stages.append(StageRun("target", True, notes=[stage3.label, *stage3.notes]))
    else:
        stages.append(StageRun("target", False, no_stage3))
    say(f"stage 4: {opts.emulate} semantics, the checkpoint and each GGUF")
    ck.values["runtime-semantics"] = _value([p.emulated for p in last.prompts])
    _emulate_ggufs(drafter, prompts, ggufs, tpath, popts, tmodel)
    stages.append(StageRun("runtime-semantics", True, notes=[f"--emulate {opts.emulate}"]
                           + ([] if opts.draft_context is None else [f"--draft-context {opts.draft_context}"])
                           + ([] if stage3 is None else [f"on the stage-3 target ({stage3.label})"])))


def _round_trip(stage3: Stage3Target | None) -> str | None:
    return stage3.quant.lower() if stage3 is not None and stage3.source == "target-quant" else None


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


def _emulate_ggufs(drafter, prompts, ggufs: list[Lane], tpath, popts, tmodel) -> None:
    """Stage 4 for each GGUF: parity's emulation (``emulated_config``, the draft-context cap)
    applied to the drafter as the GGUF defines it, on the target the last parity run used (stage
    3's, or stage 2's): ``tmodel``, loaded from ``tpath`` with the options ``popts``."""
    if not ggufs:
        return
    from .. import reference as ref
    from ..parity.emulate import LLAMA_CPP_DRAFT_CONTEXT, emulated_config
    from ..parity.report import summarize
    from ..parity.target import target_stop_ids
    from ..reference.load import drafter_from_state
    from ..reference.pool import map_prompts, prompt_jobs

    stops = target_stop_ids(tpath)
    cap = popts.draft_context or LLAMA_CPP_DRAFT_CONTEXT
    why = ("historical llama.cpp cross_ctx default" if popts.draft_context is None  # parity's wording (load_emulated)
           else f"set explicitly; the historical llama.cpp cross_ctx default is {LLAMA_CPP_DRAFT_CONTEXT}")
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
        notes = [*changes, f"draft context capped at the last {cap} positions ({why})"]
        if all(len(p) + popts.max_new_tokens - 2 <= cap for p in prompts):
            notes.append("the cap never binds on these prompts: same context as the reference")
        x.values["runtime-semantics"] = _value(rows, notes=notes)


