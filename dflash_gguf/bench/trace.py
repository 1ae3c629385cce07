"""Per-step acceptance from llama-server's ``LLAMA_TRACE=1`` log.

``timings`` in a response gives only a request's totals (``draft_n``, ``draft_n_accepted``);
the per-step counts behind acceptance per position, the accept-length histogram and drift are
only in the log (tools/server/server-context.cpp, one line per verification step)::

    slot update_slots: id  0 | task 12 | accepted  3/15 draft tokens
    slot update_slots: id  0 | task 12 | accepted  2/15 draft tokens (restore checkpoint)

The second form is a target whose memory cannot drop a partial draft (recurrent / hybrid
layers): the server restores a checkpoint and re-verifies the accepted tokens as a "replay"
draft, and that replay's line (``X/K+1``) is the one it counts: ``X - 1`` accepted, no new
drafted tokens, one verification step. We count the same way, so the sums here equal the
response's ``timings`` (``run`` checks that for every request).

Every request ends with ``print_timings`` ("total time = ..." for the task): its appearance
tells us the task's lines are all written (the log goes through a writer thread, so it can
trail the HTTP response by a moment).

Logs are read in bounded pieces, from their end: a look reads at most ``LOG_READ_MAX`` bytes
(older lines beyond it are skipped), an error message the last ``LOG_TAIL_BYTES``, and only a
regular file is read at all (opened non-blocking, checked after opening), so a FIFO or a device
given as ``--server-log`` can neither hang bench nor feed it forever.
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

LOG_READ_MAX = 4 << 20      # per look: a request's step lines are kilobytes
LOG_TAIL_BYTES = 64 << 10   # for the last lines quoted in an error

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TASK = r"\|\s*task\s+(-?\d{1,18})\s*\|\s*"  # bounded: int() of a 5,000-digit run would raise
_STEP = re.compile(_TASK + r"accepted\s+(\d{1,9})\s*/\s*(\d{1,9})\s+draft tokens(\s*\(restore checkpoint\))?")
_DONE = re.compile(_TASK + r"total time\s*=")


@dataclass
class TaskTrace:
    task: int
    steps: list[tuple[int, int]] = field(default_factory=list)  # (drafted, accepted) per verification step
    done: bool = False
    unreplayed: int = 0  # restore-checkpoint steps whose replay never came (counted as 0 accepted)
    _pending: tuple[int, int] | None = None

    def finish(self) -> None:
        if self._pending is not None:
            self.steps.append((self._pending[0], 0))
            self.unreplayed += 1
            self._pending = None

    @property
    def drafted(self) -> int:
        return sum(d for d, _ in self.steps)

    @property
    def accepted(self) -> int:
        return sum(a for _, a in self.steps)


def parse(text: str) -> dict[int, TaskTrace]:
    """Every task's verification steps in ``text`` (a llama-server log or a part of one), in order."""
    tasks: dict[int, TaskTrace] = {}
    for line in text.splitlines():
        if "| task" not in line:
            continue
        line = _ANSI.sub("", line)
        m = _STEP.search(line)
        if m:
            k, n = int(m.group(2)), int(m.group(3))
            if k > n:  # not a step llama-server could log
                continue
            t = tasks.setdefault(int(m.group(1)), TaskTrace(int(m.group(1))))
            if m.group(4):  # restore checkpoint: drafted n, the replay that follows says what counts
                t.finish()
                t._pending = (n, k)
            elif t._pending is not None:  # the replay of the accepted tokens
                drafted, _ = t._pending
                t._pending = None
                t.steps.append((drafted, min(max(k - 1, 0), drafted)))
            else:
                t.steps.append((n, k))
            continue
        m = _DONE.search(line)
        if m:
            t = tasks.setdefault(int(m.group(1)), TaskTrace(int(m.group(1))))
            t.finish()
            t.done = True
    return tasks


def regular_size(path: str | os.PathLike) -> int:
    """The size of ``path`` if it is a regular file, else 0."""
    try:
        st = os.stat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def read_span(path: str | os.PathLike, offset: int, limit: int) -> bytes:
    """At most ``limit`` bytes of ``path`` from ``offset``; b"" unless it is a readable regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return b""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        os.lseek(fd, max(offset, 0), os.SEEK_SET)
        return os.read(fd, limit)  # a regular file: one read gives what is there, up to the limit
    except OSError:
        return b""
    finally:
        os.close(fd)


def read_tail(path: str | os.PathLike, limit: int = LOG_TAIL_BYTES) -> bytes:
    """The last ``limit`` bytes of ``path`` (a regular file), from a line start when cut."""
    start = max(regular_size(path) - limit, 0)
    data = read_span(path, start, limit)
    return data[data.find(b"\n") + 1:] if start else data


class LogFollower:
    """The lines a growing log gained since the last request was attributed.

    ``lines()`` gives the complete lines past the mark (the last ``LOG_READ_MAX`` bytes of
    them at most); ``advance()`` moves the mark past them once a request has claimed its task,
    so a warm-up or an earlier request whose lines arrive late is never mistaken for the next one.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.offset = 0
        self._seen = 0

    def mark(self) -> None:
        """Start from the log's current end (the start-up lines are nobody's request)."""
        self.offset, self._seen = regular_size(self.path), 0

    def lines(self) -> str:
        size = regular_size(self.path)
        if size < self.offset:  # truncated or replaced: start over
            self.offset = 0
        skip = size - self.offset > LOG_READ_MAX
        if skip:  # too much since the mark: only the newest part
            self.offset = size - LOG_READ_MAX
        data = read_span(self.path, self.offset, LOG_READ_MAX)
        if skip:  # whose first line is cut
            cut = data.find(b"\n") + 1
            self.offset, data = self.offset + cut, data[cut:]
        self._seen = data.rfind(b"\n") + 1  # a line still being written waits for the next look
        return data[:self._seen].decode("utf-8", errors="replace")

    def advance(self) -> None:
        self.offset += self._seen
        self._seen = 0
