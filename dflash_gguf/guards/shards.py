"""Split GGUFs: find every shard of a ``<name>-0000N-of-0000M.gguf`` set, read each header, and
check the ``split.*`` keys llama.cpp reassembles them by. An unsharded file is a one-file set.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import GGUFFormatError, InputError
from ..fileio.gguf_constants import GGUFValueType as T
from ..fileio.gguf_header import GGUFHeader, read_header, show
from ..fileio.types import type_name
from .findings import Finding, Severity, as_int, finding

SHARD_RE = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


class ShardSetError(GGUFFormatError):
    """A sharded model is incomplete (a shard missing) or its split keys disagree."""


@dataclass(frozen=True)
class ShardSet:
    paths: tuple[Path, ...]           # expected shards, in order (just the file when unsharded)
    headers: tuple[GGUFHeader, ...]   # the shards that exist
    findings: tuple[Finding, ...]

    @property
    def model(self) -> GGUFHeader:
        """Shard 1's keys with every shard's tensors (offsets are per file: layout checks
        must use ``headers``)."""
        first = self.headers[0]
        if len(self.headers) == 1:
            return first
        return dataclasses.replace(first, tensors=tuple(t for h in self.headers for t in h.tensors))


def check_shards(path: str | Path) -> ShardSet:
    """Read every shard's header and check the split keys llama.cpp uses to reassemble them.

    An unsharded file gives a one-file set. Raises ``GGUFFormatError`` when a present shard's
    header is corrupt; missing shards and inconsistent keys are findings.
    """
    path = Path(path)
    m = SHARD_RE.match(path.name)
    if not m:
        h = read_header(path)
        out = []
        n, no = as_int(h.get("split.count")), as_int(h.get("split.no"))
        if n is not None and n > 1:
            out.append(finding(h, Severity.ERROR, "split-not-named",
                               f"the file is shard {(no or 0) + 1} of {n} but is not named "
                               f"'<name>-0000N-of-{n:05d}.gguf'; llama.cpp finds the other shards by that "
                               f"name: rename it back", "key split.count"))
        return ShardSet((path,), (h,), tuple(out))
    count = int(m["count"])
    if count < 1 or not 1 <= int(m["no"]) <= count:
        raise ShardSetError(f"{path}: shard name says {int(m['no'])} of {count}; rename the file")
    paths = tuple(path.with_name(f"{m['prefix']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1))
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    present = [p for p in paths if p.is_file()]
    missing = [p for p in paths if p not in present]
    if paths[0] in missing:
        raise ShardSetError(f"{paths[0]}: the first shard is missing, and it holds the model's metadata "
                            f"(incomplete download: fetch every shard into the same directory)")
    headers = tuple(read_header(p) for p in present)
    out: list[Finding] = []
    if missing:
        names = ", ".join(p.name for p in missing[:5]) + (" ..." if len(missing) > 5 else "")
        out.append(Finding(Severity.ERROR, "shard-missing",
                           f"{len(missing)} of {count} shards missing: {names} (incomplete download; "
                           f"fetch every shard into the same directory)", "", str(path)))
    declared: set[int] = set()
    split_types = (("split.no", T.UINT16), ("split.count", T.UINT16), ("split.tensors.count", T.INT32))
    for h in headers:
        if any(k not in h.kv for k, _ in split_types):
            out.append(finding(h, Severity.ERROR, "split-keys-missing",
                               "split.no / split.count / split.tensors.count missing: not a llama.cpp shard "
                               "(re-split with llama-gguf-split)", "keys split.*"))
            continue
        wrong = [(k, typ) for k, typ in split_types if h.kv[k].type != typ]
        for key, typ in wrong:
            out.append(finding(h, Severity.ERROR, "key-type",
                               f"{key} is {type_name(h.kv[key].type, h.kv[key].sub_type)}, llama.cpp requires "
                               f"{typ.name}", f"key {key}"))
        if wrong:
            continue
        no, cnt = h.get("split.no"), h.get("split.count")
        want_no = paths.index(h.path)
        if no != want_no or cnt != count:
            out.append(finding(h, Severity.ERROR, "split-keys-mismatch",
                               f"split.no = {no}, split.count = {cnt}, but the name says shard "
                               f"{want_no + 1} of {count} (split.no counts from 0): renamed or mixed-up shards",
                               "keys split.no, split.count"))
        declared.add(h.get("split.tensors.count"))
    total = sum(len(h.tensors) for h in headers)
    if len(declared) > 1:
        out.append(Finding(Severity.ERROR, "split-keys-mismatch",
                           f"shards disagree on split.tensors.count ({sorted(declared)}): shards from "
                           f"different conversions mixed in one directory", "key split.tensors.count", str(path)))
    elif declared and not missing and declared != {total}:
        out.append(Finding(Severity.ERROR, "split-tensor-count",
                           f"split.tensors.count = {declared.pop():,} but the shards hold {total:,} tensors "
                           f"(a shard from another conversion?)", "key split.tensors.count", str(path)))
    seen: dict[str, Path] = {}
    for h in headers:
        for t in h.tensors:
            if t.name in seen:
                out.append(finding(h, Severity.ERROR, "shard-duplicate-tensor",
                                   f"tensor {show(t.name)} is also in {seen[t.name].name}", f"tensor {show(t.name)}"))
            seen.setdefault(t.name, h.path)
    return ShardSet(paths, headers, tuple(out))


def load_complete(path: str | Path) -> ShardSet:
    """Headers of a complete model: every shard present and consistent, else ``ShardSetError``
    (exit 6). What check-instruct needs before it may give a verdict."""
    s = check_shards(path)
    errors = [f for f in s.findings if f.severity == Severity.ERROR]
    if errors:
        raise ShardSetError(f"{path}: incomplete sharded model: {errors[0].message}")
    return s
