"""How many threads a job gets by default: the cores this process may run on."""
from __future__ import annotations

import os


def default_threads() -> int:
    """The CPUs in this process's affinity mask (a container's or ``taskset``'s limit, not the
    machine's count); ``os.cpu_count()`` where there is no mask."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)
