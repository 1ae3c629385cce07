"""parity: where is acceptance lost — the converter, the quantization or the runtime?

Runs z-lab's draft → verify loop with the torch reference (``dflash_gguf.reference``) for the
original drafter, then for each GGUF drafter: (1) teacher-forced logit parity — every round of
the reference trajectory replayed with exactly the reference's inputs, so differences cannot
compound — and (2) its own free-running acceptance. Optional: the target's weights
round-tripped through our bit-exact quantizers (--target-quant), and the reference drafter run
with the semantics a runtime applies instead of the reference's (--emulate).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

from .._lazy import require
from ..errors import UsageError
from ..fileio.gguf_header import is_gguf_file
from .dumps import compare_dumps, dump_prompt, write_index
from .emulate import load_emulated
from .logits import logit_parity
from .options import ParityOptions
from .report import ParityReport, PromptReport, delta, summarize
from .target import load_target, target_stop_ids


def run_parity(
    target: str | Path,
    drafter: str | Path,
    prompts: Sequence[Sequence[int]],
    *,
    drafter_ggufs: Sequence[str | Path] = (),
    options: ParityOptions = ParityOptions(),
    dump: str | Path | None = None,
    against: str | Path | None = None,
    target_model=None,
) -> ParityReport:
    """Reference vs GGUF drafters on the same target and prompts. See the module docstring.

    ``target_model``: ``target`` already loaded by ``parity.target.load_target`` with these
    options (diagnose runs several stages on one target instead of loading it for each).

    Raises:
        UsageError / ConfigError / WeightsError / GGUFFormatError: bad inputs (one line each); torch
            (the [torch] extra) not installed.
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise UsageError("no prompt tokens: pass --prompt-ids, --prompt or --prompts-file")
    if options.runs < 1:
        raise UsageError("--runs must be at least 1")
    if options.jobs < 0:
        raise UsageError(f"--jobs {options.jobs}: give 0 (one prompt per core) or a positive count")
    check_drafter_dir(drafter)
    require_torch()
    from .. import reference as ref
    from ..reference.pool import map_prompts, prompt_jobs

    tmodel = load_target(target, options) if target_model is None else target_model
    ref_drafter = ref.load_drafter(drafter, dtype=options.dtype, device=options.device)
    cfg = ref_drafter.cfg
    vocab = tmodel.spec.vocab_size
    for p in prompts:
        bad = [t for t in p if not 0 <= t < vocab]
        if bad:
            raise UsageError(f"prompt token id {bad[0]} is outside the target's vocabulary (0..{vocab - 1})")
    stops = options.stop_ids if options.stop_ids is not None else target_stop_ids(target)
    others = _load_gguf_drafters(drafter_ggufs, cfg, options)
    emulated = load_emulated(cfg, options) if options.emulate else None

    def one_prompt(item: tuple[int, Sequence[int]]) -> tuple[PromptReport, dict[str, Any] | None]:
        pi, prompt = item
        greedy_ids = None
        if options.temperature == 0:
            greedy_ids = ref.greedy_decode(tmodel, prompt, options.max_new_tokens, stops)
        ref_runs = _runs(ref_drafter, tmodel, prompt, options, stops, record=True)
        reference = summarize("reference", None, ref_runs, greedy_ids, _n_draft(ref_drafter, options))
        drafters = []
        for name, fmt_name, model in others:
            runs = _runs(model, tmodel, prompt, options, stops)
            s = summarize(name, fmt_name, runs, greedy_ids, _n_draft(model, options))
            tf = ref.teacher_forced(model, tmodel, ref_runs[0])
            s.logit_parity = logit_parity(ref_runs[0], tf)
            s.delta_vs_reference = delta(reference, s)
            s.notes = list(getattr(model, "gguf_notes", []))
            drafters.append(s)
        emu = None
        if emulated is not None:
            runs = _runs(emulated.drafter, tmodel, prompt, options, stops, draft_context=emulated.cap)
            emu = summarize(emulated.label, None, runs, greedy_ids, _n_draft(emulated.drafter, options))
            emu.notes = emulated.notes(len(prompt), options.max_new_tokens)
            emu.delta_vs_reference = delta(reference, emu)
        entry = dump_prompt(Path(dump), pi, ref_runs[0]) if dump is not None else None
        return PromptReport(list(prompt), reference, drafters, emu, greedy_ids), entry

    device = ref_drafter.fc.weight.device
    jobs = prompt_jobs(options.jobs, device, len(prompts))
    done = map_prompts(one_prompt, list(enumerate(prompts)), jobs)
    reports = [r for r, _ in done]
    dump_index = [e for _, e in done if e is not None]

    settings = {k: v for k, v in dataclasses.asdict(options).items()}
    settings["block_size"] = options.block_size or cfg.block_size
    # which published reference's equations the reference drafter ran (docs/parity.md)
    settings["drafter_family"] = cfg.family
    settings["attention_rules"] = ref_drafter.rules.source
    settings["stop_ids"] = list(stops)
    # the cap only applies to the emulated run: report the value it ran with
    settings["draft_context"] = emulated.cap if emulated is not None else None
    settings["jobs"] = jobs  # prompts run at once (0 asked for one per core)
    report = ParityReport(settings=settings, prompts=reports, device=str(device))
    if dump is not None:
        write_index(Path(dump), prompts, settings, dump_index)
        report.dump = str(dump)
    if against is not None:
        if dump is None:
            raise UsageError("--against needs --dump DIR too (our dump to compare with)")
        report.against = compare_dumps(Path(dump), Path(against))
    return report


def require_torch() -> None:
    """parity runs the torch reference: without the [torch] extra, one line saying how to get it."""
    require("torch", "parity", "torch")


def check_drafter_dir(drafter: str | Path) -> None:
    """``--drafter`` is the reference checkpoint (config.json + safetensors); a GGUF given there
    would otherwise be read as a config.json and reported as broken JSON."""
    if is_gguf_file(drafter):
        raise UsageError(f"--drafter {drafter}: a GGUF file; --drafter takes the original checkpoint directory "
                         f"(config.json + safetensors), the reference: pass GGUFs to compare with --drafter-gguf")


def _load_gguf_drafters(paths: Sequence[str | Path], cfg, opts: ParityOptions) -> list[tuple[str, str, Any]]:
    """(path, format name, model) for each GGUF drafter; ``cfg`` is the reference drafter's config."""
    from .. import reference as ref
    from ..fileio.gguf_reader import read_gguf
    from ..formats import meta_from_gguf

    out = []
    for g in paths:
        model = ref.drafter_from_gguf(g, cfg.path, dtype=opts.dtype, device=opts.device)
        f = read_gguf(g)
        fmt, _ = meta_from_gguf(f.kvs, f.shapes(), g)
        out.append((str(g), fmt.name, model))
    return out


def _runs(drafter, target, prompt, opts: ParityOptions, stops, record: bool = False,
          draft_context: int | None = None):
    from .. import reference as ref

    out = []
    for r in range(opts.runs):
        # greedy runs are deterministic; sampled runs get one seed each
        seed = opts.seed + r
        out.append(ref.generate(drafter, target, prompt, opts.max_new_tokens, stops, temperature=opts.temperature,
                                top_p=opts.top_p, top_k=opts.top_k, block_size=opts.block_size, seed=seed,
                                record=record and r == 0, draft_context=draft_context, divergence=True))
    return out


def _n_draft(drafter, opts: ParityOptions) -> int:
    """The most drafts one round holds: block size − 1, or the whole block for a DSpark head that
    samples from its anchor (the width of per-position acceptance and the histogram)."""
    from ..reference.drafting import block_shape

    B = opts.block_size or drafter.block_size
    return block_shape(drafter, B, B + 1)[2]
