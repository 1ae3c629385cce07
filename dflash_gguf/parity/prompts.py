"""Prompts as token ids: text through the target's tokenizer, or a JSONL prompts file."""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import UsageError


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
