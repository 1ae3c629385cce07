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
The wire is ``transport`` (a deadline per request, a cap on the body); what each answer must
hold is ``schema`` (any other answer is a ``RequestFailed``, one line).
"""
from __future__ import annotations

import time
from typing import Any

from . import schema
from .schema import Completion, parse_prometheus, vllm_counters  # noqa: F401 - re-exported
from .transport import RequestFailed, fetch

ENGINES = ("llama.cpp", "vllm", "sglang")


def call(url: str, path: str, body: dict | None = None, timeout: float = 600.0, raw: bool = False) -> Any:
    """GET (no body) or POST JSON; the decoded JSON answer (strict UTF-8 text with ``raw``).

    Raises:
        RequestFailed: HTTP error status (with the server's message), broken connection, the
            deadline, a body over ``transport.MAX_BODY_BYTES``, or an answer that is not UTF-8 /
            bounded JSON (``schema.BadAnswer``).
    """
    payload = fetch(url, path, body, timeout)
    what = f"{'GET' if body is None else 'POST'} {path}"
    return schema.decode_text(payload, what) if raw else schema.decode_json(payload, what)


def _timed(url: str, path: str, body: dict, timeout: float) -> tuple[Any, float]:
    t0 = time.perf_counter()
    r = call(url, path, body, timeout=timeout)
    return r, time.perf_counter() - t0


# --- llama.cpp ------------------------------------------------------------------------------

class LlamaCppClient:
    engine = "llama.cpp"

    def __init__(self, url: str, timeout: float = 600.0) -> None:
        self.url, self.timeout = url, timeout

    def props(self) -> dict[str, Any]:
        """``/props`` (empty when the server has none); an answer of the wrong shape raises."""
        try:
            r = call(self.url, "/props", timeout=min(30.0, self.timeout))
        except schema.BadAnswer:
            raise
        except RequestFailed:
            return {}
        return schema.llama_props(r)

    def apply_template(self, user: str, thinking: bool | None) -> str:
        body: dict[str, Any] = {"messages": [{"role": "user", "content": user}]}
        if thinking is not None:
            body["chat_template_kwargs"] = {"enable_thinking": thinking}
        return schema.llama_template(call(self.url, "/apply-template", body, timeout=min(60.0, self.timeout)))

    def complete(self, prompt: str | list[int], n_predict: int, temperature: float, seed: int,
                 ignore_eos: bool = False, chat: bool = False, thinking: bool | None = None) -> Completion:
        if chat and isinstance(prompt, str):
            prompt = self.apply_template(prompt, thinking)
        # cache_prompt off: every run processes its prompt afresh, so run 2 is not faster than run 1.
        body = {"prompt": prompt, "n_predict": n_predict, "temperature": temperature, "seed": seed,
                "cache_prompt": False, "stream": False, "ignore_eos": ignore_eos}
        return schema.llama_completion(*_timed(self.url, "/completion", body, self.timeout))


# --- vLLM -----------------------------------------------------------------------------------

class VllmClient:
    engine = "vllm"

    def __init__(self, url: str, timeout: float = 600.0) -> None:
        self.url, self.timeout = url, timeout
        self._model: str | None = None

    def model(self) -> str:
        if self._model is None:
            self._model = schema.vllm_model(call(self.url, "/v1/models", timeout=min(30.0, self.timeout)))
        return self._model

    def counters(self) -> dict[str, Any]:
        return vllm_counters(call(self.url, "/metrics", timeout=min(30.0, self.timeout), raw=True))

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
        r, wall = _timed(self.url, path, body, self.timeout)
        c = schema.vllm_completion(r, chat, wall)
        return schema.vllm_delta(c, before, self.counters(), f"POST {path}")


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
        body = {"input_ids" if isinstance(prompt, list) else "text": prompt, "sampling_params": params}
        return schema.sglang_generate(*_timed(self.url, "/generate", body, self.timeout))


def client_for(engine: str, url: str, timeout: float = 600.0):
    return {"llama.cpp": LlamaCppClient, "vllm": VllmClient, "sglang": SglangClient}[engine](url, timeout)
