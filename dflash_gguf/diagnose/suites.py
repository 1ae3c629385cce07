"""Prompt sets from ``bench``'s suites (``--suite chat``, ``code``, ``maths``, ``humaneval``, or a
JSONL file): the same prompts bench sends, as token ids through the target's tokenizer, the way
parity reads a prompts file (text as is, no chat template: every stage sees the same ids)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..errors import UsageError


def suite_prompts(specs: Sequence[str], target: str | Path, tokenizer_dir: str | Path | None,
                  limit: int | None = None) -> list[tuple[str, list[list[int]]]]:
    """(name, token ids) of each suite, the first ``limit`` prompts of each when given; names
    made unique (two suites named alike keep their spec).

    Raises:
        UsageError: an unknown suite or a bad file (bench's messages), text prompts and no
            tokenizer directory, ``limit`` < 1.
    """
    from ..bench.suites import load_suite
    from ..parity.prompts import tokenize

    if limit is not None and limit < 1:
        raise UsageError(f"--limit {limit}: must be at least 1")
    tok = Path(tokenizer_dir or target)
    out = []
    for spec in specs:
        s = load_suite(spec, limit)
        if any(p.ids is None for p in s.prompts) and not tok.is_dir():
            raise UsageError(f"--suite {spec}: its prompts are text, tokenized with the target's tokenizer, and {tok} "
                             "is not a directory: pass --tokenizer-dir")
        out.append((s.name, [list(p.ids) if p.ids is not None else tokenize(p.text, target, tokenizer_dir)
                             for p in s.prompts]))
    names = [n for n, _ in out]
    return [(spec if names.count(n) > 1 else n, ids) for spec, (n, ids) in zip(specs, out)]
