"""Stored bytes to the output: a ``FileSpan`` (part of a source file) copied as it is.

A bf16 tensor kept bf16, or a retargeted GGUF's tensors, go out by ``write`` straight from a
read-only memory map of the source, a window at a time: one copy, page cache to page cache,
never through a Python object, and memory stays flat. Holes and all-zero pieces of the source
are seeked over, so they stay holes in the output.
"""
from __future__ import annotations

import os
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..errors import WeightsError
from .safetensors import _in_hole

_SEEK_HOLE = getattr(os, "SEEK_HOLE", None)

Progress = Callable[[int], None]


@dataclass(frozen=True)
class FileSpan:
    """Bytes ``[offset, offset + nbytes)`` of the file at ``path``, written unchanged: what a
    producer yields instead of an array when a tensor's encoding is its stored bytes."""

    path: Path
    offset: int
    nbytes: int
    name: str = ""  # the tensor, for messages


@dataclass(frozen=True)
class Zeros:
    """``nbytes`` zero bytes: what a producer yields for data it knows is all zeros (the encoding
    of a source that is a hole), so the writer seeks over it instead of scanning a buffer."""

    nbytes: int


# Stored bytes are written from a memory map of the source, this many bytes mapped at a time (the
# peak RSS the copy adds: mapped file pages count), each window written in PIECE_BYTES writes.
# Why not os.copy_file_range, as cp does: a GGUF's tensor offsets are not page-aligned to the
# safetensors' (the headers differ), so the kernel's splice copy puts every source page into two
# output pages, each its own page-cache write: 40 % more CPU than cp. A write() from mapped memory
# fills each output page once: ~0.65x cp's CPU with the reservation below (0.94 GB, warm cache;
# docs/performance.md, "convert"). Two threads do not help: ext4 serialises writes to one file.
# Smaller pieces pay per-call overhead (256 KiB: +30 %). Larger ones (2-16 MiB) were as fast, but
# more often up to 5x slower in the kernel's copy (2 MiB: 1 run in ~80; 4 MiB: 1 in 3): on a VM
# whose freed 2 MiB blocks go back to the host, the larger folios they get cost a host fault
# (docs/performance.md, convert). Each write is cut at an output offset that is a
# multiple of PIECE_BYTES, so it fills whole page-cache folios instead of ending in a partial one
# that the next write completes: ~8 % less time for a 1 GB copy to an odd offset.
WINDOW_BYTES = 16 << 20
PIECE_BYTES = 1 << 20


def copy_span(fout, span: FileSpan, hole_bytes: int, progress: Progress | None) -> None:
    """Copy ``span`` to the current position of ``fout``, seeking over each piece that is a hole
    or all zeros in the source: pieces cut at output offsets that are multiples of ``hole_bytes``,
    as the writer cuts the arrays it writes (gguf_writer.HOLE_BYTES)."""
    with open(span.path, "rb", buffering=0) as src:
        fd = src.fileno()
        size = os.fstat(fd).st_size
        start, end = span.offset, span.offset + span.nbytes
        if end > size:
            raise WeightsError(f"{span.path}: tensor {span.name} needs bytes up to {end:,} but the file ends at "
                               f"{size:,} (truncated? re-fetch the file)")
        shift = fout.tell() - start  # output offset - source offset
        # A span without holes (every dense checkpoint: one lseek says so) has its zero pieces
        # found in the mapped window it is written from: no lseek and no preads per piece, which
        # were ~2,700 syscalls for a 1 GB copy (~3 % of it).
        done = start if _has_hole(fd, start, end) else _copy_mapped(fout, fd, span, shift, hole_bytes, progress)
        if done < end:  # holes, or a file that cannot be mapped
            _copy_pieces(fout, fd, span, done, shift, hole_bytes, size, progress)


def _has_hole(fd: int, a: int, b: int) -> bool:
    """Whether the file has a hole that starts before ``b`` (at or after ``a``); False where
    the system cannot tell (then every piece is checked for zeros anyway)."""
    if _SEEK_HOLE is None or a >= b:
        return False
    try:
        return os.lseek(fd, a, _SEEK_HOLE) < b  # the end of the file counts as a hole
    except OSError:
        return False


def _piece_end(a: int, shift: int, hole_bytes: int) -> int:
    """The source offset where the piece holding ``a`` ends (output offsets cut at ``hole_bytes``)."""
    return a + hole_bytes - (a + shift) % hole_bytes


def _copy_mapped(fout, fd: int, span: FileSpan, shift: int, hole_bytes: int, progress: Progress | None) -> int:
    """Copy a span with no holes from memory maps of its source, a window at a time, each
    all-zero piece seeked over. Returns where it stopped: the span's end, or an earlier offset
    if the file cannot be mapped there."""
    a, end = span.offset, span.offset + span.nbytes
    while a < end:
        stop = a + WINDOW_BYTES
        stop -= (stop + shift) % hole_bytes  # windows end where pieces do
        stop = min(end, stop if stop > a else _piece_end(a, shift, hole_bytes))
        with _mapped(fd, a, stop, span, end) as mapped:
            if mapped is None:
                return a
            view, base = mapped
            write_sparse(fout, view[a - base:stop - base], hole_bytes)
        if progress is not None:
            progress(stop - a)
        a = stop
    return end


@contextmanager
def _mapped(fd: int, a: int, stop: int, span: FileSpan, need: int) -> Iterator[tuple[memoryview, int] | None]:
    """Source bytes ``[a, stop)`` mapped read-only: a view of them from the mapping boundary
    below ``a``, and that boundary's offset; None where the file cannot be mapped. Unmapped on
    leaving. The file is first checked to still hold ``need`` bytes: one that shrank would fault
    (SIGBUS) in the mapped pages."""
    import mmap

    if os.fstat(fd).st_size < need:
        raise _shrank(span, a)
    base = a - a % mmap.ALLOCATIONGRANULARITY
    try:
        # MAP_POPULATE maps the whole window in one call instead of a page fault per page.
        m = mmap.mmap(fd, stop - base, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                      prot=mmap.PROT_READ, offset=base)
    except (OSError, ValueError):  # a file that cannot be mapped (special file, odd filesystem)
        yield None
        return
    view = memoryview(m)
    try:
        yield view, base
    finally:
        view.release()
        try:
            m.close()
        except BufferError:  # a failed write's traceback still holds a slice: unmapped when freed
            pass


def write_sparse(fout, buf: memoryview, hole_bytes: int) -> None:
    """Write ``buf`` at the current position, seeking over each all-zero piece instead (pieces
    cut at output offsets that are multiples of ``hole_bytes``).

    Exact by construction: a piece is skipped only when every byte of it is zero, and the output
    is a new file, so a range never written reads back as zeros."""
    pos = fout.tell()
    n = buf.nbytes
    run = start = 0  # run: the first byte not yet written (or seeked over)
    while start < n:
        end = min(n, start + hole_bytes - (pos + start) % hole_bytes)
        # Dense data almost never starts or ends with a zero byte: no scan for it.
        if not (buf[start] or buf[end - 1] or nonzero(buf[start:end])):
            _write_run(fout, buf[run:start])
            fout.seek(end - start, os.SEEK_CUR)
            run = end
        start = end
    _write_run(fout, buf[run:])


def _write_run(fout, view: memoryview) -> None:
    """Bytes to ``fout``'s position, their blocks reserved first, in writes cut at output
    offsets that are multiples of PIECE_BYTES (see there)."""
    pos, n = fout.tell(), view.nbytes
    reserve(fout.fileno(), pos, n)
    p = 0
    while p < n:
        q = p + PIECE_BYTES - (pos + p) % PIECE_BYTES
        write_all(fout, view[p:q])
        p = q


def _copy_pieces(fout, fd: int, span: FileSpan, a: int, shift: int, hole_bytes: int, size: int,
                 progress: Progress | None) -> None:
    """Copy bytes ``a`` to the end of ``span``, asking the file, piece by piece, which pieces
    are holes or zeros: for sparse sources and files that cannot be mapped."""
    end = span.offset + span.nbytes
    run = a  # the first byte not yet written
    while a < end:
        b = min(end, _piece_end(a, shift, hole_bytes))
        if _in_hole(fd, a, b - a, size) or _all_zero(fd, a, b):
            _copy_range(fout, fd, run, a, span, progress)
            fout.seek(b - a, os.SEEK_CUR)
            if progress is not None:
                progress(b - a)
            run = b
        a = b
    _copy_range(fout, fd, run, end, span, progress)


def _all_zero(fd: int, a: int, b: int) -> bool:
    # Dense data almost never starts or ends with a zero byte: two 1-byte reads, no scan.
    if os.pread(fd, 1, a) != b"\0" or os.pread(fd, 1, b - 1) != b"\0":
        return False
    return not nonzero(memoryview(os.pread(fd, b - a, a)))


def nonzero(piece: memoryview) -> bool:
    """Whether any byte of ``piece`` is nonzero (bytes.count runs in C: no numpy needed)."""
    return piece.tobytes().count(0) != piece.nbytes


def _copy_range(fout, fd: int, a: int, b: int, span: FileSpan, progress: Progress | None) -> None:
    """Source bytes ``[a, b)`` to ``fout``'s position: written from a memory map of the source,
    or read and written where the file cannot be mapped."""
    while a < b:
        stop = min(b, a + WINDOW_BYTES)
        with _mapped(fd, a, stop, span, b) as mapped:
            if mapped is None:
                _read_write(fout, fd, a, b, span, progress)
                return
            view, base = mapped
            _write_run(fout, view[a - base:stop - base])
        if progress is not None:
            progress(stop - a)
        a = stop


def _read_write(fout, fd: int, a: int, b: int, span: FileSpan, progress: Progress | None) -> None:
    reserve(fout.fileno(), fout.tell(), b - a)
    while a < b:
        data = os.pread(fd, min(b - a, PIECE_BYTES), a)
        if not data:  # the size was checked: only a file shrinking under us gets here
            raise _shrank(span, a)
        write_all(fout, memoryview(data))
        a += len(data)
        if progress is not None:
            progress(len(data))


def _shrank(span: FileSpan, at: int) -> WeightsError:
    return WeightsError(f"{span.path}: tensor {span.name} ends early at byte {at:,} (the file shrank while it "
                        "was copied); re-fetch it")


_fallocate = None  # libc's fallocate(2), looked up once; False where there is none


def reserve(fd: int, offset: int, n: int) -> None:
    """Allocate the output's blocks for ``n`` bytes at ``offset`` before writing them: one call
    instead of a delayed-allocation reservation per page (ext4: ~25 % of the copy's CPU).

    Every range written is reserved, however small (the header, a norm): when a file is renamed
    over an existing one (a ``--force`` re-run), ext4 first writes back the whole new file if any
    of its blocks still await delayed allocation (its "auto_da_alloc" heuristic): for a 0.94 GB
    output, 0.8 s inside rename() on every re-run. With none left it skips that, and the pages
    are written back later by the kernel, as for any other write. (That flush only started the
    writeback, it never waited for it: outputs are not fsync'd, before or now.)

    Best effort: any failure (a filesystem without it, or ENOSPC, which the writes then report
    as usual) is ignored. Not ``os.posix_fallocate``: glibc emulates it by writing a byte per
    block where the filesystem has no fallocate. Only ranges about to be written: holes stay holes."""
    global _fallocate
    if n <= 0 or _fallocate is False:
        return
    if _fallocate is None:
        try:
            import ctypes

            f = ctypes.CDLL(None, use_errno=True).fallocate
            f.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
            f.restype = ctypes.c_int
            _fallocate = f
        except (OSError, AttributeError, ImportError):  # not Linux
            _fallocate = False
            return
    _fallocate(fd, 0, offset, n)


# An old output smaller than this is not worth a thread: its pages are few.
RELEASE_MIN_BYTES = 64 << 20


def release_cache(path: Path) -> None:
    """Drop the page cache of the file that ``path`` names, which a new output is about to
    replace, so that the new output's pages are the ones it frees.

    Why: where freed memory goes back to the host (a VM with free-page reporting: freed 2 MiB
    blocks are handed back ~2 s after they are freed), a page-cache page taken from memory that
    was handed back costs a host fault when it is first written: +1.5 s of kernel time for a
    0.94 GB output, the whole difference between a fast and a slow re-run. The old output's pages
    are only freed when the rename replaces it, at the end of the run, so the next run (started
    more than ~2 s later) copies into handed-back memory. ``cp`` onto an existing file does not pay
    it: O_TRUNC frees the old pages right before it writes. We cannot truncate (the old output
    stays whole until the new one is published), but dropping its cache keeps its bytes on disk.

    Best effort, and only what the rename will free anyway: a regular file with one link, not a
    symlink (the rename replaces the link, not its target), of RELEASE_MIN_BYTES or more. Dirty
    pages (an output written seconds ago) are written back first: ~0.4 s of kernel time for
    0.94 GB, which is why the writer runs this on a second thread. Pages mapped by a reader stay."""
    fadvise = getattr(os, "posix_fadvise", None)
    if fadvise is None:
        return
    try:
        # O_NONBLOCK: a FIFO put there since the output was checked does not block the open.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_size >= RELEASE_MIN_BYTES:
            fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_all(fout, buf: memoryview) -> None:
    while buf.nbytes:  # a raw write may be partial
        n = fout.write(buf)
        buf = buf[n:]
