"""The red-team suite's one way to run a command as a user would: a whole process, with its exit
code, its peak memory and its wall time measured, and what it left behind checked.

Bounds are generous on purpose (a header bomb blows through them by orders of magnitude); they
catch exhaustion and hangs, they are not timing benchmarks.
"""
from __future__ import annotations

import hashlib
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from tests.conftest import skip_if_missing_package

# The CLI as its console script runs it, without the console script (no PATH lookup).
CLI = [sys.executable, "-c", "from dflash_gguf.cli import main; main()"]
# Linux's ru_maxrss (wait4) also counts the RSS a child had when it was forked: the test
# process's, hundreds of MB late in a whole-suite run. So run_cli's child writes its own peak
# at exit to the file this variable names: VmHWM of the exec'd image, or its children's peak.
_PEAK_FILE = "DFLASH_REDTEAM_PEAK_FILE"
_REPORT_PEAK = (
    "import atexit, os, resource\n"
    "def _peak():\n"
    "    hwm = [int(ln.split()[1]) for ln in open('/proc/self/status') if ln.startswith('VmHWM:')]\n"
    "    with open(os.environ['" + _PEAK_FILE + "'], 'w') as f:\n"
    "        f.write(str(max(hwm + [resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss])))\n"
    "atexit.register(_peak)\n")


@dataclass(frozen=True)
class Run:
    args: tuple[str, ...]
    code: int
    stdout: str
    stderr: str
    peak_rss_mib: float
    wall_s: float

    def __str__(self) -> str:
        return (f"dflash-gguf {' '.join(self.args)} -> exit {self.code}, {self.peak_rss_mib:.0f} MiB, "
                f"{self.wall_s:.2f} s\nstderr: {self.stderr[-2000:]}")


def run_cli(args: Sequence[str | os.PathLike], *, timeout: float = 60, env: dict | None = None,
            cwd: str | os.PathLike | None = None, stdin: int | None = subprocess.DEVNULL,
            address_space_mib: int | None = None, file_size_limit: int | None = None) -> Run:
    """Run ``dflash-gguf ARGS`` in a child process; peak RSS from the child's own rusage (wait4).
    A command that fails for want of an optional package that is not installed skips the test.

    ``address_space_mib`` caps the child's virtual memory (RLIMIT_AS) so a regression fails as a
    MemoryError instead of exhausting the machine; only for commands that load no numba / torch
    (their JIT reserves large address ranges). ``file_size_limit`` (RLIMIT_FSIZE, bytes) makes a
    write past it fail with EFBIG, as a full disk fails with ENOSPC (Python ignores SIGXFSZ)."""
    argv = [CLI[0], "-c", _REPORT_PEAK + CLI[2], *map(str, args)]
    full_env = {**os.environ, **(env or {})}
    full_env.pop("DFLASH_DEBUG", None)
    fd, full_env[_PEAK_FILE] = tempfile.mkstemp(prefix="dflash-peak-")
    os.close(fd)

    def limit() -> None:
        if address_space_mib:
            resource.setrlimit(resource.RLIMIT_AS, (address_space_mib << 20, address_space_mib << 20))
        if file_size_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    t0 = time.monotonic()
    p = _Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env,
                         cwd=cwd, preexec_fn=limit, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"dflash-gguf {' '.join(map(str, args))}: no answer within {timeout} s (hang?)\n"
                             f"stderr: {err.decode(errors='replace')[-2000:]}") from None
    finally:
        peak = _read_peak(full_env[_PEAK_FILE])
    wall = time.monotonic() - t0
    # no report (killed, os._exit): wait4's figure, an upper bound
    rss = peak / 1024 if peak else p.rusage.ru_maxrss / 1024 if p.rusage is not None else float("nan")
    run = Run(tuple(map(str, args)), p.returncode, out.decode(errors="replace"), err.decode(errors="replace"),
              rss, wall)
    if run.code:
        skip_if_missing_package(run.stderr)  # e.g. --target-dir without the [tokenizers] extra
    return run


def _read_peak(path: str) -> int:
    """The KiB the child reported (0 if none), the file removed."""
    try:
        with open(path) as f:
            return int(f.read() or 0)
    except (OSError, ValueError):
        return 0
    finally:
        Path(path).unlink(missing_ok=True)


class _Popen(subprocess.Popen):
    """Popen that reaps with wait4, keeping the child's own rusage: ru_maxrss of that process and
    its waited-for descendants (RUSAGE_CHILDREN would be the maximum over every child so far)."""

    rusage = None

    def _try_wait(self, wait_flags):  # CPython's hook for os.waitpid in Popen.wait / poll
        try:
            pid, sts, ru = os.wait4(self.pid, wait_flags)
        except ChildProcessError:
            return self.pid, 0
        if pid == self.pid:
            self.rusage = ru
        return pid, sts


def assert_one_line_error(run: Run, codes: int | Iterable[int]) -> None:
    """A documented exit code, one ``error:`` line on stderr, no traceback."""
    codes = {codes} if isinstance(codes, int) else set(codes)
    assert run.code in codes, str(run)
    assert "Traceback" not in run.stderr, str(run)
    if run.code != 0:
        lines = [ln for ln in run.stderr.splitlines() if ln.startswith("error:")]
        assert len(lines) == 1, str(run)


def assert_bounded(run: Run, *, rss_mib: float, wall_s: float) -> None:
    assert run.peak_rss_mib <= rss_mib, f"peak RSS {run.peak_rss_mib:.0f} MiB > {rss_mib} MiB\n{run}"
    assert run.wall_s <= wall_s, f"wall {run.wall_s:.1f} s > {wall_s} s\n{run}"


def fingerprint(paths: Iterable[str | os.PathLike]) -> dict[str, tuple]:
    """What a user's files are now (type, size, inode, mode, content digest for regular files)."""
    fp = {}
    for p in map(Path, paths):
        try:
            st = os.lstat(p)
        except (FileNotFoundError, NotADirectoryError):
            fp[str(p)] = ("absent",)
            continue
        digest = None
        if Path(p).is_file() and not Path(p).is_symlink():
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            digest = h.hexdigest()
        fp[str(p)] = (st.st_mode, st.st_ino, st.st_size, digest)
    return fp


def leftovers(directory: str | os.PathLike) -> list[str]:
    """Temp files of ours left in a directory (``.NAME.*.tmp`` and anything ending in .tmp)."""
    return sorted(n for n in os.listdir(directory) if n.endswith(".tmp"))
