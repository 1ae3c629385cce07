"""Independent prompts on several CPU threads at once, one torch thread each.

Why prompts in parallel rather than torch's own threads: a draft or verify step multiplies 8-ish
rows by each weight, far too little work to split over cores — with two OpenMP threads the same
8×512 product measured anywhere from 30 µs to 6 ms on a shared 2-core machine, and most of a
round is such products. Two prompts on two Python threads run at ~1.9× one, because torch lets
go of the GIL inside each op. Why it changes no result: every op runs at one torch thread, so it
computes the same bits whichever Python thread calls it; each prompt has its own caches
(``Workspace``) and its own seeded generator, and the models are read-only.

CUDA (one device, one stream) and a single prompt run serially, as before.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence, TypeVar

import torch

from ..quants import default_threads  # the cores this process may run on (its affinity mask)

T = TypeVar("T")
R = TypeVar("R")


def prompt_jobs(requested: int, device: torch.device | str, n_items: int) -> int:
    """How many prompts to run at once: ``requested`` (0 = one per core), never more than there
    are prompts, and 1 on a GPU."""
    if requested < 0:
        raise ValueError(f"jobs must be >= 0 (0 = one per core), got {requested}")
    if torch.device(device).type != "cpu":
        return 1
    return max(1, min(requested or default_threads(), n_items))


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op thread count set to ``n`` for the block, then put back."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def map_prompts(fn: Callable[[T], R], items: Sequence[T], jobs: int) -> list[R]:
    """``[fn(item) for item in items]``, ``jobs`` items at a time on threads of one torch thread
    each; results in ``items``' order. The first exception (in ``items``' order) is raised once
    the running items finish; items not yet started are not run."""
    if jobs <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    failed = threading.Event()

    def guarded(item: T) -> R | None:
        if failed.is_set():
            return None  # an earlier item failed: its error is what the caller sees
        try:
            return fn(item)
        except BaseException:
            failed.set()
            raise

    with torch_threads(1):
        pool = ThreadPoolExecutor(jobs, thread_name_prefix="prompt")
        try:
            futures = [pool.submit(guarded, item) for item in items]
            return [f.result() for f in futures]
        except BaseException:  # Ctrl-C too: start nothing more
            failed.set()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
