"""The memory guard: refuse a configuration whose model files exceed the memory the user allows.

File sizes are a floor, not the whole bill (the KV cache and compute buffers come on top, and a
GPU offload moves weights out of RAM), so the guard catches the common mistake, a 70B target
on a 32 GB machine, before minutes of loading end in swap or the OOM killer. The default
allowance is 90% of MemAvailable (Linux ``/proc/meminfo``); ``--max-memory inf`` turns it off.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

from ..errors import MemoryGuardError, UsageError

GIB = 1 << 30
DEFAULT_FRACTION = 0.9
_SHARD = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<n>\d{5})\.gguf$")


def mem_available() -> int | None:
    """MemAvailable in bytes, or None where /proc/meminfo does not say (not Linux)."""
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    m = re.search(r"^MemAvailable:\s+(\d+)\s+kB", text, re.M)
    return int(m.group(1)) * 1024 if m else None


def default_limit() -> tuple[float | None, str]:
    """(bytes allowed, how that was chosen); (None, why) when there is nothing to go by."""
    avail = mem_available()
    if avail is None:
        return None, "MemAvailable unknown on this system"
    return avail * DEFAULT_FRACTION, f"{DEFAULT_FRACTION:.0%} of MemAvailable {avail / GIB:.1f} GiB"


def model_bytes(path: str | Path) -> int:
    """Bytes of a GGUF on disk, every shard of a ``-0000N-of-0000M.gguf`` set counted."""
    p = Path(path)
    m = _SHARD.match(p.name)
    if not m:
        return p.stat().st_size if p.is_file() else 0
    return sum(q.stat().st_size for i in range(1, int(m["n"]) + 1)
               if (q := p.with_name(f"{m['stem']}-{i:05d}-of-{m['n']}.gguf")).is_file())


def check_limit_gib(gib: float) -> None:
    """``--max-memory``: GiB ≥ 0, or ``inf`` (the guard off). NaN compares false with every size,
    so it would switch the guard off without saying so.

    Raises:
        UsageError: NaN or a negative value.
    """
    if math.isnan(gib) or gib < 0:
        raise UsageError(f"--max-memory {gib}: give GiB ≥ 0, or 'inf' to turn the memory guard off")


def check(name: str, files: dict[str, Path], limit: float | None, how: str) -> int:
    """Total bytes of ``files`` ({role: path}); raises when they exceed ``limit``.

    Raises:
        MemoryGuardError: naming every file's size, the limit and where it came from.
        UsageError: a NaN or negative ``limit``.
    """
    if limit is not None:
        check_limit_gib(limit / GIB)
    sizes = {role: model_bytes(p) for role, p in files.items()}
    total = sum(sizes.values())
    if limit is not None and not math.isinf(limit) and total > limit:
        parts = " + ".join(f"{role} {s / GIB:.2f} GiB" for role, s in sizes.items())
        raise MemoryGuardError(f"configuration {name}: model files need {total / GIB:.2f} GiB ({parts}) but "
                               f"{limit / GIB:.2f} GiB is allowed ({how}): free memory, use smaller quants, or "
                               "raise --max-memory (GiB; 'inf' turns the guard off)")
    return total
