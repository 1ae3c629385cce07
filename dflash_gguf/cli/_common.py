"""Output helpers shared by the command modules: the only place that talks to the terminal.

stdout carries results (tables, JSON); stderr carries errors, warnings and progress, so
``--json`` output stays parseable.
"""
from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from rich.console import Console
from rich.markup import escape

out = Console(highlight=False, soft_wrap=True)
if not out.is_terminal:  # piped / CI: rich would wrap tables at 80 columns
    out = Console(highlight=False, soft_wrap=True, width=200)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def esc(value: Any) -> str:
    """Untrusted text (a path, a key, a tensor name from a file) for a rich markup string or a
    table cell: a name like '[/]' would otherwise be parsed as markup (and crash rendering)."""
    return escape(str(value))


def error_line(exc: BaseException) -> None:
    """The one ``error:`` line on stderr. Control characters are escaped: a corrupt key or name
    inside the message must not break the one-line contract."""
    from ..fileio.header_records import show

    err.print(f"error: {show(str(exc), limit=1 << 20)}", markup=False)


def print_json(obj: Any) -> None:
    """Write one JSON document to stdout (plain print: rich would re-wrap long lines)."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")
    sys.stdout.flush()


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
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n: progress.advance(task, n)
