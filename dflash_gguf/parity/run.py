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
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..errors import ConfigError, DflashError, ParityFailure, UsageError

EMULATIONS = ("llama.cpp",)
# Older llama.cpp builds gave the drafter at most the last 512 target-feature positions as
# context (``cross_ctx``; ik_llama.cpp PR #2341 replaced it with --ctx-size-draft).
LLAMA_CPP_DRAFT_CONTEXT = 512
DUMP_VERSION = 1


@dataclass(frozen=True)
class ParityOptions:
    max_new_tokens: int = 64
    block_size: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    runs: int = 1
    device: str = "auto"
    dtype: str = "float32"
    target_quant: str | None = None
    emulate: str | None = None
    draft_context: int | None = None  # the emulated run's draft-context cap; None: the runtime's (llama.cpp: 512)
    stop_ids: tuple[int, ...] | None = None  # None: the target's eos ids
    target_backend: str = "native"  # "native" (our Qwen3/Llama) | "transformers" (any HF causal LM)


@dataclass
class Stat:
    mean: float
    sd: float
    values: list[float]

    @classmethod
    def of(cls, values: Sequence[float]) -> "Stat":
        values = [float(v) for v in values]
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        return cls(statistics.fmean(values) if values else 0.0, sd, values)


@dataclass
class RunSummary:
    """One drafter's free-running results on one prompt (run 0 in detail, all runs as stats)."""

    name: str
    format: str | None
    new_ids: list[int]
    steps: list[dict[str, Any]]
    acceptance_lengths: list[int]
    mean_acceptance_length: Stat
    acceptance_rate: Stat  # accepted / drafted, as llama.cpp reports it
    tokens_per_s: Stat
    lossless: bool | None  # temperature 0 only: equals the target's greedy decoding
    logit_parity: dict[str, Any] | None = None
    delta_vs_reference: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = {
            "name": self.name, "format": self.format, "new_ids": self.new_ids, "steps": self.steps,
            "acceptance_lengths": self.acceptance_lengths,
            "mean_acceptance_length": self.mean_acceptance_length.mean,
            "mean_acceptance_length_sd": self.mean_acceptance_length.sd,
            "acceptance_rate": self.acceptance_rate.mean, "acceptance_rate_sd": self.acceptance_rate.sd,
            "tokens_per_s": self.tokens_per_s.mean, "tokens_per_s_sd": self.tokens_per_s.sd,
            "lossless": self.lossless,
        }
        if self.logit_parity is not None:
            out["logit_parity"] = self.logit_parity
        if self.delta_vs_reference is not None:
            out["delta_vs_reference"] = self.delta_vs_reference
        if self.notes:
            out["notes"] = self.notes
        return out


@dataclass
class PromptReport:
    prompt_ids: list[int]
    reference: RunSummary
    drafters: list[RunSummary]
    emulated: RunSummary | None
    greedy_ids: list[int] | None


@dataclass
class ParityReport:
    settings: dict[str, Any]
    prompts: list[PromptReport]
    device: str
    dump: str | None = None
    against: dict[str, Any] | None = None

    @property
    def lossless(self) -> bool:
        return all(r.lossless is not False for p in self.prompts for r in [p.reference, *p.drafters])

    def to_json(self) -> dict[str, Any]:
        first = self.prompts[0]
        out: dict[str, Any] = {
            "prompt_ids": first.prompt_ids,
            "reference": first.reference.to_json(),
            "drafters": [d.to_json() for d in first.drafters],
            "settings": self.settings,
            "device": self.device,
            "lossless": self.lossless,
            "acceptance_metrics": {
                "acceptance_length": "tokens committed per draft-verify round including the bonus token (z-lab's "
                                     "'acceptance length', 1..block_size)",
                "acceptance_rate": "accepted draft tokens / drafted tokens (llama.cpp's 'draft acceptance rate')",
            },
        }
        if first.emulated is not None:
            out["emulated"] = first.emulated.to_json()
        if len(self.prompts) > 1:
            out["prompts"] = [{"prompt_ids": p.prompt_ids, "reference": p.reference.to_json(),
                               "drafters": [d.to_json() for d in p.drafters],
                               **({"emulated": p.emulated.to_json()} if p.emulated else {})} for p in self.prompts]
        if self.dump:
            out["dump"] = self.dump
        if self.against is not None:
            out["against"] = self.against
        return out


# --- loading -----------------------------------------------------------------------------------
def _load_target(target: str | Path, opts: ParityOptions):
    from .. import reference as ref

    p = Path(target)
    if opts.target_backend not in ("native", "transformers"):
        raise UsageError(f"--target-backend {opts.target_backend!r}: choose native or transformers")
    if opts.target_backend == "transformers":
        # targets we do not implement (Gemma-4, Qwen3.5 hybrids): hidden states via output_hidden_states
        from ..reference.hf_target import load_hf_target

        if not p.is_dir():
            raise UsageError(f"--target-backend transformers: {target} must be a Hugging Face directory")
        model = load_hf_target(p, dtype=opts.dtype, device=opts.device)
    elif p.is_file():
        model = ref.target_from_gguf(p, dtype=opts.dtype, device=opts.device)
    elif p.is_dir():
        model = ref.load_target(p, dtype=opts.dtype, device=opts.device)
    else:
        raise UsageError(f"--target {target}: not a Hugging Face dir or a GGUF file")
    if opts.target_quant:
        quantize_target_weights(model, opts.target_quant)
    return model


def _target_stop_ids(target: str | Path) -> tuple[int, ...]:
    p = Path(target)
    ids: list[int] = []
    if p.is_dir():
        from ..config import load_target_config

        eos = load_target_config(p).eos_token_id
        ids = list(eos) if isinstance(eos, tuple) else ([] if eos is None else [int(eos)])
    else:
        from ..fileio.gguf_reader import read_gguf

        kv = read_gguf(p).kvs.get("tokenizer.ggml.eos_token_id")
        ids = [] if kv is None else [int(kv.value)]
    return tuple(ids)


def quantize_target_weights(target, qtype: str) -> list[tuple[str, str]]:
    """Round-trip the target's matrices through our bit-exact quantizers, with llama-quantize's
    per-tensor plan for the mix (the embedding and head included). Returns (name, type) pairs."""
    import numpy as np
    import torch

    from ..formats.names import target_gguf_name
    from ..quants import dequantize, quantize
    from ..quants.policy import plan_types

    params = dict(target.named_parameters())
    names: dict[str, str] = {}  # GGUF name -> parameter name
    for hf, p in params.items():
        g = target_gguf_name(hf) if p.dim() == 2 else None
        if g is not None:
            names[g] = hf
    if target.spec.tie_word_embeddings:
        names.pop("output.weight", None)  # tied: one tensor, planned as token_embd (llama-quantize's rule)
    plan = plan_types([(g, tuple(params[hf].shape)) for g, hf in names.items()], qtype, target.spec.num_hidden_layers)
    done = []
    with torch.no_grad():
        for c in plan:
            if not c.quantized:
                continue
            p = params[names[c.name]]
            x = p.detach().float().cpu().numpy()
            y = dequantize(quantize(np.ascontiguousarray(x), c.ggml_type, name=names[c.name]), c.ggml_type, x.shape)
            p.copy_(torch.from_numpy(y).to(p.dtype))
            done.append((names[c.name], c.ggml_type.name))
    return done


def emulated_config(cfg, runtime: str):
    """The drafter config with a runtime's semantics in place of the reference's.

    llama.cpp (mainline) applies one causal flag to every drafter layer — ``dflash.attention.causal``,
    default non-causal — where the reference makes sliding layers causal when the config has
    no ``is_causal``.
    """
    if runtime not in EMULATIONS:
        raise UsageError(f"--emulate {runtime!r}: supported: {', '.join(EMULATIONS)}")
    raw = dict(cfg.raw)
    changes = []
    if raw.get("is_causal") is None:
        raw["is_causal"] = False
        kinds = set(cfg.layer_types or ())
        if "sliding_attention" in kinds:
            changes.append("all layers non-causal (the reference makes sliding layers causal)")
        else:
            changes.append("all layers non-causal (same as the reference for this drafter)")
    return dataclasses.replace(cfg, raw=raw, is_causal=raw["is_causal"]), changes


# --- the run ------------------------------------------------------------------------------------
def run_parity(
    target: str | Path,
    drafter: str | Path,
    prompts: Sequence[Sequence[int]],
    *,
    drafter_ggufs: Sequence[str | Path] = (),
    options: ParityOptions = ParityOptions(),
    dump: str | Path | None = None,
    against: str | Path | None = None,
) -> ParityReport:
    """Reference vs GGUF drafters on the same target and prompts. See the module docstring.

    Raises:
        UsageError / ConfigError / WeightsError / GGUFFormatError: bad inputs (one line each).
    """
    from .. import reference as ref

    if not prompts or any(len(p) == 0 for p in prompts):
        raise UsageError("no prompt tokens: pass --prompt-ids, --prompt or --prompts-file")
    if options.runs < 1:
        raise UsageError("--runs must be at least 1")
    tmodel = _load_target(target, options)
    ref_drafter = ref.load_drafter(drafter, dtype=options.dtype, device=options.device)
    cfg = ref_drafter.cfg
    vocab = tmodel.spec.vocab_size
    for p in prompts:
        bad = [t for t in p if not 0 <= t < vocab]
        if bad:
            raise UsageError(f"prompt token id {bad[0]} is outside the target's vocabulary (0..{vocab - 1})")
    stops = options.stop_ids if options.stop_ids is not None else _target_stop_ids(target)
    others = []
    for g in drafter_ggufs:
        model = ref.drafter_from_gguf(g, cfg.path, dtype=options.dtype, device=options.device)
        from ..formats import meta_from_gguf
        from ..fileio.gguf_reader import read_gguf

        f = read_gguf(g)
        fmt, _ = meta_from_gguf(f.kvs, f.shapes(), g)
        others.append((str(g), fmt.name, model))
    emulated = None
    if options.emulate:
        ecfg, changes = emulated_config(cfg, options.emulate)
        cap = options.draft_context if options.draft_context is not None else LLAMA_CPP_DRAFT_CONTEXT
        if cap < 1:
            raise UsageError(f"draft_context must be at least 1, got {cap}")
        why = ("historical llama.cpp cross_ctx default" if cap == LLAMA_CPP_DRAFT_CONTEXT
               else f"set explicitly; the historical llama.cpp cross_ctx default is {LLAMA_CPP_DRAFT_CONTEXT}")
        changes.append(f"draft context capped at the last {cap} positions ({why})")
        state = ref.load.read_safetensors(cfg.path.parent)
        emulated = (f"reference drafter with {options.emulate} semantics", changes, cap,
                    ref.load.drafter_from_state(ecfg, state, dtype=options.dtype, device=options.device))

    reports = []
    dump_index: list[dict[str, Any]] = []
    for pi, prompt in enumerate(prompts):
        greedy_ids = None
        if options.temperature == 0:
            greedy_ids = ref.greedy_decode(tmodel, prompt, options.max_new_tokens, stops)
        ref_runs = _runs(ref_drafter, tmodel, prompt, options, stops, record=True)
        reference = _summary("reference", None, ref_runs, greedy_ids)
        drafters = []
        for name, fmt_name, model in others:
            runs = _runs(model, tmodel, prompt, options, stops)
            s = _summary(name, fmt_name, runs, greedy_ids)
            tf = ref.teacher_forced(model, tmodel, ref_runs[0])
            s.logit_parity = logit_parity(ref_runs[0], tf)
            s.delta_vs_reference = _delta(reference, s)
            s.notes = list(getattr(model, "gguf_notes", []))
            drafters.append(s)
        emu = None
        if emulated is not None:
            label, changes, cap, model = emulated
            emu = _summary(label, None, _runs(model, tmodel, prompt, options, stops, draft_context=cap), greedy_ids)
            emu.notes = list(changes)
            if len(prompt) + options.max_new_tokens - 2 <= cap:  # the last round drafts from start ≤ that
                emu.notes.append(f"the cap never binds on this prompt ({len(prompt)} + {options.max_new_tokens} "
                                 "tokens): same context as the reference")
            emu.delta_vs_reference = _delta(reference, emu)
        if dump is not None:
            dump_index.append(_dump_prompt(Path(dump), pi, ref_runs[0]))
        reports.append(PromptReport(list(prompt), reference, drafters, emu, greedy_ids))

    settings = {k: v for k, v in dataclasses.asdict(options).items()}
    settings["block_size"] = options.block_size or cfg.block_size
    settings["stop_ids"] = list(stops)
    # the cap only applies to the emulated run: report the value it ran with
    settings["draft_context"] = (options.draft_context or LLAMA_CPP_DRAFT_CONTEXT) if options.emulate else None
    device = str(ref_drafter.fc.weight.device)
    report = ParityReport(settings=settings, prompts=reports, device=device)
    if dump is not None:
        _write_index(Path(dump), prompts, settings, dump_index)
        report.dump = str(dump)
    if against is not None:
        if dump is None:
            raise UsageError("--against needs --dump DIR too (our dump to compare with)")
        report.against = compare_dumps(Path(dump), Path(against))
    return report


def _runs(drafter, target, prompt, opts: ParityOptions, stops, record: bool = False,
          draft_context: int | None = None):
    from .. import reference as ref

    out = []
    for r in range(opts.runs):
        # greedy runs are deterministic; sampled runs get one seed each
        seed = opts.seed + r
        out.append(ref.generate(drafter, target, prompt, opts.max_new_tokens, stops, temperature=opts.temperature,
                                top_p=opts.top_p, top_k=opts.top_k, block_size=opts.block_size, seed=seed,
                                record=record and r == 0, draft_context=draft_context))
    return out


def _rate(result) -> float:
    drafted = sum(len(s.draft) for s in result.steps)
    accepted = sum(min(s.accepted, len(s.draft)) for s in result.steps)
    return accepted / drafted if drafted else 0.0


def _summary(name: str, fmt: str | None, runs, greedy_ids) -> RunSummary:
    r0 = runs[0]
    lossless = None if greedy_ids is None else all(r.new_ids == greedy_ids for r in runs)
    return RunSummary(
        name=name, format=fmt, new_ids=list(r0.new_ids),
        steps=[{"draft": list(s.draft), "accepted": int(s.accepted), "bonus": int(s.bonus)} for s in r0.steps],
        acceptance_lengths=list(r0.acceptance_lengths),
        mean_acceptance_length=Stat.of([r.mean_acceptance_length for r in runs]),
        acceptance_rate=Stat.of([_rate(r) for r in runs]),
        tokens_per_s=Stat.of([r.tokens_per_s for r in runs]),
        lossless=lossless,
    )


def _delta(a: RunSummary, b: RunSummary) -> dict[str, Any]:
    """b − a on mean acceptance length, called real only beyond 1σ of the run-to-run spread."""
    d = b.mean_acceptance_length.mean - a.mean_acceptance_length.mean
    sigma = math.hypot(a.mean_acceptance_length.sd, b.mean_acceptance_length.sd)
    return {"mean_acceptance_length": d, "sigma": sigma, "real": abs(d) > sigma if sigma > 0 else d != 0}


def logit_parity(reference_result, tf) -> dict[str, Any]:
    """max |Δlogit|, mean/max KL(reference ‖ other), top-1 agreement, first argmax divergence."""
    import torch

    ref_steps = {s.start: s for s in reference_result.steps if s.draft}
    max_abs, kls, agree, total, first = 0.0, [], 0, 0, None
    for k, s in enumerate(tf.steps):
        r = ref_steps[s.start].draft_logits.float().cpu()
        o = s.logits.float().cpu()
        max_abs = max(max_abs, float((o - r).abs().max()))
        lp = torch.log_softmax(r.double(), dim=-1)
        lq = torch.log_softmax(o.double(), dim=-1)
        kl = (lp.exp() * (lp - lq)).sum(dim=-1)  # (q−1,)
        kls += kl.tolist()
        ra, oa = r.argmax(dim=-1), o.argmax(dim=-1)
        same = (ra == oa)
        agree += int(same.sum())
        total += same.numel()
        if first is None and not bool(same.all()):
            j = int((~same).nonzero()[0, 0])
            first = {"step": k, "position": j, "absolute_position": s.start + 1 + j,
                     "reference_token": int(ra[j]), "other_token": int(oa[j])}
    return {
        "max_abs": max_abs,
        "mean_kl": statistics.fmean(kls) if kls else 0.0,
        "max_kl": max(kls) if kls else 0.0,
        "top1_agreement": agree / total if total else 1.0,
        "first_divergence": first,
        "positions": total,
    }


# --- golden activations: --dump / --against ------------------------------------------------------
def _dump_prompt(d: Path, pi: int, result) -> dict[str, Any]:
    import torch
    from safetensors.torch import save_file

    d.mkdir(parents=True, exist_ok=True)
    steps = []
    for k, s in enumerate(result.steps):
        if not s.draft:
            continue
        q = len(s.block)
        tensors = {
            "context": s.context.float().cpu().contiguous(),
            "block_ids": torch.tensor(s.block, dtype=torch.int64),
            "positions": torch.arange(s.start, s.start + q, dtype=torch.int64),
            "draft_logits": s.draft_logits.float().cpu().contiguous(),
        }
        tl = getattr(s, "target_logits", None)
        if tl is not None:
            tensors["target_logits"] = tl.float().cpu().contiguous()
        name = f"prompt{pi:02d}_step{k:04d}.safetensors"
        save_file(tensors, str(d / name))
        steps.append({"file": name, "start": s.start, "q": q, "draft": list(s.draft), "accepted": int(s.accepted),
                      "bonus": int(s.bonus), "tensors": sorted(tensors)})
    return {"prompt": pi, "steps": steps}


def _write_index(d: Path, prompts, settings, entries) -> None:
    index = {"version": DUMP_VERSION, "producer": "dflash-gguf parity (torch reference of z-lab dflash 0.1.0)",
             "prompts": [list(p) for p in prompts], "settings": settings, "entries": entries}
    (d / "index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")


def compare_dumps(ours: Path, theirs: Path) -> dict[str, Any]:
    """Tensor-by-tensor max |Δ| between two dumps of the same trajectory."""
    from safetensors.numpy import load_file

    def index(d: Path) -> dict:
        p = d / "index.json"
        if not p.is_file():
            raise UsageError(f"{d}: no index.json; is this a parity --dump directory?")
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{p}: not valid JSON ({exc})") from None

    a, b = index(ours), index(theirs)
    worst: dict[str, float] = {}
    missing: list[str] = []
    compared = 0
    b_files = {s["file"] for e in b["entries"] for s in e["steps"]}
    for e in a["entries"]:
        for s in e["steps"]:
            if s["file"] not in b_files:
                missing.append(s["file"])
                continue
            ta, tb = load_file(str(ours / s["file"])), load_file(str(theirs / s["file"]))
            for name, x in ta.items():
                if name not in tb:
                    missing.append(f"{s['file']}:{name}")
                    continue
                y = tb[name]
                if x.shape != y.shape:
                    worst[name] = float("inf")
                    continue
                diff = float(abs(x.astype("float64") - y.astype("float64")).max()) if x.size else 0.0
                worst[name] = max(worst.get(name, 0.0), diff)
                compared += 1
    return {"tensors_compared": compared, "max_abs_by_tensor": worst, "missing": missing,
            "identical": not missing and all(v == 0.0 for v in worst.values())}


# --- prompts ----------------------------------------------------------------------------------------
def tokenize(text: str, target: str | Path, tokenizer_dir: str | Path | None = None) -> list[int]:
    """Tokenize with the target's tokenizer (HF tokenizer.json via ``tokenizers``, or
    tokenizer.model via ``sentencepiece``), without special tokens."""
    d = Path(tokenizer_dir or target)
    if not d.is_dir():
        raise UsageError(f"--prompt needs a tokenizer: {d} is not a directory; pass --tokenizer-dir or --prompt-ids")
    if (d / "tokenizer.json").is_file():
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise UsageError("--prompt needs the 'tokenizers' package: pip install 'dflash-gguf[tokenizers]'") from None
        return list(Tokenizer.from_file(str(d / "tokenizer.json")).encode(text, add_special_tokens=False).ids)
    if (d / "tokenizer.model").is_file():
        try:
            import sentencepiece as spm
        except ImportError:
            raise UsageError("--prompt needs 'sentencepiece': pip install 'dflash-gguf[tokenizers]'") from None
        return list(spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model")).encode(text))
    raise UsageError(f"{d}: no tokenizer.json or tokenizer.model; pass --prompt-ids instead")


def read_prompts_file(path: str | Path, target: str | Path, tokenizer_dir: str | Path | None = None) -> list[list[int]]:
    """JSONL: one object per line with ``prompt_ids`` (list of ints) or ``prompt`` (text)."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--prompts-file {p}: no such file")
    out = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{p}:{n}: not valid JSON ({exc.msg})") from None
        if isinstance(obj, dict) and isinstance(obj.get("prompt_ids"), list):
            out.append([int(t) for t in obj["prompt_ids"]])
        elif isinstance(obj, dict) and isinstance(obj.get("prompt"), str):
            out.append(tokenize(obj["prompt"], target, tokenizer_dir))
        else:
            raise UsageError(f"{p}:{n}: expected {{\"prompt_ids\": [...]}} or {{\"prompt\": \"...\"}}")
    if not out:
        raise UsageError(f"{p}: no prompts")
    return out
