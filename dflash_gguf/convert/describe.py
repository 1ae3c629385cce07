"""inspect: a GGUF's format, keys and tensors, with drafter taps in both conventions."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import GGUFFormatError
from ..formats import detect_format, file_family, meta_from_gguf
from ..formats.legacy_dspark import is_legacy_dspark, legacy_taps, migrate_command
from ..formats.meta import CONVERTER_KEY
from ..hub import commit_in_url
from ..fileio.gguf_reader import read_gguf


@dataclass(frozen=True)
class GGUFInfo:
    path: Path
    arch: str | None
    format: str | None
    taps_zlab: tuple[int, ...] | None
    taps_stored: tuple[int, ...] | None
    kvs: list[dict[str, Any]]
    tensors: list[dict[str, Any]]
    problem: str | None = None  # a drafter (by architecture) whose DFlash keys cannot be read: why
    dspark: dict[str, Any] | None = None  # the family's own parts (FileFamily.summary): DSpark heads and vocabulary
    provenance: dict[str, Any] | None = None  # provenance(): where the file came from and what wrote it
    legacy_dspark: str | None = None  # a legacy DSpark GGUF (fork layout): the command that migrates it

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path), "architecture": self.arch, "format": self.format,
            "target_layers": None if self.taps_zlab is None else {
                "zlab_output_of_layer": list(self.taps_zlab),
                "llamacpp_input_of_layer": [i + 1 for i in self.taps_zlab],
                "stored": list(self.taps_stored)},
            "drafter_problem": self.problem, "legacy_dspark": None if self.legacy_dspark is None else {
                "migrate": self.legacy_dspark}, "dspark": self.dspark, "provenance": self.provenance, "kv": self.kvs,
            "tensors": self.tensors,
        }


def provenance(kvs: dict[str, Any]) -> dict[str, Any]:
    """Where a file says it came from: its name, the source repo (``general.source.repo_url``) and
    the source at one revision (``general.source.url``; a Hugging Face ``…/tree/<commit>`` URL
    gives the commit), and the dflash-gguf version that wrote it. None where the file has no key."""
    def text(key: str) -> str | None:
        kv = kvs.get(key)
        return kv.value if kv is not None and isinstance(kv.value, str) else None

    url = text("general.source.url")
    commit = commit_in_url(url) if url else None
    return {"name": text("general.name"), "source_repo_url": text("general.source.repo_url"), "source_url": url,
            "commit": commit, "converter": text(CONVERTER_KEY)}


def inspect_gguf(path: str | Path) -> GGUFInfo:
    f = read_gguf(path)
    shapes = f.shapes()
    fmt = meta = problem = None
    if is_legacy_dspark(f.arch):  # the fork's layout: no mainline format reads it, retarget migrates it
        taps = legacy_taps(f.kvs)
        return GGUFInfo(
            path=Path(path), arch=f.arch, format=None, taps_zlab=taps,
            taps_stored=taps,  # stored as the z-lab ids
            kvs=[kv.to_json() for kv in f.kvs.values()], provenance=provenance(f.kvs),
            legacy_dspark=migrate_command(Path(path).name), tensors=_tensors(f))
    try:
        fmt, meta = meta_from_gguf(f.kvs, shapes, path)
    except GGUFFormatError as exc:
        # Not a drafter, or a drafter whose DFlash keys are broken: still show keys and tensors,
        # and for the latter its format and what is wrong.
        fmt = detect_format(f.arch or "", f.kvs, [t.name for t in f.tensors])
        if fmt is not None:
            problem = str(exc).removeprefix(f"{path}: ")
    return GGUFInfo(
        path=Path(path), arch=f.arch, format=None if fmt is None else fmt.name, problem=problem,
        taps_zlab=None if meta is None else tuple(meta.taps),
        taps_stored=None if meta is None else tuple(fmt.stored_taps(meta)),
        kvs=[kv.to_json() for kv in f.kvs.values()], provenance=provenance(f.kvs),
        dspark=None if fmt is None else file_family(f.kvs, list(shapes), f.arch or "").summary(
            f.kvs, shapes, f.arch or ""),
        tensors=_tensors(f),
    )


def _tensors(f) -> list[dict[str, Any]]:
    return [{"name": t.name, "ne": list(reversed(t.shape)), "type": t.ggml_type.name, "nbytes": t.nbytes,
             "offset": t.offset_abs} for t in f.tensors]
