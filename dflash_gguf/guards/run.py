"""``run_checks``: every registered check over a file (all its shards), optionally against a
``--target``, optionally with the ``--deep`` data scan.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from ..errors import TargetError
from .findings import FILE_CHECKS, MODEL_CHECKS, PAIR_CHECKS, CheckReport
from .shards import check_shards


def run_checks(path: str | Path, *, target: str | Path | None = None, deep: bool = False,
               progress: Callable[[int], None] | None = None) -> CheckReport:
    """All checks on ``path`` (and its shards); pairing checks against ``target`` if given.

    Raises:
        OutputError: ``path`` does not exist.  TargetError: ``target`` does not exist.
        GGUFFormatError: a header (of the file, a shard, or the target) is corrupt or truncated.
    """
    shards = check_shards(path)
    findings = list(shards.findings)
    for h in shards.headers:
        for chk in FILE_CHECKS:
            findings += chk(h)
    model = shards.model
    for chk in MODEL_CHECKS:
        findings += chk(model)
    tpath = None
    if target is not None:
        tpath = Path(target)
        if not tpath.exists():
            raise TargetError(f"{tpath}: target GGUF not found")
        tset = check_shards(tpath)
        findings += [dataclasses.replace(f, category="pairing") for f in tset.findings]
        for chk in PAIR_CHECKS:
            findings += chk(model, tset.model)
    scanned = 0
    if deep:
        from .deep_scan import deep_scan  # here: it imports numpy, which header-only checks do not need

        for h in shards.headers:
            f2, n = deep_scan(h, progress)
            findings += f2
            scanned += n
    return CheckReport(Path(path), tuple(findings), tuple(shards.paths), tpath, deep,
                       len(model.tensors), sum(h.file_size for h in shards.headers), scanned)
