"""Which renderings of the prompts to run: raw text, the target's chat template, or both settings
of its ``enable_thinking`` switch (acceptance differs by about a factor of two between thinking
and not, so a drafter is measured in each)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .client import RequestFailed


@dataclass(frozen=True)
class Mode:
    label: str               # raw | chat | think | no-think
    chat: bool
    thinking: bool | None


def plan_modes(opts, client) -> tuple[list[Mode], list[str]]:
    """(modes, notes) for ``opts`` (a ``BenchOptions``). llama.cpp: a target without a chat
    template gets raw text; with one, the switch is probed by rendering a message with
    ``enable_thinking`` on and off through the server's ``/apply-template``. vLLM: chat unless
    ``--raw``; its template cannot be probed, so ``auto`` sends no switch. SGLang: raw text."""
    raw = [Mode("raw", False, None)]
    if opts.raw:
        return raw, []
    if opts.engine == "sglang":
        note = "SGLang's /generate takes raw text: prompts are sent untemplated (pre-render them in a JSONL suite)"
        return raw, [note] if opts.thinking in ("on", "off", "both") else []
    if opts.engine == "vllm":
        return _thinking_modes(opts.thinking, switch=opts.thinking != "auto"), []
    if opts.target is not None and not _has_template(opts.target):
        return raw, [f"{opts.target.name} has no chat template: prompts are sent raw"]
    if opts.target is None and not client.props().get("chat_template"):
        return raw, ["the server reports no chat template: prompts are sent raw"]
    try:
        on = client.apply_template("ping", True)
        off = client.apply_template("ping", False)
    except RequestFailed as exc:
        return [Mode("chat", True, None)], [f"/apply-template failed ({exc}); thinking switch not probed"]
    notes = []
    if on == off and opts.thinking in ("on", "off", "both"):
        notes.append("the chat template has no enable_thinking switch: --thinking ignored")
    return _thinking_modes(opts.thinking, switch=on != off), notes


def modes_for(suite, modes: list[Mode]) -> list[Mode]:
    """A suite of raw prompts only (token ids, ``"raw": true``) is the same in every mode: run once."""
    if all(p.raw for p in suite.prompts):
        return [Mode("raw", False, None)]
    return modes


def _thinking_modes(thinking: str, switch: bool) -> list[Mode]:
    if not switch:
        return [Mode("chat", True, None)]
    return {"on": [Mode("think", True, True)], "off": [Mode("no-think", True, False)],
            "both": [Mode("think", True, True), Mode("no-think", True, False)],
            "auto": [Mode("think", True, True), Mode("no-think", True, False)]}[thinking]


def _has_template(target: Path) -> bool:
    from ..fileio.gguf_header import read_header

    return bool(read_header(target).get("tokenizer.chat_template"))
