"""Talk to an inference server over HTTP (stdlib only) and read what it counted per request.

* llama.cpp (``llama-server``): ``POST /completion``; its ``timings`` carry the request's
  decode time and, when it drafted, ``draft_n`` / ``draft_n_accepted``. Chat prompts are
  rendered by the server's own template (``POST /apply-template`` with
  ``chat_template_kwargs.enable_thinking``), then sent as text, so every mode goes through
  the same endpoint and the same ``timings``.
* vLLM: ``POST /v1/completions`` (raw) or ``/v1/chat/completions`` (with
  ``chat_template_kwargs``), and the Prometheus counters of ``GET /metrics`` read before and
  after each request: ``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``,
  ``..._num_accepted_tokens_total`` and ``..._num_accepted_tokens_per_pos_total{position="i"}``
  (vllm/v1/spec_decode/metrics.py). The deltas are this request's only when nothing else
  uses the server meanwhile.
* SGLang: ``POST /generate`` whose ``meta_info`` has ``spec_verify_ct``,
  ``spec_accept_token_num``, ``spec_draft_token_num`` and, in newer versions,
  ``spec_accept_histogram`` (python/sglang/srt/managers/tokenizer_manager.py); raw text only.

For vLLM and SGLang tokens/s is end to end (prompt included): they report no decode time.
"""
from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

ENGINES = ("llama.cpp", "vllm", "sglang")


class RequestFailed(Exception):
    """An HTTP exchange failed; ``lost`` when the connection broke (the server may have died)."""

    def __init__(self, message: str, lost: bool = False) -> None:
        super().__init__(message)
        self.lost = lost


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


def call(url: str, path: str, body: dict | None = None, timeout: float = 600.0, raw: bool = False) -> Any:
    """GET (no body) or POST JSON; the decoded JSON answer (text with ``raw``).

    Raises:
        RequestFailed: HTTP error status (with the server's message), broken connection or timeout.
    """
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url.rstrip("/") + path, data=data, method="GET" if body is None else "POST",
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            payload = r.read()
    except urllib.error.HTTPError as exc:
        msg = _error_message(exc.read())
        exc.close()
        raise RequestFailed(f"{req.method} {path}: HTTP {exc.code}: {msg}") from None
    except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise RequestFailed(f"{req.method} {path}: {reason or type(exc).__name__}", lost=True) from None
    if raw:
        return payload.decode("utf-8", errors="replace")
    try:
        return json.loads(payload)
    except json.JSONDecodeError:
        raise RequestFailed(f"{req.method} {path}: the answer is not JSON: {payload[:120]!r}") from None


def _error_message(payload: bytes) -> str:
    try:
        err = json.loads(payload).get("error", {})
        if isinstance(err, dict):
            return str(err.get("message") or err)[:300]
        return str(err)[:300]
    except (json.JSONDecodeError, AttributeError):
        return payload.decode("utf-8", errors="replace").strip()[:300] or "(empty body)"


# --- llama.cpp ------------------------------------------------------------------------------

class LlamaCppClient:
    engine = "llama.cpp"

    def __init__(self, url: str, timeout: float = 600.0) -> None:
        self.url, self.timeout = url, timeout

    def props(self) -> dict[str, Any]:
        try:
            return call(self.url, "/props", timeout=30)
        except RequestFailed:
            return {}

    def apply_template(self, user: str, thinking: bool | None) -> str:
        body: dict[str, Any] = {"messages": [{"role": "user", "content": user}]}
        if thinking is not None:
            body["chat_template_kwargs"] = {"enable_thinking": thinking}
        return call(self.url, "/apply-template", body, timeout=60)["prompt"]

    def complete(self, prompt: str | list[int], n_predict: int, temperature: float, seed: int,
                 ignore_eos: bool = False, chat: bool = False, thinking: bool | None = None) -> Completion:
        if chat and isinstance(prompt, str):
            prompt = self.apply_template(prompt, thinking)
        # cache_prompt off: every run processes its prompt afresh, so run 2 is not faster than run 1.
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": temperature, "seed": seed,
                "cache_prompt": False, "stream": False, "ignore_eos": ignore_eos}
        t0 = time.perf_counter()
        r = call(self.url, "/completion", body, timeout=self.timeout)
        wall = time.perf_counter() - t0
        t = r.get("timings") or {}
        if "predicted_n" not in t:
            raise RequestFailed("POST /completion: the answer has no timings.predicted_n (not a llama-server?)")
        return Completion(
            text=r.get("content", ""), prompt_n=t.get("prompt_n"), predicted_n=int(t["predicted_n"]),
            decode_s=float(t.get("predicted_ms", 0.0)) / 1000.0, wall_s=wall,
            # no draft_n in timings: nothing was drafted (the server omits zeros)
            drafted=int(t.get("draft_n", 0)), accepted=int(t.get("draft_n_accepted", 0)))


# --- vLLM -----------------------------------------------------------------------------------

VLLM_DRAFTS = "vllm:spec_decode_num_drafts"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
VLLM_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) for every sample of a Prometheus text exposition."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, rest = line.split("{", 1)
            labels_text, _, value_text = rest.rpartition("}")
            labels = dict(_label(p) for p in _split_labels(labels_text))
        else:
            name, _, value_text = line.partition(" ")
            labels = {}
        try:
            out.append((name.strip(), labels, float(value_text.split()[0])))
        except (ValueError, IndexError):
            continue
    return out


def _split_labels(text: str) -> list[str]:
    parts, cur, quoted = [], "", False
    for ch in text:
        if ch == '"' and not cur.endswith("\\"):
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p for p in parts + [cur] if p.strip()]


def _label(part: str) -> tuple[str, str]:
    k, _, v = part.partition("=")
    return k.strip(), v.strip().strip('"')


def vllm_counters(text: str) -> dict[str, Any]:
    """The spec-decode counters summed over engines and models (``_total`` suffix or not)."""
    out: dict[str, Any] = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0, "per_pos": {}, "seen": False}
    keys = {VLLM_DRAFTS: "drafts", VLLM_DRAFT_TOKENS: "draft_tokens", VLLM_ACCEPTED: "accepted"}
    for name, labels, value in parse_prometheus(text):
        base = name[:-6] if name.endswith("_total") else name
        if base in keys:
            out[keys[base]] += value
            out["seen"] = True
        elif base == VLLM_PER_POS and "position" in labels:
            pos = int(labels["position"])
            out["per_pos"][pos] = out["per_pos"].get(pos, 0.0) + value
    return out


class VllmClient:
    engine = "vllm"

    def __init__(self, url: str, timeout: float = 600.0) -> None:
        self.url, self.timeout = url, timeout
        self._model: str | None = None

    def model(self) -> str:
        if self._model is None:
            data = call(self.url, "/v1/models", timeout=30).get("data") or []
            if not data:
                raise RequestFailed("GET /v1/models: the server lists no model")
            self._model = data[0]["id"]
        return self._model

    def counters(self) -> dict[str, Any]:
        return vllm_counters(call(self.url, "/metrics", timeout=30, raw=True))

    def complete(self, prompt: str | list[int], n_predict: int, temperature: float, seed: int,
                 ignore_eos: bool = False, chat: bool = False, thinking: bool | None = None) -> Completion:
        chat = chat and isinstance(prompt, str)
        common = {"model": self.model(), "max_tokens": n_predict, "temperature": temperature, "seed": seed,
                  "ignore_eos": ignore_eos, "stream": False}
        if chat:
            path, body = "/v1/chat/completions", {**common, "messages": [{"role": "user", "content": prompt}]}
            if thinking is not None:
                body["chat_template_kwargs"] = {"enable_thinking": thinking}
        else:
            path, body = "/v1/completions", {**common, "prompt": prompt}
        before = self.counters()
        t0 = time.perf_counter()
        r = call(self.url, path, body, timeout=self.timeout)
        wall = time.perf_counter() - t0
        after = self.counters()
        usage = r.get("usage") or {}
        choice = (r.get("choices") or [{}])[0]
        text = choice.get("text") if not chat else (choice.get("message") or {}).get("content")
        c = Completion(text=text or "", prompt_n=usage.get("prompt_tokens"),
                       predicted_n=int(usage.get("completion_tokens", 0)), decode_s=None, wall_s=wall)
        if after["seen"]:
            c.verify_steps = round(after["drafts"] - before["drafts"])
            c.drafted = round(after["draft_tokens"] - before["draft_tokens"])
            c.accepted = round(after["accepted"] - before["accepted"])
            if after["per_pos"]:
                n = max(after["per_pos"]) + 1
                c.per_position = [round(after["per_pos"].get(i, 0.0) - before["per_pos"].get(i, 0.0))
                                  for i in range(n)]
        return c


# --- SGLang ---------------------------------------------------------------------------------

class SglangClient:
    engine = "sglang"

    def __init__(self, url: str, timeout: float = 600.0) -> None:
        self.url, self.timeout = url, timeout

    def complete(self, prompt: str | list[int], n_predict: int, temperature: float, seed: int,
                 ignore_eos: bool = False, chat: bool = False, thinking: bool | None = None) -> Completion:
        params: dict[str, Any] = {"temperature": temperature, "max_new_tokens": n_predict, "ignore_eos": ignore_eos}
        if temperature > 0:
            params["sampling_seed"] = seed
        t0 = time.perf_counter()
        body = {"input_ids" if isinstance(prompt, list) else "text": prompt, "sampling_params": params}
        r = call(self.url, "/generate", body, timeout=self.timeout)
        wall = time.perf_counter() - t0
        if isinstance(r, list):
            r = r[0]
        meta = r.get("meta_info") or {}
        c = Completion(text=r.get("text", ""), prompt_n=meta.get("prompt_tokens"),
                       predicted_n=int(meta.get("completion_tokens", 0)), decode_s=None,
                       wall_s=float(meta.get("e2e_latency") or wall))
        if "spec_verify_ct" in meta:
            c.verify_steps = int(meta["spec_verify_ct"])
            c.accepted = int(meta.get("spec_accept_token_num", 0))
            c.drafted = int(meta.get("spec_draft_token_num", 0))
            hist = meta.get("spec_accept_histogram")
            if isinstance(hist, list) and hist:
                c.histogram = [int(x) for x in hist]
        return c


def client_for(engine: str, url: str, timeout: float = 600.0):
    return {"llama.cpp": LlamaCppClient, "vllm": VllmClient, "sglang": SglangClient}[engine](url, timeout)
