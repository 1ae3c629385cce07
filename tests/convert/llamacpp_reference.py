"""llama.cpp's own converter as a header-only, cached reference (a test helper, not a test).

``convert_hf_to_gguf.py`` (vendored in the llama-cpp-python sdist) is ground truth for what a
mainline drafter GGUF holds. Writing its tensor data costs as much as reading a whole drafter,
and the published drafters are multi-GB, so the reference runs with one change: gguf-py's
``GGUFWriter.write_tensors_to_file`` writes the tensor infos and the padding after them with
gguf-py's own code, then makes the data section a hole of the size the real write would fill.
No tensor is written, so a lazy tensor is evaluated only where the converter itself does so to
decide metadata (a ``mask_embedding.pt`` drafter patches the target's embedding eagerly); every
KV and tensor info is what the converter decided, and the header bytes and the file size equal
a full run's (the tests prove it on the fixture drafters).

The runs go through ``tests/llamacpp_converter.py`` (one process, a fork per job). Summaries
are cached as JSON under ``<repo>/.cache/reference-conversions/``, keyed by everything the
converter reads (see ``cache_key``), so a second run costs nothing.

``llama_load`` loads a GGUF with real llama.cpp without reading tensor data (a default load
faults in every page of a multi-GB file, holes included). For a corpus of drafters:

    refs = reference_headers([Job(drafter, target), ...], src=llama_src())
    assert_same_summary(gguf_summary(ours), refs[i]) and not general_diff(gguf_summary(ours), refs[i])
    assert llama_load(ours) == "LOADED"
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Sequence

from dflash_gguf.fileio.gguf_header import raw_string, read_header
from dflash_gguf.fileio.string_array import StringArray
from dflash_gguf.fileio.types import type_name
from dflash_gguf.formats.meta import CONVERTER_KEY

from tests.conftest import ROOT, llama_cpp_src
from tests.llamacpp_converter import RUNNER, ConverterRun, log_tail, run_jobs

log = logging.getLogger(__name__)
CACHE_DIR = ROOT / ".cache" / "reference-conversions"
SUMMARY_FORMAT = 1  # bump when Summary's JSON or its meaning changes: old cache entries then miss
# Keys that may differ between our output and the reference: only ours alone, the dflash-gguf
# version that wrote the file (mainline has no such key). The general.* keys (name, size label,
# model card: license, tags, base models...) are gguf-py's ``Metadata`` on the same inputs
# (``dflash_gguf.convert.metadata``), so they are compared like every other key, and in order
# (``general_diff``). general.type tells a model from an adapter.
IGNORED: frozenset[str] = frozenset({CONVERTER_KEY})
# Authorship metadata that gguf-py's ``Metadata`` adds from a model card (README.md front matter)
# and from a descriptive directory name ("Qwen3-8B-DFlash-b16" -> basename "Qwen3", finetune
# "DFlash"). No llama.cpp source reads these keys; ``model_card_keys`` names them in a summary.
MODEL_CARD = ("general.author", "general.version", "general.organization", "general.finetune", "general.basename",
              "general.description", "general.quantized_by", "general.license", "general.license.name",
              "general.license.link", "general.url", "general.doi", "general.uuid", "general.repo_url",
              "general.tags", "general.languages")
MODEL_CARD_PREFIXES = ("general.source.", "general.base_model.", "general.dataset.")


def model_card_keys(summary: "Summary") -> frozenset[str]:
    """The model-card keys (``MODEL_CARD``) present in ``summary``."""
    return frozenset(k for k, _, _ in summary.kvs if k in MODEL_CARD or k.startswith(MODEL_CARD_PREFIXES))


def general_diff(ours: "Summary", ref: "Summary") -> list[str]:
    """Where the ``general.*`` keys differ, order included (our writer writes them in the order the
    plan lists them; mainline's gguf-py writer in the order it added them): empty when equal."""
    a = [kv for kv in ours.kvs if kv[0].startswith("general.")]
    b = [kv for kv in ref.kvs if kv[0].startswith("general.")]
    if a == b:
        return []
    out = [f"{x!r} vs {y!r}" for x, y in zip(a, b) if x != y][:5]
    if len(a) != len(b) or not out:
        out.append(f"keys {[k for k, _, _ in a]} vs {[k for k, _, _ in b]}")
    return out


@dataclass(frozen=True)
class Summary:
    """A GGUF's header in comparable form. ``kvs``: (key, type name such as ``UINT32`` or
    ``ARRAY[STRING]``, value) in file order; strings are decoded with ``surrogateescape`` so
    non-UTF-8 bytes survive a JSON round trip exactly, arrays are lists. ``tensors``: (name,
    ggml type name, shape in ggml order: ne[0] first) in file order."""

    kvs: tuple[tuple[str, str, Any], ...]
    tensors: tuple[tuple[str, str, tuple[int, ...]], ...]

    def to_json(self) -> dict:
        return {"kvs": [list(kv) for kv in self.kvs], "tensors": [[n, t, list(s)] for n, t, s in self.tensors]}

    @classmethod
    def from_json(cls, d: dict) -> "Summary":
        return cls(tuple((k, t, v) for k, t, v in d["kvs"]), tuple((n, t, tuple(s)) for n, t, s in d["tensors"]))


@dataclass(frozen=True)
class Job:
    drafter: Path
    target: Path
    outtype: str = "auto"
    # converter flags that pick the model class, e.g. ("--dspark",) for a DeepSeek-V4 checkpoint's
    # DSpark draft (DeepseekV4DSparkModel); part of the cache key only when present
    extra: tuple[str, ...] = ()


def gguf_summary(path: str | os.PathLike[str]) -> Summary:
    """The header of any GGUF file (tensor data is never read)."""
    h = read_header(path)
    kvs = []
    for key in h.kv_order:
        kv = h.kv[key]
        value = kv.value
        if isinstance(value, StringArray):
            value = [b.decode("utf-8", "surrogateescape") for b in value.raw_items()]
        elif isinstance(value, str) and key in h.non_utf8:
            value = raw_string(h.path, kv).decode("utf-8", "surrogateescape")
        elif isinstance(value, (tuple, list)):
            value = list(value)
        kvs.append((key, type_name(kv.type, kv.sub_type), value))
    tensors = tuple((t.name, t.ggml_type.name, tuple(int(d) for d in t.shape_ne)) for t in h.tensors)
    return Summary(tuple(kvs), tensors)


# --- comparing ---------------------------------------------------------------------------

def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _show(v: Any, width: int = 60) -> str:
    s = repr(v)
    return s if len(s) <= width else s[:width - 3] + "..."


def _value_diff(a: Any, b: Any) -> str | None:
    """Where ``a`` (ours) and ``b`` (reference) first differ, or None."""
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            if not _same(x, y):
                return f"element {i}: {_show(x)} vs {_show(y)} (lengths {len(a)} vs {len(b)})"
        if len(a) != len(b):
            return f"length {len(a)} vs {len(b)} (equal for the first {min(len(a), len(b))})"
        return None
    return None if _same(a, b) else f"{_show(a)} vs {_show(b)}"


def summary_diff(ours: Summary, ref: Summary, ignore: Iterable[str] = IGNORED, limit: int = 20) -> list[str]:
    """Every difference, one short line each (``ours vs reference``); empty when they match.
    KV and tensor order are not compared: llama.cpp looks both up by name."""
    ignore = set(ignore)
    out: list[str] = []
    a = {k: (t, v) for k, t, v in ours.kvs if k not in ignore}
    b = {k: (t, v) for k, t, v in ref.kvs if k not in ignore}
    if missing := [k for k in b if k not in a]:
        out.append("KVs missing from ours: " + ", ".join(missing))
    if extra := [k for k in a if k not in b]:
        out.append("KVs only in ours: " + ", ".join(extra))
    for k in (k for k in b if k in a):
        (ta, va), (tb, vb) = a[k], b[k]
        if ta != tb:
            out.append(f"{k}: type {ta} vs {tb}")
        elif (d := _value_diff(va, vb)) is not None:
            out.append(f"{k}: {d}")
    ta = {n: (t, s) for n, t, s in ours.tensors}
    tb = {n: (t, s) for n, t, s in ref.tensors}
    if missing := [n for n in tb if n not in ta]:
        out.append("tensors missing from ours: " + ", ".join(missing))
    if extra := [n for n in ta if n not in tb]:
        out.append("tensors only in ours: " + ", ".join(extra))
    for n in (n for n in tb if n in ta):
        (ya, sa), (yb, sb) = ta[n], tb[n]
        parts = ([f"type {ya} vs {yb}"] if ya != yb else []) + ([f"shape {list(sa)} vs {list(sb)}"] if sa != sb else [])
        if parts:
            out.append(f"tensor {n}: " + "; ".join(parts))
    if len(out) > limit:
        out = out[:limit] + [f"... and {len(out) - limit} more"]
    return out


def assert_same_summary(ours: Summary, ref: Summary, ignore: Iterable[str] = IGNORED) -> None:
    diff = summary_diff(ours, ref, ignore)
    if diff:
        raise AssertionError("GGUF headers differ (ours vs reference):\n  " + "\n  ".join(diff))


def summary_gguf(summary: Summary, path: Path) -> Path:
    """A GGUF with ``summary``'s KVs and tensor infos and a hole for its data: what a header-only
    reference run wrote, rebuilt from the cache (e.g. to show that real llama.cpp refuses it)."""
    import gguf
    import numpy as np

    kvs = {k: v for k, _, v in summary.kvs}
    w = gguf.GGUFWriter(path, kvs["general.architecture"])
    for key, type_, value in summary.kvs:
        if key == "general.architecture":
            continue
        sub = gguf.GGUFValueType[type_[6:-1]] if type_.startswith("ARRAY[") else None
        if sub == gguf.GGUFValueType.STRING:
            value = [v.encode("utf-8", "surrogateescape") for v in value]
        elif isinstance(value, str):
            value = value.encode("utf-8", "surrogateescape")
        w.add_key_value(key, value, gguf.GGUFValueType.ARRAY if sub else gguf.GGUFValueType[type_], sub_type=sub)
    size = 0
    for name, type_, ne in summary.tensors:
        qtype = gguf.GGMLQuantizationType[type_]
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        nbytes = math.prod(ne) // block * type_size
        w.add_tensor_info(name, tuple(reversed(ne)), np.dtype(np.float32), nbytes, raw_dtype=qtype)
        size += nbytes + (-nbytes % w.data_alignment)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    with open(path, "r+b") as f:
        end = f.seek(0, os.SEEK_END)
        f.truncate(end + (-end % w.data_alignment) + size)
    return path


# --- running the vendored converter ------------------------------------------------------

def llama_src() -> Path | None:
    """The vendored llama.cpp sources (``DFLASH_LLAMA_CPP_SRC``), or None (see ``llama_cpp_src``)."""
    return llama_cpp_src()


def run_converter(jobs: Sequence[Job], outs: Sequence[Path], *, header_only: bool | Sequence[bool],
                  src: Path) -> None:
    """Convert each job with the vendored converter into its ``outs`` path (log beside it, as
    ``.log``), all in one process; ``header_only`` for all jobs or one flag per job.

    Raises:
        AssertionError: a job failed; the message holds the end of its log.
    """
    flags = [header_only] * len(jobs) if isinstance(header_only, bool) else list(header_only)
    runs = [ConverterRun((str(j.drafter), *j.extra, "--target-model-dir", str(j.target), "--outfile", str(o),
                          "--outtype", j.outtype), o.with_suffix(".log"), header_only=h)
            for j, o, h in zip(jobs, outs, flags)]
    for job, run, code in zip(jobs, runs, run_jobs(runs, src)):
        if code != 0:
            raise AssertionError(f"convert_hf_to_gguf.py failed on {job.drafter} (exit {code}):\n{log_tail(run, 2000)}")


LOAD = r'''
import sys, llama_cpp
llama_cpp.llama_backend_init()
p = llama_cpp.llama_model_default_params()
if sys.argv[2] == "cheap":
    # Only metadata and simulated allocations, no mmap: every name, type, shape, KV and
    # file-bounds check still runs, no tensor byte is read. (no_alloc with mmap asserts.)
    p.no_alloc = True
    p.load_mode = 0  # LLAMA_LOAD_MODE_NONE
m = llama_cpp.llama_model_load_from_file(sys.argv[1].encode(), p)
print("LOADED" if m else "FAILED")
'''


def llama_load(path: str | os.PathLike[str], *, cheap: bool = True) -> str:
    """Load ``path`` with real llama.cpp in a subprocess: "LOADED", "FAILED" or "CRASHED ...".

    The default load mmaps with MAP_POPULATE and so faults in every page of the file: a 5 GB
    sparse drafter costs ~11 s and 4.9 GB of RSS (zero-filled page cache). ``cheap`` loads
    with ``no_alloc`` and no mmap, which runs the same checks and reads no tensor data.
    """
    r = subprocess.run([sys.executable, "-c", LOAD, str(path), "cheap" if cheap else "full"],
                       capture_output=True, text=True, timeout=300)
    return r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "CRASHED " + r.stderr[-500:]


# --- cache -------------------------------------------------------------------------------

def digest_file(h, p: Path) -> None:
    with open(p, "rb") as f:
        if p.suffix == ".safetensors":
            # The header (names, dtypes, shapes, offsets) and the size, not the weights: a
            # header-only run never evaluates a weight of the drafter, and the test corpus
            # stores none (sparse files, which would hash as gigabytes of zeros).
            n = int.from_bytes(f.read(8), "little")
            h.update(b"safetensors header %d %d " % (os.fstat(f.fileno()).st_size, n))
            h.update(f.read(min(n, 100 << 20)))
            return
        while block := f.read(1 << 20):
            h.update(block)


def _digest_dir(h, d: Path) -> None:
    """Every file under ``d`` by relative path (dot-files skipped: a Hub download's
    ``.cache/`` or a ``.git`` is not read by the converter)."""
    for root, dirs, files in os.walk(d, followlinks=True):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            p = Path(root) / name
            h.update(f"\0file {p.relative_to(d).as_posix()}\0".encode())
            digest_file(h, p)


LIBRARIES = ("torch", "transformers", "tokenizers", "sentencepiece", "numpy", "protobuf")


@lru_cache(maxsize=8)
def converter_digest(src: Path, versions: bool = True) -> str:
    """The converter's code: the script, ``conversion/`` and ``gguf-py/gguf/``, plus (``versions``)
    the versions of the libraries it reads tokenizers with."""
    h = hashlib.sha256()
    files = [src / "convert_hf_to_gguf.py", *sorted((src / "conversion").rglob("*.py")),
             *sorted((src / "gguf-py" / "gguf").rglob("*.py"))]
    for p in files:
        h.update(f"\0{p.relative_to(src).as_posix()}\0".encode())
        h.update(p.read_bytes())
    for dist in LIBRARIES if versions else ():
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            version = "absent"
        h.update(f"\0{dist}={version}".encode())
    return h.hexdigest()


def cache_key(job: Job, src: Path, *, versions: bool = True) -> str:
    """Hash of: the drafter dir (its name, config.json, README.md, side files such as mask_embedding.pt,
    safetensors headers), the target dir's files, the outtype and extra flags, the converter's code and this
    runner (and, with ``versions``, the library versions)."""
    h = hashlib.sha256(f"format {SUMMARY_FORMAT}\0outtype {job.outtype}\0".encode())
    if job.extra:  # absent from the keys of jobs without flags, so their committed keys still hold
        h.update(("\0extra " + " ".join(job.extra) + "\0").encode())
    h.update(hashlib.sha256(RUNNER.encode()).digest())
    h.update(converter_digest(src, versions).encode())
    h.update(b"\0drafter\0")
    h.update(Path(job.drafter).name.encode())  # general.name etc. come from the directory's name too
    _digest_dir(h, Path(job.drafter))
    h.update(b"\0target\0")
    _digest_dir(h, Path(job.target))
    return h.hexdigest()[:40]


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def reference_headers(jobs: Sequence[Job], *, src: Path, cache_dir: Path = CACHE_DIR,
                      work_dir: Path | None = None) -> list[Summary]:
    """The vendored converter's header for each job: from the cache, or from one header-only
    run of all the misses (then cached). A miss's GGUF is written as ``<key>.gguf`` in
    ``work_dir`` and kept there, or in a temp dir that is removed."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    keys = [cache_key(j, src) for j in jobs]
    found: dict[str, Summary] = {}
    misses: dict[str, Job] = {}
    for job, key in zip(jobs, keys):
        entry = cache_dir / f"{key}.json"
        if key in found or key in misses:
            continue
        if entry.is_file():
            log.info("reference cache hit: %s (%s, %s)", job.drafter, job.outtype, key)
            found[key] = Summary.from_json(json.loads(entry.read_text())["summary"])
        else:
            log.info("reference cache miss: %s (%s, %s)", job.drafter, job.outtype, key)
            misses[key] = job
    if misses:
        with tempfile.TemporaryDirectory(prefix="llamacpp-ref-") as tmp:
            work = Path(work_dir or tmp)
            work.mkdir(parents=True, exist_ok=True)
            outs = [work / f"{key}.gguf" for key in misses]
            run_converter(list(misses.values()), outs, header_only=True, src=src)
            for (key, job), out in zip(misses.items(), outs):
                found[key] = summary = gguf_summary(out)
                record = {"format": SUMMARY_FORMAT, "drafter": str(job.drafter), "target": str(job.target),
                          "outtype": job.outtype, "summary": summary.to_json()}
                _write_atomic(cache_dir / f"{key}.json", json.dumps(record))
    return [found[k] for k in keys]


def reference_header(drafter_dir: str | os.PathLike[str], target_dir: str | os.PathLike[str], outtype: str = "auto",
                     *, src: Path | None = None, cache_dir: Path = CACHE_DIR) -> Summary:
    """One drafter's reference header (cached). ``src`` defaults to ``DFLASH_LLAMA_CPP_SRC``."""
    src = src or llama_src()
    if src is None:
        raise RuntimeError("llama.cpp sources not found: set DFLASH_LLAMA_CPP_SRC")
    return reference_headers([Job(Path(drafter_dir), Path(target_dir), outtype)], src=src, cache_dir=cache_dir)[0]
