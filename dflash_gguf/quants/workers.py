"""Worker processes for the numpy path of a whole-file quantize (``gguf_file``).

The numpy quantizers make ~900 NumPy calls per 256 Ki-value chunk, each holding the GIL for a
microsecond or two around a ~20 µs loop, so threads hand the GIL to each other on every call and
wait for it. A 2.1 GB bf16 drafter to Q4_K_M on 2 cores: two threads in one process took 44.5 s
(75 s CPU); one single-threaded process per core took 31 s a file (60 s CPU). So on the numpy path
a large job's K-quant tasks run in processes: each opens the input itself, reads and quantizes
its rows, and sends the bytes back (about 0.6 bytes a value, through a pipe). Measured the same
way, the whole job: Q4_K_M 31.8 s against 37.1 s on threads; Q8_0, whose one-pass quantizer is
cheap, went from 2.3 to 4.0 s, so it and the other one-pass types stay on threads. The numba
kernels release the GIL for a whole task: that path stays on threads too.
"""
from __future__ import annotations

import multiprocessing
import os
import select
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from math import prod
from typing import Sequence

import numpy as np
from gguf import GGMLQuantizationType as Q

from ..fileio.gguf_reader import TensorReader
from ..fileio.types import TensorInfo
from .rows import quantize_rows as _rows
from .scratch import Scratch

#: Values to quantize by a search type below which worker processes are not started: each
#: imports numpy and gguf-py (~0.3 s), which a small job would not win back.
MIN_VALUES = 1 << 25
#: How often a worker whose kernel cannot signal its parent's exit (no pidfd) checks its parent pid.
PARENT_POLL_S = 0.2


def worth_it(threads: int, entries: Sequence) -> bool:
    """Whether a job (its ``layout.QuantEntry`` list) runs its search-type tasks (``BlockQuant.
    numpy_search``) in processes: the numpy path, more than one worker, and at least MIN_VALUES
    values going to such types."""
    from . import _numba
    from .base import registered

    search = [e for e in entries if e.quantized and in_process(registered().get(e.ggml_type))]
    if threads < 2 or not search or sum(prod(e.shape) for e in search) < MIN_VALUES:
        return False
    return not _numba.enabled()  # asked last: it imports numba, which a copy-only job never needs


def in_process(cls) -> bool:
    """Whether a quantizer class's tasks go to the worker processes (when a job has them)."""
    return cls is not None and cls.numpy_search


def start(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes on the numpy path. Spawned, not forked: the parent may have
    threads (a progress bar's, the writer's read-ahead) whose locks a fork would copy held."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(os.getpid(),))


def _init_worker(parent: int | None = None) -> None:
    # Ctrl-C reaches every process of the terminal's group: the parent reports it and shuts the
    # pool down; a worker that took it would print a traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent is not None:
        die_with_parent(parent)
    from . import _numba

    _numba.set_enabled(False)  # the parent chose the numpy path (by flag, setting or absence)


def die_with_parent(parent: int) -> None:
    """End this process as soon as ``parent`` (the pid that started it) has exited, however it
    ended: SIGKILL and an OOM kill included, which run no clean-up in the parent. Otherwise a
    worker outlives it, blocked for ever on the task queue (every worker holds that pipe's write
    end too, so it never reads EOF).

    A daemon thread waits on a pidfd of the parent (Linux 5.3+: readable when the parent exits),
    else polls ``os.getppid()`` every PARENT_POLL_S: an orphan is re-parented (to init or a
    subreaper) before the parent's exit is signalled, so the pid it reports changes. Not
    ``prctl(PR_SET_PDEATHSIG)``: that fires when the *thread* that started the worker exits, and
    the pool starts workers on demand from whichever thread submits (the writer's read-ahead
    thread, which ends with each file). A parent already gone when this runs (the race before the
    watch starts) ends the worker at once."""
    if os.getppid() != parent:
        os._exit(1)
    fd = None
    if hasattr(os, "pidfd_open"):
        try:
            fd = os.pidfd_open(parent)
        except OSError:  # no pidfd support (kernel, seccomp): poll instead
            fd = None
        if fd is not None and os.getppid() != parent:  # the pid was reused between the two checks
            os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent, fd), name="dflash-parent-watch", daemon=True).start()


def _watch_parent(parent: int, fd: int | None) -> None:
    while os.getppid() == parent:
        if fd is None:
            time.sleep(PARENT_POLL_S)
        elif select.select([fd], [], [], 5.0)[0]:  # the timeout only re-checks getppid, belt and braces
            break
    os._exit(1)  # no clean-up to do: the parent is gone, nobody reads this process's results


_reader: TensorReader | None = None
_scratch = Scratch()


def quantize_rows(path: str, t: TensorInfo, r0: int, n: int, qtype: Q) -> np.ndarray:
    """``rows.quantize_rows`` in a worker: the input opened once per process."""
    global _reader
    if _reader is None or _reader.path != path:
        if _reader is not None:
            _reader.close()
        _reader = TensorReader(path)
    return _rows(_reader, t, r0, n, qtype, _scratch)
