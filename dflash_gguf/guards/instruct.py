"""Is a GGUF an instruct (chat) model or a base model? Decided from metadata alone.

A DFlash drafter is trained against one instruct target; pairing it with the base model of
the same family loads fine and silently collapses acceptance. Names and metadata are the
only signal we have without running the model, and they conflict: Qwen3 *base* GGUFs ship a
chat template, base and instruct vocabularies share their chat tokens. So evidence is
ranked, and the ranking is the whole algorithm (docs/check-instruct.md):

  tier 1  labels      general.finetune / name / basename say Instruct, it, Chat ... or Base, pt
  tier 2  conventions a family's un-suffixed name (Qwen3 = instruct, Qwen2.5 = base), EOS is a
                      turn-end token, no chat template although the file has a tokenizer,
                      a label in the file name
  tier 3  hints       chat template present, chat tokens in the vocab, EOT id, tags, base_model
  tier 0  info        shown, never votes (template style, size label, EOS text)

The first tier with any vote decides: unanimous -> that verdict, split -> unknown. Hints
never decide on their own. Every rule lives in ``RULES``; nothing else matches names.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Iterator

from ..fileio.gguf_header import GGUFHeader, show
from ..fileio.string_array import StringArray


class Verdict(str, Enum):
    INSTRUCT = "instruct"
    BASE = "base"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Rule:
    """One row of the table: when ``pattern`` matches the text of ``field``, vote ``leans``
    (None = informational) with the strength of ``tier``."""

    id: str
    fields: tuple[str, ...]
    pattern: str
    leans: Verdict | None
    tier: int
    description: str


# Label words, matched as whole tokens of a name ("gemma-3-1b-it", "Qwen3 8B Base").
_SEP = r"(?:^|(?<=[\s._/-]))"
_END = r"(?=$|[\s._/-])"
_INSTRUCT_WORDS = r"(?i)" + _SEP + r"(instruct|it|chat|sft|dpo|orpo|rlhf|thinking)" + _END
_BASE_WORDS = r"(?i)" + _SEP + r"(base|pt|pretrain|pretrained|foundation)" + _END
_NAMES = ("general.finetune", "general.name", "general.basename")
_TURN_END = r"^(<\|im_end\|>|<\|eot_id\|>|<\|eom_id\|>|<end_of_turn>|<turn\|>|<\|end\|>|<\|return\|>|<\|END_OF_TURN_TOKEN\|>)$"

RULES: tuple[Rule, ...] = (
    # tier 1: explicit labels written by the converter from the HF repo name
    Rule("label-instruct", _NAMES, _INSTRUCT_WORDS, Verdict.INSTRUCT, 1,
         "instruct label (Instruct / it / Chat / SFT / DPO / Thinking)"),
    Rule("label-base", _NAMES, _BASE_WORDS, Verdict.BASE, 1,
         "base label (Base / pt / pretrained)"),
    # tier 2: conventions. Family rules only see names that carry no label (see _facts).
    Rule("family-qwen3", ("unlabelled name",), r"(?i)^qwen[-_ ]?3(\.\d+)?" + _END, Verdict.INSTRUCT, 2,
         "Qwen3 / 3.5 / 3.6 without a suffix are the post-trained models (base weights are -Base)"),
    Rule("family-qwen2", ("unlabelled name",), r"(?i)^qwen[-_ ]?(1\.5|2|2\.5)?" + _END, Verdict.BASE, 2,
         "Qwen, Qwen1.5, Qwen2, Qwen2.5 without a suffix are base models (chat weights are -Instruct / -Chat)"),
    Rule("family-llama", ("unlabelled name",), r"(?i)^(meta[-_ ])?llama[-_ ]?[234]", Verdict.BASE, 2,
         "Llama 2 / 3.x / 4 without -Instruct / -chat are base models"),
    Rule("family-mistral", ("unlabelled name",), r"(?i)^(mistral|mixtral)", Verdict.BASE, 2,
         "Mistral / Mixtral without -Instruct are base models"),
    Rule("family-gemma", ("unlabelled name",), r"(?i)^gemma", Verdict.BASE, 2,
         "Gemma without -it is a base model (Gemma 3/4 always say -it or -pt)"),
    Rule("family-deepseek", ("unlabelled name",), r"(?i)^deepseek[-_ ]?(v3|r1)", Verdict.INSTRUCT, 2,
         "DeepSeek-V3 / R1 without a suffix are chat models (base weights are -Base)"),
    Rule("family-gpt-oss", ("unlabelled name",), r"(?i)^gpt[-_ ]?oss", Verdict.INSTRUCT, 2,
         "gpt-oss is only released post-trained"),
    Rule("eos-turn-end", ("tokenizer.ggml.eos_token_id",), _TURN_END, Verdict.INSTRUCT, 2,
         "EOS is an end-of-turn token: the tokenizer was set up for chat (base models end on a document token)"),
    Rule("template-absent", ("tokenizer.chat_template",), r"\A\Z", Verdict.BASE, 2,
         "no chat template although the file has a tokenizer: instruct releases always ship one"),
    Rule("filename-instruct", ("file name",), _INSTRUCT_WORDS, Verdict.INSTRUCT, 2,
         "instruct label in the file name (files get renamed: weaker than metadata)"),
    Rule("filename-base", ("file name",), _BASE_WORDS, Verdict.BASE, 2,
         "base label in the file name (files get renamed: weaker than metadata)"),
    # tier 3: hints, never decisive (base models of the same family share all of these)
    Rule("template-present", ("tokenizer.chat_template",), r"(?s)\S", Verdict.INSTRUCT, 3,
         "chat template present (a hint only: Qwen3 and Qwen2.5 base GGUFs ship one too)"),
    Rule("eot-id", ("tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"), r"(?s).", Verdict.INSTRUCT, 3,
         "end-of-turn / end-of-message token id set"),
    Rule("vocab-chat-tokens", ("tokenizer.ggml.tokens",), r".", Verdict.INSTRUCT, 3,
         "chat / turn special tokens in the vocabulary (base vocabularies usually have them too)"),
    Rule("tag-instruct", ("general.tags",), r"(?i)^(conversational|chat|instruct|instruction-tuned)$", Verdict.INSTRUCT, 3,
         "model-card tag of a chat model"),
    Rule("tag-base", ("general.tags",), r"(?i)^(base|pretrained|base-model)$", Verdict.BASE, 3,
         "model-card tag of a base model"),
    Rule("base-model-lineage", ("general.base_model",), r"(?s).", Verdict.INSTRUCT, 3,
         "declares a base model it was fine-tuned from"),
    # tier 0: what the template looks like and other context; never votes
    Rule("template-chatml", ("tokenizer.chat_template",), r"<\|im_start\|>", None, 0, "ChatML-style template (Qwen, Hermes)"),
    Rule("template-gemma", ("tokenizer.chat_template",), r"<start_of_turn>", None, 0, "Gemma-style template"),
    Rule("template-gemma4", ("tokenizer.chat_template",), r"<\|turn>", None, 0, "Gemma 4-style template"),
    Rule("template-llama3", ("tokenizer.chat_template",), r"<\|start_header_id\|>", None, 0, "Llama 3-style template"),
    Rule("template-inst", ("tokenizer.chat_template",), r"\[INST\]", None, 0, "[INST]-style template (Llama 2, Mistral)"),
    Rule("template-harmony", ("tokenizer.chat_template",), r"<\|channel\|>", None, 0, "Harmony template (gpt-oss)"),
    Rule("template-thinking", ("tokenizer.chat_template",), r"<think>|enable_thinking|<\|think\|>", None, 0,
         "template has a thinking toggle (DFlash drafters are trained with one mode: check the card)"),
    Rule("eos-document-end", ("tokenizer.ggml.eos_token_id",), r"^(<\|endoftext\|>|<\|end_of_text\|>|</s>|<eos>)$", None, 0,
         "EOS is a document-end token (usual for base models, also for some instruct ones, e.g. Gemma)"),
    Rule("size-label", ("general.size_label",), r".", None, 0, "size label"),
    Rule("no-tokenizer", ("tokenizer.ggml.model",), r"\A\Z", None, 0,
         "no tokenizer in this file (a drafter that borrows its target's): run check-instruct on the target"),
)

# Turn markers searched in the vocabulary (exact token text).
CHAT_TOKENS = ("<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>", "<|turn>", "<turn|>",
               "<|start_header_id|>", "<|eot_id|>", "<|eom_id|>", "[INST]", "<|user|>", "<|assistant|>",
               "<|start|>", "<|channel|>")

_COMPILED = tuple((r, re.compile(r.pattern)) for r in RULES)
_LABEL_RES = tuple(re.compile(p) for p in (_INSTRUCT_WORDS, _BASE_WORDS))


@dataclass(frozen=True)
class Evidence:
    rule: str
    field: str
    value: str          # what was seen, shortened for display
    leans: Verdict | None
    tier: int
    description: str
    matched: str = ""   # the part of the text the rule's pattern matched


@dataclass(frozen=True)
class InstructVerdict:
    verdict: Verdict
    evidence: tuple[Evidence, ...]
    reason: str         # one line: which tier decided, or why nothing did


def classify(header: GGUFHeader) -> InstructVerdict:
    """Apply ``RULES`` to the metadata and decide by the first tier that votes."""
    evidence = []
    for field_name, text, shown in _facts(header):
        for rule, rx in _COMPILED:
            if field_name in rule.fields and (m := rx.search(text)):
                matched = _short(m.group(0), 40)
                # Style rules describe the template's content: show what they found in it.
                value = f"contains {matched!r}" if rule.leans is None and field_name == "tokenizer.chat_template" else shown
                evidence.append(Evidence(rule.id, field_name, value, rule.leans, rule.tier, rule.description, matched))
    evidence.sort(key=lambda e: (e.tier or 9, e.rule))
    verdict, reason = _decide(evidence)
    return InstructVerdict(verdict, tuple(evidence), reason)


def _decide(evidence: list[Evidence]) -> tuple[Verdict, str]:
    names = {1: "labels", 2: "conventions"}
    for tier in (1, 2):
        votes = {e.leans for e in evidence if e.tier == tier and e.leans is not None}
        if len(votes) == 1:
            v = votes.pop()
            return v, f"tier {tier} ({names[tier]}) says {v.value}"
        if len(votes) > 1:
            return Verdict.UNKNOWN, f"tier {tier} ({names[tier]}) evidence conflicts: fix the metadata or check the model card"
    if any(e.tier == 3 for e in evidence):
        return Verdict.UNKNOWN, "only hints (tier 3), which base models share; no label or convention decides"
    return Verdict.UNKNOWN, "no evidence in the metadata"


def _short(s: str, n: int = 60) -> str:
    return show(s, n)


def _has_label(text: str) -> bool:
    return any(rx.search(text) for rx in _LABEL_RES)


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def _facts(h: GGUFHeader) -> Iterator[tuple[str, str, str]]:
    """(field, text the rules match, text shown as evidence) for every piece of metadata."""
    str_of = lambda k: v if isinstance(v := h.get(k), str) else None  # noqa: E731
    names = [(k, s) for k in _NAMES if (s := str_of(k))]
    for k, s in names:
        yield k, s, _short(s, 120)
    # Family conventions apply only when no name field carries a label: "Qwen3 8B Base" is
    # base by its label, and "Qwen3 = instruct" must not even be shown as evidence for it.
    if names and not any(_has_label(s) for _, s in names):
        k, s = next(((k, s) for k, s in names if k == "general.basename"), names[-1])
        yield "unlabelled name", s, _short(s, 120)
    stem = Path(str(h.path)).name
    yield "file name", re.sub(r"(?i)(-\d{5}-of-\d{5})?\.gguf$", "", stem), _short(stem, 120)
    if size := str_of("general.size_label"):
        yield "general.size_label", size, _short(size)
    tags = h.get("general.tags")
    if isinstance(tags, (tuple, StringArray)):
        for t in tags:
            if isinstance(t, str):
                yield "general.tags", t, _short(t)
    yield from _base_models(h)
    has_tokenizer = "tokenizer.ggml.model" in h.kv
    if not has_tokenizer:
        yield "tokenizer.ggml.model", "", "absent"
        return
    tmpl = str_of("tokenizer.chat_template")
    if tmpl is None:  # named templates (tokenizer.chat_template.tool_use) count as present
        tmpl = next((v for k in h.kv_order if k.startswith("tokenizer.chat_template.")
                     and isinstance(v := h.get(k), str)), None)
    if tmpl and tmpl.strip():
        yield "tokenizer.chat_template", tmpl, f"present ({len(tmpl):,} chars)"
    else:
        yield "tokenizer.chat_template", "", "absent"
    tokens = h.get("tokenizer.ggml.tokens")
    tokens = tokens if isinstance(tokens, StringArray) else None
    for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        tid = h.get(key)
        if isinstance(tid, int) and not isinstance(tid, bool):
            text = tokens[tid] if tokens is not None and 0 <= tid < len(tokens) else ""
            yield key, text or f"id {tid}", f"{tid} = {_short(text)!r}" if text else f"{tid} (not in the vocabulary)"
    if tokens is not None:
        found = []
        for tok in CHAT_TOKENS:
            try:
                found.append(f"{tok}={tokens.index(tok)}")
            except ValueError:
                pass
        if found:
            yield "tokenizer.ggml.tokens", " ".join(found), _short(" ".join(found), 120)


def _base_models(h: GGUFHeader) -> Iterator[tuple[str, str, str]]:
    own = {_norm(v) for k in _NAMES if isinstance(v := h.get(k), str)}
    count = h.get("general.base_model.count")
    if not isinstance(count, int) or isinstance(count, bool):
        return
    for i in range(min(count, 16)):
        name = h.get(f"general.base_model.{i}.name") or h.get(f"general.base_model.{i}.repo_url")
        if not isinstance(name, str) or not name:
            continue
        tail = name.rstrip("/").rsplit("/", 1)[-1]
        # A quantized re-upload names its own source as base model: that is not lineage.
        if _norm(tail) in own or _norm(name) in own:
            continue
        yield "general.base_model", name, _short(name, 120)
