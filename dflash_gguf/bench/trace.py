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
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TASK = r"\|\s*task\s+(-?\d+)\s*\|\s*"
_STEP = re.compile(_TASK + r"accepted\s+(\d+)\s*/\s*(\d+)\s+draft tokens(\s*\(restore checkpoint\))?")
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
            t = tasks.setdefault(int(m.group(1)), TaskTrace(int(m.group(1))))
            k, n = int(m.group(2)), int(m.group(3))
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


class LogFollower:
    """The lines a growing log gained since the last request was attributed.

    ``read(offset)`` returns the log's bytes from ``offset``. ``lines()`` gives the complete
    lines past the mark; ``advance()`` moves the mark past them once a request has claimed its
    task, so a warm-up or an earlier request whose lines arrive late is never mistaken for the
    next one.
    """

    def __init__(self, read, size) -> None:
        self._read, self._size = read, size
        self.offset = 0
        self._seen = 0

    def mark(self) -> None:
        """Start from the log's current end (the start-up lines are nobody's request)."""
        self.offset, self._seen = self._size(), 0

    def lines(self) -> str:
        data = self._read(self.offset)
        self._seen = data.rfind(b"\n") + 1  # a line still being written waits for the next look
        return data[:self._seen].decode("utf-8", errors="replace")

    def advance(self) -> None:
        self.offset += self._seen
        self._seen = 0
