"""``run_checks``: every check over a file (all its shards), optionally against a ``--target``,
optionally with the ``--deep`` data scan, optionally against a ``--source`` checkpoint's config.json.

The checks are plain functions, listed below in the order their findings are reported
(integrity, then drafter, then DSpark, which refines the drafter findings). A new check is one
function in a check module and one entry here.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..errors import TargetError
from .drafter_checks import check_drafter, drafter_view
from .dspark_checks import check_dspark, check_legacy_dspark
from .file_checks import check_keys, check_layout, check_names, check_tensors, check_tokenizer, check_trailing
from .findings import CheckReport
from .pairing import pair_drafter, pair_roles, pair_vocab
from .shards import check_shards

if TYPE_CHECKING:
    from .source import Source

#: (header) -> findings, on each physical file (offsets and layout are per shard).
FILE_CHECKS = (check_layout, check_trailing, check_names)
#: (model) -> findings, on the logical model: shard 1's keys with every shard's tensors.
MODEL_CHECKS = (check_keys, check_tokenizer, check_tensors, check_drafter, check_dspark, check_legacy_dspark)
#: (drafter, target) -> findings, with --target.
PAIR_CHECKS = (pair_roles, pair_vocab, pair_drafter)
# The checks above that read the drafter view (``drafter_view``: format, parsed keys): it is
# worked out once per file here and handed to each as ``view=``.
_READ_VIEW = (check_drafter, check_dspark, pair_drafter)


def run_checks(path: str | Path, *, target: str | Path | None = None, deep: bool = False,
               progress: Callable[[int], None] | None = None, source: Source | None = None) -> CheckReport:
    """All checks on ``path`` (and its shards); pairing checks against ``target`` if given; with
    ``source`` (``guards.source.resolve_source``, resolved once for any number of files), the
    file against that checkpoint's config.json (``CheckReport.source``).

    Raises:
        InputError: ``path`` does not exist.  TargetError: ``target`` does not exist.
        GGUFFormatError: a header (of the file, a shard, or the target) is corrupt or truncated.
    """
    shards = check_shards(path)
    findings = list(shards.findings)
    for h in shards.headers:
        for chk in FILE_CHECKS:
            findings += chk(h)
    model = shards.model
    view = drafter_view(model)
    for chk in MODEL_CHECKS:
        findings += chk(model, view=view) if chk in _READ_VIEW else chk(model)
    compared = None
    if source is not None:
        from .source import compare_source  # here: it imports the converter, which plain checks do not need

        compared, found = compare_source(model, view, source)
        findings += found
    tpath = None
    if target is not None:
        tpath = Path(target)
        if not tpath.exists():
            raise TargetError(f"{tpath}: target GGUF not found")
        tset = check_shards(tpath)
        findings += [dataclasses.replace(f, category="pairing") for f in tset.findings]
        for chk in PAIR_CHECKS:
            findings += chk(model, tset.model, view=view) if chk in _READ_VIEW else chk(model, tset.model)
    scanned = 0
    if deep:
        from .deep_scan import deep_scan  # here: it imports numpy, which header-only checks do not need

        for h in shards.headers:
            f2, n = deep_scan(h, progress)
            findings += f2
            scanned += n
    return CheckReport(Path(path), tuple(findings), tuple(shards.paths), tpath, deep,
                       len(model.tensors), sum(h.file_size for h in shards.headers), scanned, compared)
