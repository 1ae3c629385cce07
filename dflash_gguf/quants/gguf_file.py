"""GGUF → quantized GGUF with llama-quantize's layout: its per-tensor types, its tensor order,
its KV order, with the bit-exact quantizers. The layout itself (types, order, KVs) is
``layout.requantize_layout``, shared with ``convert``.

Streaming on ``threads`` workers: every tensor to convert is cut into tasks of whole rows (about
``TASK_VALUES`` values; a tensor kept in its type is copied file to file by the writer, as
fileio/span_copy.py copies for convert). A task reads its own input
bytes (positional reads, no memory map: mapped pages would stay resident for the whole run),
decodes them to float32, refuses NaN/inf and quantizes; the writer takes the results in file
order. At most ``2 * threads + 1`` tasks are under way, across tensor boundaries, so the workers
never wait for a tensor's last task and peak memory is a few tasks' buffers, not a tensor or the
model. The bytes do not depend on the thread count or the task size: every ggml quantizer is
block-local, and tasks split at whole rows. On the numpy path the quantize tasks of a large job
run in worker processes instead of threads (``workers``: the GIL, not the cores, bounds that path).
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from ..errors import QuantizationError, UsageError
from ..fileio.gguf_reader import GGUFFile, TensorReader, read_gguf
from ..fileio.gguf_writer import FileSpan, TensorOut, WriteReport, write_gguf
from ..fileio.outputs import check_output
from ..fileio.types import KV, TensorInfo
from .ftypes import Overrides
from .layout import QuantEntry, requantize_layout
from .threads import default_threads

if TYPE_CHECKING:
    import numpy as np

#: Input values per quantization task (whole rows; one row when a row is longer).
TASK_VALUES = 1 << 20


@dataclass(frozen=True)
class QuantizeResult:
    ftype: str
    kvs: list[KV]
    tensors: list[QuantEntry]
    written: WriteReport | None

    def to_json(self) -> dict:
        return {
            "ftype": self.ftype,
            "kv": [kv.to_json() for kv in self.kvs],
            "tensors": [{"name": t.name, "shape": list(t.shape), "ne": list(reversed(t.shape)), "from": t.src_type.name,
                         "to": t.ggml_type.name, "nbytes": t.nbytes, "why": t.reason} for t in self.tensors],
            "output": None if self.written is None else {"path": str(self.written.path), "file_size": self.written.file_size},
        }


def quantize_gguf(
    src: str | Path,
    out: str | Path | None,
    ftype: str,
    *,
    allow_requantize: bool = False,
    force: bool = False,
    dry_run: bool = False,
    progress: Callable[[int], None] | None = None,
    threads: int | None = None,
    overrides: Overrides | None = None,
) -> QuantizeResult:
    """Quantize a GGUF (any architecture; F32/F16/BF16 tensors) like llama-quantize does.

    ``threads``: worker threads (default: the CPUs this process may use); the bytes are the
    same for any count. ``overrides``: llama-quantize's --tensor-type, --output-tensor-type,
    --token-embedding-type, --pure, --leave-output-tensor.

    Raises:
        UsageError: ``threads`` < 1, no output path, or the output is the input.
    """
    if threads is not None and (isinstance(threads, bool) or int(threads) < 1):
        raise UsageError(f"--threads must be at least 1 (got {threads})")
    f = read_gguf(src)
    kvs, entries = requantize_layout(list(f.kvs.values()), [(t.name, t.shape, t.ggml_type) for t in f.tensors],
                                     ftype, allow_requantize=allow_requantize, where=str(src), overrides=overrides)
    if dry_run:
        return QuantizeResult(ftype, kvs, entries, None)
    if out is None:
        raise UsageError("quantize needs an output path (or --dry-run)")
    check_output(out, inputs=(src,), force=force)  # before any work; write_gguf checks again at the end
    by_name = {t.name: t for t in f.tensors}
    n_threads = default_threads() if threads is None else int(threads)
    with _Pipeline(f, n_threads, processes=_in_processes(n_threads, entries)) as pipe:
        outs = [TensorOut(e.name, e.shape, e.ggml_type, e.nbytes, pipe.add(by_name[e.name], e)) for e in entries]
        report = write_gguf(out, f.arch, kvs, outs, force=force, inputs=(src,), progress=progress)
    return QuantizeResult(ftype, kvs, entries, report)


def _in_processes(threads: int, entries: list[QuantEntry]) -> bool:
    """workers.worth_it, asked only of a job that quantizes: a copy-only job (COPY, BF16 from
    BF16) imports neither numpy nor the quantizers."""
    if not any(e.quantized for e in entries):
        return False
    from . import workers

    return workers.worth_it(threads, entries)


class _Pipeline:
    """The tasks of every tensor in file order, run on a thread pool (or, for quantize tasks with
    ``processes``, on worker processes) a bounded window ahead of the writer, which takes each
    tensor's results through the producer ``add`` returned."""

    def __init__(self, f: GGUFFile, threads: int, *, processes: bool = False) -> None:
        self.file = f
        self.threads = threads
        self.processes = processes
        self.window = 2 * threads + 1
        self.tasks: list[tuple[int, bool, Callable[..., np.ndarray], tuple]] = []  # (tensor, *_tasks' item)
        self.n_tensors = 0
        self.submitted = 0
        self.running: deque[tuple[int, Future]] = deque()
        self.reader: TensorReader | None = None
        self.pool: ThreadPoolExecutor | None = None
        self.procs = None  # workers.start()'s pool, with ``processes``
        self.scratch = None  # per worker thread: a Scratch, made with the first quantize task

    def __enter__(self) -> _Pipeline:
        self.reader = TensorReader(self.file.path)
        self.pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="quantize")
        if self.processes:
            from . import workers

            self.procs = workers.start(self.threads)
        return self

    def __exit__(self, *exc) -> None:
        for _, fut in self.running:  # after an error: drop what has not started
            fut.cancel()
        if self.procs is not None:
            self.procs.shutdown(wait=True, cancel_futures=True)
        self.pool.shutdown(wait=True)  # no worker may read once the reader is closed
        self.reader.close()

    def add(self, t: TensorInfo, e: QuantEntry) -> Callable[[], Iterator[np.ndarray] | list[FileSpan]]:
        """Queue tensor ``t``'s tasks (to become ``e``); returns its producer for the writer.

        A tensor kept in its type is its stored bytes, copied file to file by the writer (as
        convert copies a bf16 tensor kept bf16): no task, nothing read into Python."""
        if not e.quantized and t.nbytes:
            span = [FileSpan(self.file.path, t.offset_abs, t.nbytes, t.name)]
            return lambda: span
        number, self.n_tensors = self.n_tensors, self.n_tensors + 1
        work = list(_tasks(self, t, e))
        self.tasks += [(number, *w) for w in work]
        return lambda: self._take(number, len(work))

    def _take(self, number: int, count: int) -> Iterator[np.ndarray]:
        for _ in range(count):
            while self.submitted < len(self.tasks) and len(self.running) < self.window:
                n, in_process, fn, args = self.tasks[self.submitted]
                self.running.append((n, (self.procs if in_process else self.pool).submit(fn, *args)))
                self.submitted += 1
            n, fut = self.running.popleft()
            assert n == number, (n, number)  # the writer takes the tensors in the order they were added
            try:
                result = fut.result()
            except BrokenProcessPool:
                raise QuantizationError(
                    "a quantize worker process died (killed, or out of memory?); nothing was written. "
                    "Re-run; --threads 1 quantizes in this process only") from None
            yield result


def _tasks(pipe: _Pipeline, t: TensorInfo, e: QuantEntry) -> Iterator[tuple[bool, Callable[..., np.ndarray], tuple]]:
    """Tensor ``t``'s tasks: (run in a worker process?, function, its arguments)."""
    if t.nbytes == 0:  # a zero-element tensor (some ne is 0): no data, no task
        return
    from . import workers
    from .base import registered
    from .rows import quantize_rows
    from .scratch import Scratch

    if pipe.scratch is None:
        pipe.scratch = Scratch()
    cls = registered().get(e.ggml_type)
    if cls is None:
        raise QuantizationError(f"quantizing to {e.ggml_type.name} is not supported")
    in_process = pipe.processes and workers.in_process(cls)
    rows = prod(t.shape[:-1])
    step = max(1, TASK_VALUES // t.shape[-1])
    for r0 in range(0, rows, step):
        rows_args = (t, r0, min(step, rows - r0), e.ggml_type)
        # in a process, workers.quantize_rows opens its own reader and has its own scratch
        yield ((True, workers.quantize_rows, (str(pipe.file.path), *rows_args)) if in_process
               else (False, quantize_rows, (pipe.reader, *rows_args, pipe.scratch)))

