"""An iterator's items, each next one computed on a worker thread while the caller handles the
current one: the writer reads (and converts, or quantizes) the next chunk while it writes this one.

Not ``concurrent.futures``: its import (with ``logging``) costs ~6 ms of every convert, ~1.5 %
of a 1 GB bf16 copy (docs/performance.md). One long-lived daemon thread and two C queues do
the same job for one worker.
"""
from __future__ import annotations

import threading
from queue import SimpleQueue
from typing import Iterator, TypeVar

T = TypeVar("T")
_END = object()
_STOPPED = object()  # the worker's last result: every item it was asked for is in the queue before it


class ReadAhead:
    """``with ReadAhead(it) as items: for x in items: ...``: the worker computes ``next(it)``
    for item k + 1 while the caller has item k. An exception raised by ``it`` is raised in the
    caller at the item it failed on. Leaving the block (normally, or by an exception) waits for
    the item in progress, and stops the worker, so ``it`` is never advanced concurrently with
    its owner's cleanup."""

    def __init__(self, it: Iterator[T]):
        self._it = it
        self._asks: SimpleQueue = SimpleQueue()  # True: compute the next item; False: stop
        self._results: SimpleQueue = SimpleQueue()  # (item, None) or (None, exception)
        self._worker = threading.Thread(target=self._run, name="dflash-read-ahead", daemon=True)

    def _run(self) -> None:
        while self._asks.get():
            try:
                self._results.put((next(self._it, _END), None))
            except BaseException as exc:  # handed to the caller, raised there
                self._results.put((None, exc))
        self._results.put((_STOPPED, None))

    def _ask(self) -> None:
        self._asks.put(True)

    def __enter__(self) -> Iterator[T]:
        self._worker.start()
        self._ask()
        return self._items()

    def _items(self) -> Iterator[T]:
        while True:
            item, exc = self._results.get()
            if exc is not None:
                raise exc
            if item is _END:
                return
            self._ask()
            yield item

    def __exit__(self, *exc_info) -> None:
        # The item in progress (if any) finishes before the worker stops: like a
        # ThreadPoolExecutor's shutdown(wait=True). Drained up to the worker's own end marker, not
        # by counting asks: a Ctrl-C / SIGTERM raised between a get() and its bookkeeping would
        # leave a count one off, and this wait would never end.
        self._asks.put(False)
        while self._results.get()[0] is not _STOPPED:
            pass
        self._worker.join()
