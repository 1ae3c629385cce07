"""Prompt files: JSONL, one prompt per line, read the same way by ``bench --suite`` and
``parity --prompts-file`` so that both measure the very same prompts.

A line is ``{"prompt": "..."}`` (optionally ``"id"`` and ``"raw": true``: send the text as is,
never through a chat template) or ``{"prompt_ids": [...]}`` (token ids, always raw). Blank
lines are skipped; any other line is an error that names the file and the line.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str
    raw: bool = False  # never templated (a completion-style prompt)
    ids: tuple[int, ...] | None = None  # token ids, used instead of text (always raw)

    @property
    def payload(self) -> str | list[int]:
        return list(self.ids) if self.ids is not None else self.text


def _token_ids(value) -> tuple[int, ...] | None:
    if isinstance(value, list) and value and all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value):
        return tuple(value)
    return None


def read_prompts_jsonl(path: str | Path, option: str = "--suite") -> list[Prompt]:
    """Every prompt in ``path``; ``option`` is the CLI flag that named the file, for the errors.

    Raises:
        UsageError: a missing or undecodable file, a bad line (named by its number), no prompts.
    """
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{option} {p}: no such file (want a .jsonl with one {{\"prompt\": ...}} per line)")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{p}: cannot read it as UTF-8 text ({exc})") from None
    prompts = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{p}:{n}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            obj = {}
        pid = str(obj.get("id", f"{p.stem}-{n}"))
        ids = _token_ids(obj.get("prompt_ids"))
        if ids is not None:
            prompts.append(Prompt(pid, " ".join(map(str, ids)), True, ids))
            continue
        if not isinstance(obj.get("prompt"), str) or not obj["prompt"].strip():
            raise UsageError(f"{p}:{n}: expected an object with a non-empty \"prompt\" string or a "
                             f"\"prompt_ids\" list of token ids, e.g. {{\"prompt\": \"Hello\"}}")
        if "raw" in obj and not isinstance(obj["raw"], bool):
            raise UsageError(f"{p}:{n}: \"raw\" must be true or false")
        prompts.append(Prompt(pid, obj["prompt"], bool(obj.get("raw", False))))
    if not prompts:
        raise UsageError(f"{p}: no prompts (one {{\"prompt\": ...}} object per line)")
    return prompts
