"""Prompts as token ids: text through the target's tokenizer, or a JSONL prompts file."""
from __future__ import annotations

from pathlib import Path

from .._lazy import require
from ..errors import UsageError
from ..fileio.prompts_jsonl import read_prompts_jsonl


def tokenize(text: str, target: str | Path, tokenizer_dir: str | Path | None = None) -> list[int]:
    """Tokenize with the target's tokenizer (HF tokenizer.json via ``tokenizers``, or
    tokenizer.model via ``sentencepiece``), without special tokens."""
    d = Path(tokenizer_dir or target)
    if not d.is_dir():
        raise UsageError(f"--prompt needs a tokenizer: {d} is not a directory; pass --tokenizer-dir or --prompt-ids")
    if (d / "tokenizer.json").is_file():
        Tokenizer = require("tokenizers", "--prompt", "tokenizers").Tokenizer
        return list(Tokenizer.from_file(str(d / "tokenizer.json")).encode(text, add_special_tokens=False).ids)
    if (d / "tokenizer.model").is_file():
        spm = require("sentencepiece", "--prompt", "tokenizers")
        return list(spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model")).encode(text))
    raise UsageError(f"{d}: no tokenizer.json or tokenizer.model; pass --prompt-ids instead")


def read_prompts_file(path: str | Path, target: str | Path, tokenizer_dir: str | Path | None = None) -> list[list[int]]:
    """Token ids of every prompt in a JSONL prompts file (the format ``bench --suite`` reads):
    ``prompt_ids`` as they are, ``prompt`` text through the target's tokenizer. Parity never
    applies a chat template, so ``raw`` changes nothing here."""
    return [list(pr.ids) if pr.ids is not None else tokenize(pr.text, target, tokenizer_dir)
            for pr in read_prompts_jsonl(path, "--prompts-file")]
