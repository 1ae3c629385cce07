"""Committed, digested reference headers for the published corpus (a test helper, not a test).

A cold run of llama.cpp's converter over the corpus costs minutes (each job rebuilds a
150k-260k-token vocabulary), and CI always starts cold. So each entry's reference header is
kept in the repository as ``fixtures/published/<slug>/llama_cpp_header.json``: the header the
vendored converter wrote (``llamacpp_reference.reference_headers``) with every long array and
string replaced by its length and sha256 (``digested``), keyed by the converter's code and by
everything it read (``cache_key(versions=False)``; the library versions it ran with are
recorded, not keyed: a tokenizer library that changed a vocabulary would show as a failing
comparison, never as a silent pass).

An entry whose key no longer matches (a changed fixture, a new llama.cpp) is converted live,
as if nothing were committed; ``DFLASH_WRITE_GOLDEN=1`` then rewrites its file.
"""
from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

from tests.convert.llamacpp_reference import LIBRARIES, Job, Summary, cache_key, reference_headers

GOLDEN_NAME = "llama_cpp_header.json"
MAX_ITEMS = 16  # arrays longer than this (vocab, scores, merges) are kept as a digest
MAX_CHARS = 256  # and strings longer than this (chat templates)


def _digest(value: Any) -> str:
    raw = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogateescape")
    return hashlib.sha256(raw).hexdigest()


def digested(summary: Summary) -> Summary:
    """``summary`` with long arrays and strings replaced by ``"<N items sha256:…>"`` /
    ``"<N chars sha256:…>"`` (keys, types, tensor infos and short values as they were)."""
    kvs = []
    for key, type_, value in summary.kvs:
        if isinstance(value, list) and len(value) > MAX_ITEMS:
            value = f"<{len(value)} items sha256:{_digest(value)}>"
        elif isinstance(value, str) and len(value) > MAX_CHARS:
            value = f"<{len(value)} chars sha256:{_digest(value)}>"
        kvs.append((key, type_, value))
    return Summary(tuple(kvs), summary.tensors)


def golden_headers(jobs: Sequence[Job], files: Sequence[Path], *, src: Path) -> list[Summary]:
    """The digested reference header of each job: from its committed file when the key matches,
    else from the live (cached) converter, rewritten when ``DFLASH_WRITE_GOLDEN=1``."""
    keys = [cache_key(job, src, versions=False) for job in jobs]
    out: list[Summary | None] = []
    for key, path in zip(keys, files):
        record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        out.append(Summary.from_json(record["summary"]) if record.get("key") == key else None)
    misses = [i for i, s in enumerate(out) if s is None]
    if misses:
        live = reference_headers([jobs[i] for i in misses], src=src)
        write = os.environ.get("DFLASH_WRITE_GOLDEN") == "1"
        for i, summary in zip(misses, live):
            out[i] = digested(summary)
            if write:
                record = {"key": keys[i], "versions": {d: _version(d) for d in LIBRARIES},
                          "summary": out[i].to_json()}
                files[i].write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return out  # type: ignore[return-value]


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"
