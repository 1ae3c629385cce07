"""Prompt files: JSONL, one prompt per line, read the same way by ``bench --suite`` and
``parity --prompts-file`` so that both measure the very same prompts.

A line is ``{"prompt": "..."}`` (optionally ``"id"`` and ``"raw": true``: send the text as is,
never through a chat template) or ``{"prompt_ids": [...]}`` (token ids, always raw). Blank
lines are skipped; any other line is an error that names the file and the line. Lines end at
``\n`` only (a raw U+2028 inside a prompt is text, not a line break), and every line is parsed by
``loads_bounded``: integers of at most ``MAX_INT_DIGITS`` digits, nesting at most ``MAX_DEPTH``
deep, so a hostile file is one error line, not a traceback. ``bench`` reads its servers' JSON
answers through the same function.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError

MAX_INT_DIGITS = 20   # an int64 with its sign; Python's int() refuses 4,301 digits with a ValueError
MAX_DEPTH = 64        # far beyond any prompt line or server answer; json's C parser recurses per level


def _bounded_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def loads_bounded(text: str) -> object:
    """``json.loads`` with integers of at most ``MAX_INT_DIGITS`` digits and containers nested at
    most ``MAX_DEPTH`` deep.

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``), or over one of the bounds (one-line message).
    """
    try:
        obj = json.loads(text, parse_int=_bounded_int)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None
    if text.count("[") + text.count("{") > MAX_DEPTH:  # only then can it be too deep
        _check_depth(obj)
    return obj


def _check_depth(obj: object) -> None:
    stack = [(obj, 1)] if isinstance(obj, (dict, list)) else []
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        items = node.values() if isinstance(node, dict) else node
        stack.extend((v, depth + 1) for v in items if isinstance(v, (dict, list)))


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
    for n, line in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 and friends are text
        if not line.strip():
            continue
        try:
            obj = loads_bounded(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{p}:{n}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        except ValueError as exc:
            raise UsageError(f"{p}:{n}: not usable JSON ({exc})") from None
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
