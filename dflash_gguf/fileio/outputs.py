"""Where a command's output may go, and how it gets there: the one place that creates output files.

An output is refused when it is not a regular file (a device such as ``/dev/null``, a FIFO, a
directory: replacing one would take it from everyone), when it is one of the command's inputs
(the same inode: a symlink or a hard link to it counts), and when it exists without ``force``.
It is written to a temp file beside it and published at the end:

- without ``force`` by ``link``, which fails if the name was taken meanwhile, so two runs started
  together cannot both "succeed" (the check before the work is only the early, friendly refusal);
- with ``force`` by ``rename``, after the type check is made again.

Any error, Ctrl-C, SIGTERM or SIGHUP (the CLI turns both into KeyboardInterrupt) removes the temp
file. Its name carries our pid, so a temp file left by a killed run (SIGKILL, a power cut) is
recognised and removed by the next write to the same output once that pid is gone.
"""
from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from ..errors import OutputError, UsageError

# Linux's NAME_MAX (and most file systems'): a longer name fails with ENAMETOOLONG.
NAME_MAX = 255
# The output name's bytes kept in a temp name: ".{name}.{pid}.{8 random}.tmp" stays within
# NAME_MAX for any output name that is itself within it.
_TEMP_NAME_BYTES = 200
# link() is refused on some file systems (FAT, some FUSE and network mounts): publish by rename there.
_NO_LINK = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EMLINK, errno.EXDEV}


@dataclass
class Output:
    """A checked output path; ``stale_removed`` lists the temp files of killed runs that
    ``atomic_output`` removed."""

    path: Path
    force: bool
    stale_removed: list[Path] = field(default_factory=list)


def check_output(path: str | os.PathLike, *, inputs: Iterable[str | os.PathLike | None] = (),
                 force: bool = False, flag: str = "-o") -> Output:
    """Refuse an output path before any work: not a regular file, one of ``inputs`` (files, or
    directories whose files are inputs), an existing file without ``force``, a missing directory
    or a name too long for the file system.

    Raises:
        UsageError: the output is one of the inputs.
        OutputError: every other refusal.
    """
    path = Path(path)
    name_bytes = len(os.fsencode(path.name))
    if not path.name or path.name in (".", ".."):
        raise OutputError(f"{flag} {path}: not a file name; give a path ending in a file name")
    if name_bytes > NAME_MAX:
        raise OutputError(f"{flag} {_short(path)}: the file name is {name_bytes} bytes, file systems allow "
                          f"{NAME_MAX}; choose a shorter name")
    if not path.parent.is_dir():
        raise OutputError(f"{flag} {path}: directory {path.parent} does not exist")
    st = _stat(path)
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(flag, path, st.st_mode)
        if (st.st_dev, st.st_ino) in _identities(inputs):
            raise UsageError(f"{flag} {path}: is one of this command's inputs; choose another output path")
        if not force:
            raise OutputError(f"{flag} {path}: already exists; pass --force to overwrite it")
    return Output(path, force)


@contextmanager
def atomic_output(out: Output, flag: str = "-o") -> Iterator[BinaryIO]:
    """A binary file opened on a temp file beside ``out.path``; published when the body returns,
    removed when it raises (KeyboardInterrupt included). Every OSError is one OutputError."""
    path = out.path
    out.stale_removed += _remove_stale(path)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OutputError(f"{flag} {path}: cannot create a file in {path.parent} ({exc.strerror})") from None
    tmp = Path(tmp_name)
    try:
        with open(fd, "r+b", buffering=0) as f:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; outputs get the usual permissions
            yield f
        _publish(tmp, out, flag)
    except OSError as exc:
        raise OutputError(describe_os_error(exc, path, flag)) from exc
    finally:
        tmp.unlink(missing_ok=True)  # published: the name is already gone (rename) or a second link (link)


def check_report(path: str | os.PathLike, *, inputs: Iterable[str | os.PathLike | None] = (),
                 flag: str = "--report") -> Output | None:
    """Where a report goes: an ``Output`` (replaced whole if it exists, like ``> FILE``), or None
    for a FIFO or a character device (``/dev/stdout``), which are written in place: there the
    reader is the point. Commands call it before their work too, to refuse early."""
    st = _stat(Path(path))
    if st is not None and (stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode)):
        return None
    return check_output(path, inputs=inputs, force=True, flag=flag)


def write_text(path: str | os.PathLike, text: str, *, inputs: Iterable[str | os.PathLike | None] = (),
               flag: str = "--report") -> None:
    """Write a report (``check_report``), never left half-written in a file."""
    path = Path(path)
    data = memoryview(text.encode("utf-8"))
    out = check_report(path, inputs=inputs, flag=flag)
    try:
        with open(path, "wb") if out is None else atomic_output(out, flag) as f:
            while data:
                data = data[f.write(data):]
    except OSError as exc:
        raise OutputError(describe_os_error(exc, path, flag)) from exc


def describe_os_error(exc: OSError, path: Path, flag: str = "-o") -> str:
    """One line for an OSError met while writing ``path`` (or reading an input for it)."""
    name = exc.filename
    where = name if name and Path(name) != path and not str(name).endswith(".tmp") else None  # an input's name
    why = exc.strerror or str(exc)
    if where is not None:
        return f"{flag} {path}: reading {where} failed ({why}); check that file and run again"
    hint = {errno.ENOSPC: "free space or write elsewhere", errno.EDQUOT: "free space or write elsewhere",
            errno.EFBIG: "the file size limit (ulimit -f) or the file system's maximum was reached",
            errno.EROFS: "the file system is read-only; write elsewhere",
            errno.EACCES: "no permission; write elsewhere", errno.EPERM: "not permitted; write elsewhere",
            errno.EIO: "an I/O error; check the disk"}.get(exc.errno, "no output was written")
    return f"{flag} {path}: writing failed ({why}); {hint}"


def _publish(tmp: Path, out: Output, flag: str) -> None:
    if out.force:
        st = _stat(out.path)  # checked again: something may have appeared there during the work
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise _not_regular(flag, out.path, st.st_mode)
        os.replace(tmp, out.path)
        return
    try:
        os.link(tmp, out.path)
    except FileExistsError:
        raise OutputError(f"{flag} {out.path}: created by someone else while we worked; pass --force to "
                          f"overwrite it") from None
    except OSError as exc:
        if exc.errno not in _NO_LINK:
            raise
        if os.path.lexists(out.path):
            raise OutputError(f"{flag} {out.path}: already exists; pass --force to overwrite it") from None
        os.rename(tmp, out.path)


def _temp_stem(path: Path) -> str:
    """The output name as a temp name carries it: cut to _TEMP_NAME_BYTES bytes."""
    return os.fsdecode(os.fsencode(path.name)[:_TEMP_NAME_BYTES])


def _temp_prefix(path: Path) -> str:
    return f".{_temp_stem(path)}.{os.getpid()}."


def _remove_stale(path: Path) -> list[Path]:
    """Our temp files for this output whose process is gone (killed before it could clean up)."""
    pattern = re.compile(rf"\.{re.escape(_temp_stem(path))}\.(\d+)\.[A-Za-z0-9_]{{8}}\.tmp", re.DOTALL)
    removed = []
    try:
        names = os.listdir(path.parent)
    except OSError:
        return removed
    for name in names:
        m = pattern.fullmatch(name)
        if m is None or _alive(int(m.group(1))):
            continue
        stale = path.parent / name
        try:
            if stat.S_ISREG(os.lstat(stale).st_mode):
                stale.unlink()
                removed.append(stale)
        except OSError:
            pass  # gone meanwhile, or not ours to remove: leave it
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process: not ours to judge
    return True


def _identities(inputs: Iterable[str | os.PathLike | None]) -> set[tuple[int, int]]:
    """(device, inode) of every input file; a directory stands for the files directly in it (a
    drafter or target directory, whose files may be symlinks into a Hub cache's blobs)."""
    ids = set()
    for p in inputs:
        if p is None:
            continue
        st = _stat(Path(p))
        if st is None:
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                entries = list(os.scandir(p))
            except OSError:
                continue
            for e in entries:
                try:
                    est = os.stat(e.path)
                except OSError:
                    continue
                if stat.S_ISREG(est.st_mode):
                    ids.add((est.st_dev, est.st_ino))
        else:
            ids.add((st.st_dev, st.st_ino))
    return ids


def _stat(path: Path) -> os.stat_result | None:
    """stat, following links (a dangling link is absent: the rename replaces the link)."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise OutputError(f"{_short(path)}: the path is too long for the file system; choose a shorter "
                              f"one") from None
        if exc.errno == errno.ELOOP:
            raise OutputError(f"{path}: a symlink loop; remove the link or choose another path") from None
        raise OutputError(f"{path}: cannot be examined ({exc.strerror})") from None


def _not_regular(flag: str, path: Path, mode: int) -> OutputError:
    return OutputError(f"{flag} {path}: is {_kind(mode)}, not a regular file; refusing to replace it "
                       f"(write to a file path instead)")


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def _short(path: Path) -> str:
    s = str(path)
    return s if len(s) <= 120 else s[:60] + "…" + s[-40:]
