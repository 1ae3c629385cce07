"""Command-line entry point: parse, call one library function, render.

Every command module registers itself on ``app`` at import; ``main`` imports only the one the
command line names (``COMMANDS``). Each imports its library code (and rich's tables, progress
bars) inside the command function, and the header-only commands (check, check-instruct,
inspect, version, --help) never import numpy, gguf-py, safetensors or torch
(tests/cli/test_startup.py; benchmarks/bench_checks.py times them). ``main`` maps library errors to
one line on stderr and the class's exit code (docs/exit-codes.md); set DFLASH_DEBUG=1 to see
the traceback instead. A stdout closed by its reader (``| head``) is not an error (``_common.discard``).
"""
from __future__ import annotations

import gc
import importlib
import os
import select
import signal
import sys
import threading

import typer

from ..errors import EXIT_OK, DflashError, Interrupted, UsageError
from ._app import app
from ._common import discard, err, error_line, write

# Command groups, one module each, and the commands each registers. Only the invoked command's
# module is imported: typer builds a click command, evaluating every annotation, for each
# registered command on every run (~35 ms for all of them). --help, an unknown command or no
# command imports them all. tests/cli/test_app.py checks this table against the registrations.
COMMANDS = {
    "convert": ("convert",),
    "retarget": ("retarget",),
    "inspect": ("inspect",),
    "quantize": ("quantize",),
    "kernels": ("kernels",),
    "checks": ("check-instruct", "check"),
    "compare": ("compare-weights",),
    "parity": ("parity",),
    "bench": ("bench",),
    "gate": ("gate",),
    "diagnose": ("diagnose",),
}
_MODULE_OF = {cmd: mod for mod, cmds in COMMANDS.items() for cmd in cmds}


def _register(args: list[str]) -> None:
    """Import the command module(s) the arguments need (see COMMANDS)."""
    first = next((a for a in args if not a.startswith("-")), None)
    version = first == "version" or (first is None and bool({"--version", "-V"} & set(args)))
    wanted = [_MODULE_OF[first]] if first in _MODULE_OF else [] if version else list(COMMANDS)
    for name in wanted:
        importlib.import_module(f"{__name__}.{name}")


# Commands whose --json took a path before 0.2 (docs/ci.md, "Migrating"); they take no positional
# argument, so a word after --json can only be that old path.
_JSON_WAS_A_PATH = ("parity", "bench")


def _legacy_json(args: list[str]) -> None:
    """``parity --json r.json``: say what it is now, instead of typer's "unexpected extra argument"."""
    first = next((a for a in args if not a.startswith("-")), None)
    if first not in _JSON_WAS_A_PATH:
        return
    for i, a in enumerate(args):
        value = a.partition("=")[2] if a.startswith("--json=") else (
            args[i + 1] if a == "--json" and i + 1 < len(args) and (args[i + 1] == "-" or not args[i + 1].startswith("-"))
            else None)
        if value:
            raise UsageError(f"{first} --json {value}: --json takes no value now (it prints JSON on stdout, as in "
                             f"every command); to write a file use --report {value if value != '-' else 'FILE.json'}")


_signal_name = "Ctrl-C"  # what interrupted the run, for its one line


def _as_interrupt(signum, frame) -> None:
    # SIGTERM (kill, a CI runner's timeout) and SIGHUP (a closed terminal) unwind like Ctrl-C, so
    # every ``with`` on the way out runs: partial outputs are removed, servers and workers stopped.
    global _signal_name
    _signal_name = signal.Signals(signum).name
    raise KeyboardInterrupt(_signal_name)


def _interrupted_line() -> None:
    err.print(f"error: {Interrupted.__doc__.replace('Ctrl-C', _signal_name)}", markup=False)


def _interrupts_from_signals() -> None:
    """Turn SIGTERM and SIGHUP into KeyboardInterrupt, where they still have their default action
    (a SIGHUP ignored under nohup stays ignored)."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _as_interrupt)


def _stdout_closed() -> bool:
    """Whether stdout's reader is gone (the descriptor is asked: a BrokenPipeError may come from
    any pipe or socket), or rich already sent stdout to /dev/null for that reason."""
    try:
        fd = sys.stdout.fileno()
        if os.path.samestat(os.fstat(fd), os.stat(os.devnull)):
            return True
        poller = select.poll()
    except (AttributeError, ValueError, OSError):  # not a real file, or no poll(): not a pipe we can ask
        return False
    poller.register(fd, select.POLLOUT)
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns (and, as a console script, exits with) the exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    debug = os.environ.get("DFLASH_DEBUG") == "1"
    if argv is None and threading.current_thread() is threading.main_thread():
        _interrupts_from_signals()
    _register(args)
    try:
        _legacy_json(args)
        result = app(args=args, prog_name="dflash-gguf", standalone_mode=False)
        code = result if isinstance(result, int) else 0
        if code == Interrupted.exit_code:  # typer returns Ctrl-C as a bare 130 (no command returns it)
            _interrupted_line()
    except DflashError as exc:
        if debug:
            raise
        error_line(exc)
        code = exc.exit_code
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.Abort:
        _interrupted_line()
        code = Interrupted.exit_code
    except typer.TyperException as exc:  # typer's vendored click usage errors (exit 2)
        exc.show(file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        _interrupted_line()
        code = Interrupted.exit_code
    except (BrokenPipeError, SystemExit) as exc:
        # A closed stdout that our own writes did not absorb (cli/_common.py: discard; typer and
        # rich exit 1 there, raising SystemExit while handling the BrokenPipeError). The command
        # stopped part-way, so its own code is unknown. Any other pipe or exit is not ours.
        pipe = exc if isinstance(exc, BrokenPipeError) else exc.__context__
        if not isinstance(pipe, BrokenPipeError) or not _stdout_closed():
            raise
        discard(sys.stdout)
        code = EXIT_OK
    if sys.stdout is not None and not getattr(sys.stdout, "closed", False):
        write("")  # flush what is still buffered here, where a closed pipe is absorbed
    if argv is None:
        # The process ends here. Without this, interpreter shutdown's garbage collections walk
        # every object the run created (numba's and LLVM's graphs once a kernel was loaded):
        # ~0.13 s of a quantize or compare-weights. Frozen objects are skipped; files are closed
        # and outputs renamed by now, and the remaining objects are still freed.
        gc.freeze()
        sys.exit(code)
    return code
