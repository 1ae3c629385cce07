"""Reading a target's Hugging Face JSON files, failing with one-line TargetErrors."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import TargetError

# Every refusal on the HF-dir path ends with this: the target's GGUF is always an exact copy.
HINT = "pass --target-gguf T.gguf (the target converted by llama.cpp) instead"


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TargetError(f"{path}: not readable JSON ({exc}); re-download the target's files, or {HINT}") from None


def tokenizer_config(d: Path) -> dict | None:
    """``tokenizer_config.json`` of ``d`` (a fresh copy per call), or None when there is none."""
    p = d / "tokenizer_config.json"
    if not p.is_file():
        return None
    cfg = read_json(p)
    if not isinstance(cfg, dict):
        raise TargetError(f"{p}: top level is not a JSON object; re-download it, or {HINT}")
    return cfg
