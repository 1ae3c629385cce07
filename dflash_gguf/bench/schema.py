"""What each engine must answer before bench uses a number of it: one place for every type, range
and relation, so a broken or hostile server is one line (``BadAnswer``, exit 40 through
``run``), never a traceback or a silently absurd figure (an acceptance rate of −33).

Every JSON answer goes through ``decode_json``: strict UTF-8, integers of at most 20 digits,
nesting at most 64 levels (``fileio.prompts_jsonl.loads_bounded``). Then, per engine:

* counts (tokens, steps, counters) are integers in ``0..MAX_COUNT`` (a float is taken only when
  it is whole: Prometheus writes ``12.0``); times are finite and non-negative;
* accepted drafts ≤ drafted ones, per request; per-position counts ≤ verification steps;
* a request's verification steps are at most ``MAX_STEPS`` and its draft positions (vLLM
  per-position counters, SGLang histogram bins) at most ``MAX_POSITIONS``: the report rebuilds
  one entry per step from them;
* vLLM's counters never go down between the two ``/metrics`` reads around a request.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from .transport import RequestFailed

MAX_COUNT = 1 << 53      # beyond this a Prometheus float no longer holds an exact count
MAX_STEPS = 1 << 20      # verification steps of one request (a 1M-token answer drafts in fewer)
MAX_POSITIONS = 1024     # draft positions / histogram bins (DFlash blocks are 16)


class BadAnswer(RequestFailed):
    """The server answered, but not what its engine's API promises."""


@dataclass
class Completion:
    """What the server said about one request."""

    text: str
    prompt_n: int | None
    predicted_n: int
    decode_s: float | None  # the server's own decode time; None where it reports none
    wall_s: float
    drafted: int | None = None
    accepted: int | None = None
    verify_steps: int | None = None
    per_position: list[int] | None = None  # steps whose accepted run reached past draft i (vLLM)
    histogram: list[int] | None = None     # steps that accepted exactly k drafts (SGLang)

    @property
    def tokens_per_s(self) -> float:
        t = self.decode_s if self.decode_s else self.wall_s
        return self.predicted_n / t if t > 0 else 0.0


# --- decoding ----------------------------------------------------------------------------------

def decode_text(payload: bytes | bytearray, what: str) -> str:
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadAnswer(f"{what}: the answer is not UTF-8 (bad byte at offset {exc.start})") from None


def decode_json(payload: bytes | bytearray, what: str) -> Any:
    import json

    from ..fileio.prompts_jsonl import loads_bounded

    text = decode_text(payload, what)
    try:
        return loads_bounded(text)
    except json.JSONDecodeError:
        raise BadAnswer(f"{what}: the answer is not JSON: {bytes(payload[:80])!r}") from None
    except ValueError as exc:
        raise BadAnswer(f"{what}: the answer is not usable JSON ({exc})") from None


# --- field checks ------------------------------------------------------------------------------

def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return f"the number {v:g}" if isinstance(v, float) else f"the number {v}"
    return {dict: "an object", list: "a list", str: "a string", type(None): "null"}.get(type(v), type(v).__name__)


def obj(v: Any, what: str) -> dict:
    if not isinstance(v, dict):
        raise BadAnswer(f"{what} is {_kind(v)}, expected an object")
    return v


def text(d: dict, key: str, what: str, default: str | None = "") -> str | None:
    v = d.get(key)
    if v is None:
        return default
    if not isinstance(v, str):
        raise BadAnswer(f"{what}.{key} is {_kind(v)}, expected a string")
    return v


def count(d: dict, key: str, what: str, default: int | None = None, required: bool = False,
          most: int = MAX_COUNT) -> int | None:
    """A non-negative integer (``12.0`` accepted) of at most ``most``; ``default`` when absent."""
    v = d.get(key)
    if v is None:
        if required:
            raise BadAnswer(f"{what} has no {key}")
        return default
    return as_count(v, f"{what}.{key}", most)


def as_count(v: Any, what: str, most: int = MAX_COUNT) -> int:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (isinstance(v, int) or v.is_integer())
    if not ok:
        raise BadAnswer(f"{what} is {_kind(v)}, expected a whole number")
    if not 0 <= v <= most:
        raise BadAnswer(f"{what} is {_kind(v)}, outside 0..{most}")
    return int(v)


def seconds(d: dict, key: str, what: str, scale: float = 1.0) -> float | None:
    """A finite, non-negative time (``scale`` converts it to seconds); None when absent."""
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise BadAnswer(f"{what}.{key} is {_kind(v)}, expected a non-negative number")
    return float(v) * scale


def drafts(c: Completion, what: str) -> Completion:
    """The relations between a request's counts."""
    if c.drafted is not None and c.accepted is not None and c.accepted > c.drafted:
        raise BadAnswer(f"{what}: {c.accepted} draft tokens accepted of {c.drafted} drafted")
    if c.verify_steps is not None and c.verify_steps > MAX_STEPS:
        raise BadAnswer(f"{what}: {c.verify_steps} verification steps in one request (at most {MAX_STEPS})")
    if c.per_position is not None:
        if len(c.per_position) > MAX_POSITIONS:
            raise BadAnswer(f"{what}: {len(c.per_position)} draft positions (at most {MAX_POSITIONS})")
        if any(n > (c.verify_steps or 0) for n in c.per_position):
            raise BadAnswer(f"{what}: a draft position reached in more steps than the request's {c.verify_steps}")
    if c.histogram is not None and sum(c.histogram) > MAX_STEPS:
        raise BadAnswer(f"{what}: a histogram of {sum(c.histogram)} steps (at most {MAX_STEPS})")
    return c


# --- llama.cpp (tools/server) --------------------------------------------------------------------

def llama_completion(r: Any, wall: float) -> Completion:
    what = "POST /completion"
    r = obj(r, f"{what}: the answer")
    if not isinstance(r.get("timings"), dict) or "predicted_n" not in r["timings"]:
        raise BadAnswer(f"{what}: the answer has no timings.predicted_n (not a llama-server?)")
    t, tw = r["timings"], f"{what}: timings"
    # no draft_n in timings: nothing was drafted (the server omits zeros)
    return drafts(Completion(
        text=text(r, "content", what), prompt_n=count(t, "prompt_n", tw),
        predicted_n=count(t, "predicted_n", tw, required=True), decode_s=seconds(t, "predicted_ms", tw, 1e-3) or 0.0,
        wall_s=wall, drafted=count(t, "draft_n", tw, 0), accepted=count(t, "draft_n_accepted", tw, 0)), tw)


def llama_template(r: Any) -> str:
    what = "POST /apply-template"
    prompt = text(obj(r, f"{what}: the answer"), "prompt", what, None)
    if prompt is None:
        raise BadAnswer(f"{what}: the answer has no prompt")
    return prompt


def llama_props(r: Any) -> dict[str, str]:
    """The fields of ``/props`` bench uses, each a string where present."""
    r = obj(r, "GET /props: the answer")
    return {k: v for k in ("chat_template", "build_info", "model_path") if (v := text(r, k, "GET /props", None))}


# --- vLLM (vllm/entrypoints/openai, vllm/v1/spec_decode/metrics.py) -----------------------------

VLLM_DRAFTS = "vllm:spec_decode_num_drafts"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
VLLM_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
_TOTALS = {VLLM_DRAFTS: "drafts", VLLM_DRAFT_TOKENS: "draft_tokens", VLLM_ACCEPTED: "accepted"}
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


def vllm_model(r: Any) -> str:
    what = "GET /v1/models"
    data = obj(r, f"{what}: the answer").get("data")
    if not isinstance(data, list) or not data:
        raise BadAnswer(f"{what}: the server lists no model")
    name = text(obj(data[0], f"{what}: data[0]"), "id", f"{what}: data[0]", None)
    if not name:
        raise BadAnswer(f"{what}: data[0] has no id")
    return name


def vllm_completion(r: Any, chat: bool, wall: float) -> Completion:
    what = f"POST /v1/{'chat/' if chat else ''}completions"
    r = obj(r, f"{what}: the answer")
    choices = r.get("choices")
    if not isinstance(choices, list) or not choices:
        raise BadAnswer(f"{what}: the answer has no choices")
    choice = obj(choices[0], f"{what}: choices[0]")
    if chat:
        out = text(obj(choice.get("message") or {}, f"{what}: choices[0].message"), "content", what)
    else:
        out = text(choice, "text", what)
    usage = obj(r.get("usage") or {}, f"{what}: usage")
    return Completion(text=out or "", prompt_n=count(usage, "prompt_tokens", f"{what}: usage"),
                      predicted_n=count(usage, "completion_tokens", f"{what}: usage", 0), decode_s=None, wall_s=wall)


def parse_prometheus(page: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) for every sample of a Prometheus text exposition (bad lines skipped)."""
    out = []
    for line in page.split("\n"):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, rest = line.split("{", 1)
            labels_text, _, value_text = rest.rpartition("}")
            labels = dict(_LABEL.findall(labels_text))
        else:
            name, _, value_text = line.partition(" ")
            labels = {}
        try:
            out.append((name.strip(), labels, float(value_text.split()[0])))
        except (ValueError, IndexError):
            continue
    return out


def vllm_counters(page: str) -> dict[str, Any]:
    """The spec-decode counters summed over engines and models (``_total`` suffix or not); each
    sample finite and non-negative, positions 0..MAX_POSITIONS − 1."""
    out: dict[str, Any] = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0, "per_pos": {}, "seen": False}
    for name, labels, value in parse_prometheus(page):
        base = name.removesuffix("_total")
        if base not in _TOTALS and base != VLLM_PER_POS:
            continue
        if not (math.isfinite(value) and 0 <= value <= MAX_COUNT):
            raise BadAnswer(f"GET /metrics: {base} is {value:g}; a counter is a finite number ≥ 0")
        if base in _TOTALS:
            out[_TOTALS[base]] += value
            out["seen"] = True
        elif "position" in labels:
            pos = labels["position"]
            if not (pos.isascii() and pos.isdigit() and len(pos) <= 6 and int(pos) < MAX_POSITIONS):
                raise BadAnswer(f"GET /metrics: {base} has position {pos[:20]!r}, expected 0..{MAX_POSITIONS - 1}")
            out["per_pos"][int(pos)] = out["per_pos"].get(int(pos), 0.0) + value
    return out


def vllm_delta(c: Completion, before: dict[str, Any], after: dict[str, Any], what: str) -> Completion:
    """This request's counts: the counters' growth around it (which may not shrink)."""
    if not after["seen"]:
        return c

    def grew(a: float, b: float, name: str) -> int:
        if b < a:
            raise BadAnswer(f"GET /metrics: {name} went down during {what} ({a:g} -> {b:g}): "
                            "the server restarted, or its counters cannot be trusted")
        return round(b - a)

    c.verify_steps = grew(before["drafts"], after["drafts"], VLLM_DRAFTS)
    c.drafted = grew(before["draft_tokens"], after["draft_tokens"], VLLM_DRAFT_TOKENS)
    c.accepted = grew(before["accepted"], after["accepted"], VLLM_ACCEPTED)
    if after["per_pos"]:
        c.per_position = [grew(before["per_pos"].get(i, 0.0), after["per_pos"].get(i, 0.0), VLLM_PER_POS)
                          for i in range(max(after["per_pos"]) + 1)]
    return drafts(c, what)


# --- SGLang (python/sglang/srt/managers/tokenizer_manager.py) ------------------------------------

def sglang_generate(r: Any, wall: float) -> Completion:
    what = "POST /generate"
    if isinstance(r, list):
        if not r:
            raise BadAnswer(f"{what}: the answer is an empty list")
        r = r[0]
    r = obj(r, f"{what}: the answer")
    mw = f"{what}: meta_info"
    meta = obj(r.get("meta_info") or {}, mw)
    c = Completion(text=text(r, "text", what), prompt_n=count(meta, "prompt_tokens", mw),
                   predicted_n=count(meta, "completion_tokens", mw, 0), decode_s=None,
                   wall_s=seconds(meta, "e2e_latency", mw) or wall)
    if "spec_verify_ct" in meta:
        c.verify_steps = count(meta, "spec_verify_ct", mw)
        c.accepted = count(meta, "spec_accept_token_num", mw, 0)
        c.drafted = count(meta, "spec_draft_token_num", mw, 0)
        hist = meta.get("spec_accept_histogram")
        if hist is not None and not isinstance(hist, list):
            raise BadAnswer(f"{mw}.spec_accept_histogram is {_kind(hist)}, expected a list")
        if hist and len(hist) > MAX_POSITIONS + 1:
            raise BadAnswer(f"{mw}.spec_accept_histogram has {len(hist)} bins (at most {MAX_POSITIONS + 1})")
        if hist:
            c.histogram = [as_count(x, f"{mw}.spec_accept_histogram[{i}]", MAX_STEPS) for i, x in enumerate(hist)]
    return drafts(c, mw)
