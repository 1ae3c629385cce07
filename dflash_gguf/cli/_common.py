"""Output helpers shared by the command modules: the only place that talks to the terminal.

stdout carries results (tables, JSON); stderr carries errors, warnings and progress, so
``--json`` output stays parseable.
"""
from __future__ import annotations

import functools
import json
import os
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator

# rich's Text drops these (bell, backspace, vertical tab, form feed, carriage return); the plain
# path drops them too, so a carriage return in a path cannot overwrite the line it is on.
_CONTROL = dict.fromkeys((7, 8, 11, 12, 13))


class _Stream:
    """stdout or stderr: rich's Console, made the first time a command needs it.

    Importing rich costs ~25 ms, a tenth of a whole `convert` at a real drafter's size, so plain
    lines (``markup=False``, no style) sent to a pipe or a file are written directly, exactly as
    the Console would write them there; everything else, and everything on a terminal or where
    the environment forces one (FORCE_COLOR, TTY_COMPATIBLE), goes through rich. Emoji codes are
    off: a path like ``/m/:fire:/x.gguf`` is printed as it is.
    """

    def __init__(self, stderr: bool) -> None:
        self.stderr = stderr
        self._console = None

    @property
    def file(self):
        return sys.stderr if self.stderr else sys.stdout  # looked up per call: capture swaps it

    @property
    def console(self):
        if self._console is None:
            Console = console_class()
            c = Console(stderr=self.stderr, highlight=False, soft_wrap=True, emoji=False)
            if not self.stderr and not c.is_terminal:  # piped / CI: rich would wrap tables at 80 columns
                c = Console(highlight=False, soft_wrap=True, emoji=False, width=200)
            self._console = c
        return self._console

    @property
    def is_terminal(self) -> bool:
        if self._surely_piped():
            return False
        return self.console.is_terminal

    def _surely_piped(self) -> bool:
        if "FORCE_COLOR" in os.environ or "TTY_COMPATIBLE" in os.environ:
            return False  # rich's own rules decide
        try:
            return not self.file.isatty()
        except (AttributeError, ValueError):  # no isatty, or closed: rich says "not a terminal" too
            return True

    def print(self, *objects: Any, markup: bool | None = None, style: str | None = None, **kw: Any) -> None:
        if (markup is False and style is None and not kw and len(objects) == 1 and isinstance(objects[0], str)
                and self._surely_piped()):
            write(objects[0].translate(_CONTROL) + "\n", self.file, flush=False)
            return
        self.console.print(*objects, markup=markup, style=style, **kw)

    def lead(self, word: str, style: str, rest: str) -> None:
        """One line, ``word`` styled on a terminal, ``rest`` (untrusted text) never parsed as markup."""
        if self._surely_piped():
            self.print(f"{word} {rest}", markup=False)
        else:
            self.console.print(f"[{style}]{word}[/{style}] {esc(rest)}")


def discard(stream: Any) -> None:
    """The reader of ``stream`` (stdout, mostly) went away: ``inspect … | head -1`` has what it
    asked for. Point the stream's descriptor at /dev/null, so that what is still to be written
    (and the interpreter's last flush) succeeds unseen and the command runs on to its own exit
    code: a ``check`` verdict still fails a CI pipeline. Not a real file (captured): nothing to do."""
    try:
        fd = stream.fileno()
    except (AttributeError, ValueError, OSError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def write(text: str, stream: Any = None, flush: bool = True) -> None:
    """Plain text to ``stream`` (default stdout); a closed pipe is ``discard``ed."""
    stream = sys.stdout if stream is None else stream
    try:
        stream.write(text)
        if flush:
            stream.flush()
    except BrokenPipeError:
        discard(stream)


@functools.cache
def console_class():
    """rich's Console, except that a closed pipe is ``discard``ed: rich itself exits 1 there."""
    from rich.console import Console

    class QuietOnClosedPipe(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            discard(self.file)

    return QuietOnClosedPipe


out = _Stream(stderr=False)
err = _Stream(stderr=True)


def esc(value: Any) -> str:
    """Untrusted text (a path, a key, a tensor name from a file) for a rich markup string or a
    table cell: a name like '[/]' would otherwise be parsed as markup (and crash rendering)."""
    from rich.markup import escape

    return escape(str(value))


def error_line(exc: BaseException | str) -> None:
    """The one ``error:`` line on stderr. Control characters are escaped: a corrupt key or name
    inside the message must not break the one-line contract."""
    from ..fileio.header_records import show

    err.print(f"error: {show(str(exc), limit=1 << 20)}", markup=False)


def finding_line(f: Any, with_file: bool = False) -> str:
    """A guard finding as ``check`` lists it (``with_file``: which file it is about, for a command
    whose findings span several files)."""
    where = f"  [{f.where}]" if f.where else ""
    file = f"  ({os.path.basename(f.file)})" if with_file and f.file else ""
    return f"  {f.severity.value:<7}  {f.code}: {f.message}{where}{file}"


def print_json(obj: Any) -> None:
    """Write one JSON document to stdout (plain print: rich would re-wrap long lines)."""
    write(json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def write_report(path: Any, doc: Any, inputs: Any) -> None:
    """A ``--report PATH`` JSON file, published by ``fileio.outputs``, which refuses to replace any
    of the command's ``inputs``."""
    from ..fileio.outputs import write_text

    write_text(path, json.dumps(doc, indent=2, sort_keys=False, default=_json_default) + "\n", inputs=inputs)


def _json_default(o: Any) -> Any:
    import dataclasses
    import enum
    from pathlib import Path

    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    if isinstance(o, enum.Enum):
        return o.name
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "tolist"):  # numpy scalars and arrays
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/yellow] {message}", markup=True)


def note(message: str) -> None:
    err.print(message, markup=False)


def note_stale(written: Any) -> None:
    """A written output's clean-up of earlier, killed runs (``WriteReport.stale_removed``)."""
    for p in getattr(written, "stale_removed", ()):
        note(f"note: removed a temp file left by an interrupted run: {p}")


@contextmanager
def byte_progress(total: int, description: str, enabled: bool = True) -> Iterator[Callable[[int], None]]:
    """A rich progress bar over bytes; yields ``advance(n_bytes)``.

    Disabled (a no-op callback) when asked, or when stderr is not a terminal, so CI logs
    and ``--json`` runs stay clean.
    """
    if not enabled or not err.is_terminal or total <= 0:
        yield lambda n: None
        return
    # here: only a long run on a terminal draws a bar (rich.progress costs ~10 ms to import)
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err.console, transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n: progress.advance(task, n)
