"""``bench``'s options, and every check of their values, made before anything starts: a bad
flag is one line and exit 2 (``UsageError``), never a traceback halfway through a run."""
from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from . import memory
from .client import ENGINES
from .transport import parse_url

MAX_TIMEOUT_S = 7 * 86400.0  # a socket timeout must fit the platform's time_t arithmetic


@dataclass
class BenchOptions:
    target: Path | None = None
    drafters: tuple[Path, ...] = ()
    server_bin: Path | None = None             # resolved llama-server (launch mode)
    servers: tuple[tuple[str, str], ...] = ()  # (name, url) of running servers (--server)
    baseline_server: str | None = None         # URL of a running no-draft server
    server_log: Path | None = None             # the running llama-server's LLAMA_TRACE log
    engine: str = "llama.cpp"
    suites: tuple[str, ...] = ("chat",)
    limit: int | None = None
    runs: int = 1
    n_predict: int = 128
    temperature: float = 0.0
    seed: int = 0
    ignore_eos: bool = False
    thinking: str = "auto"                     # auto | on | off | both
    raw: bool = False                          # never apply a chat template
    baseline: bool = True
    max_memory_gib: float | None = None        # None: the default share of MemAvailable
    server_args: tuple[str, ...] = ()
    port: int | None = None
    ctx_size: int | None = None
    threads: int | None = None
    draft_max: int | None = None               # None: the drafter's whole block (llama-server's default is 3)
    warmup: int = 1
    startup_timeout: float = 300.0
    request_timeout: float = 600.0

    @property
    def launching(self) -> bool:
        return not self.servers and self.baseline_server is None


def validate(opts: BenchOptions) -> None:
    """Every option's value and their combinations.

    Raises:
        UsageError: naming the flag and the value.
    """
    for flag, v, least in (("--runs", opts.runs, 1), ("--n-predict", opts.n_predict, 1),
                           ("--draft-max", opts.draft_max, 1), ("--limit", opts.limit, 1),
                           ("--ctx-size", opts.ctx_size, 1), ("--threads", opts.threads, 1),
                           ("--warmup", opts.warmup, 0), ("--port", opts.port, 1)):
        if v is not None and v < least:
            raise UsageError(f"{flag} {v}: must be at least {least}")
    if opts.port is not None and opts.port > 65535:
        raise UsageError(f"--port {opts.port}: a TCP port is 1-65535")
    for flag, v in (("--startup-timeout", opts.startup_timeout), ("--request-timeout", opts.request_timeout)):
        if not (math.isfinite(v) and 0 < v <= MAX_TIMEOUT_S):
            raise UsageError(f"{flag} {v}: give seconds, more than 0 and at most {MAX_TIMEOUT_S:.0f}")
    if not (math.isfinite(opts.temperature) and opts.temperature >= 0):
        raise UsageError(f"--temperature {opts.temperature}: give a finite number ≥ 0 (0 = greedy)")
    if opts.max_memory_gib is not None:
        memory.check_limit_gib(opts.max_memory_gib)
    if opts.thinking not in ("auto", "on", "off", "both"):
        raise UsageError(f"--thinking {opts.thinking!r}: choose auto, on, off or both")
    if opts.engine not in ENGINES:
        raise UsageError(f"--engine {opts.engine!r}: choose {', '.join(ENGINES)}")
    for flag, url in [*(("--server", u) for _, u in opts.servers), ("--baseline-server", opts.baseline_server)]:
        if url is not None:
            try:
                parse_url(url)
            except ValueError as exc:
                raise UsageError(f"{flag} {url!r}: {exc}") from None
    if opts.server_log is not None:
        _check_server_log(opts.server_log)
    if opts.launching:
        if opts.engine != "llama.cpp":
            raise UsageError(f"--engine {opts.engine}: bench launches llama-server only; point --server at a running "
                             f"{opts.engine} endpoint instead")
        if opts.target is None:
            raise UsageError("give --target T.gguf (bench launches llama-server), or --server URL for a running server")
        if not opts.drafters and not opts.baseline:
            raise UsageError("nothing to run: give --drafter D.gguf, or drop --no-baseline")
    elif opts.drafters or opts.target is not None:
        raise UsageError("--server measures the model its server already loaded: drop --target/--drafter, "
                         "or drop --server to let bench launch llama-server")


def _check_server_log(path: Path) -> None:
    """A regular file (the server's ``--log-file``): a FIFO would block, a device never end."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise UsageError(f"--server-log {path}: {exc.strerror or exc}; give the file the server logs to "
                         "(LLAMA_TRACE=1 llama-server ... --log-file FILE)") from None
    if not stat.S_ISREG(mode):
        raise UsageError(f"--server-log {path}: not a regular file; give the file the server logs to "
                         "(--log-file FILE)")


def memory_limit(opts: BenchOptions) -> tuple[float | None, str]:
    if opts.max_memory_gib is not None:
        return opts.max_memory_gib * memory.GIB, "--max-memory"
    return memory.default_limit()


def settings(opts: BenchOptions, limit: float | None, how: str) -> dict[str, Any]:
    return {
        "engine": opts.engine, "target": None if opts.target is None else str(opts.target),
        "drafters": [str(d) for d in opts.drafters], "server_bin": None if opts.server_bin is None else str(opts.server_bin),
        "servers": [{"name": n, "url": u} for n, u in opts.servers], "baseline_server": opts.baseline_server,
        "suites": list(opts.suites), "limit": opts.limit, "runs": opts.runs, "n_predict": opts.n_predict,
        "temperature": opts.temperature, "seed": opts.seed, "ignore_eos": opts.ignore_eos,
        "thinking": opts.thinking, "raw": opts.raw, "ctx_size": opts.ctx_size, "threads": opts.threads,
        "server_args": list(opts.server_args), "draft_max": opts.draft_max, "warmup": opts.warmup,
        "max_memory_bytes": limit if limit is None or math.isfinite(limit) else None,  # JSON has no Infinity
        "max_memory_from": how,
    }
