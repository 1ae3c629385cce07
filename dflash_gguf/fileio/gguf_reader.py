"""Reading a GGUF for the tools that need its tensors (retarget, quantize, compare, parity).

The header is validated first by our bounds-checked parser when available (gguf-py's
reader trusts lengths and fails on truncated files with numpy reshape errors); then
gguf-py's GGUFReader memory-maps the file so each tensor is read lazily, one at a time.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType

from ..errors import GGUFFormatError, OutputError
from .gguf_writer import KV


@dataclass(frozen=True)
class TensorEntry:
    name: str
    shape: tuple[int, ...]  # numpy order (last axis = ggml ne0)
    ggml_type: GGMLQuantizationType
    nbytes: int
    offset: int  # absolute file offset of the data


@dataclass
class GGUFFile:
    path: Path
    kvs: dict[str, KV]  # file order
    tensors: list[TensorEntry]
    reader: Any

    @property
    def arch(self) -> str | None:
        kv = self.kvs.get("general.architecture")
        return None if kv is None else str(kv.value)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {t.name: t.shape for t in self.tensors}

    def raw(self, entry: TensorEntry) -> np.ndarray:
        """The tensor's bytes as a flat uint8 view of the memory map (no copy)."""
        return np.asarray(self.reader.data[entry.offset: entry.offset + entry.nbytes])


def read_gguf(path: str | Path) -> GGUFFile:
    """Open a GGUF: validated header, KVs as typed KV values, lazily-mapped tensors.

    Raises:
        OutputError: the file does not exist.
        GGUFFormatError: the file is truncated or corrupt.
    """
    path = Path(path)
    if not path.is_file():
        raise OutputError(f"{path}: no such file")
    _validate_header(path)
    try:
        reader = GGUFReader(path, "r")
    except (ValueError, IndexError, KeyError, TypeError, OverflowError, UnicodeDecodeError) as exc:
        raise GGUFFormatError(f"{path}: not a readable GGUF ({exc}); re-download or re-convert it") from None
    kvs: dict[str, KV] = {}
    for name, f in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        typ = f.types[0]
        sub = f.types[1] if typ == GGUFValueType.ARRAY and len(f.types) > 1 else None
        value = f.contents()
        kvs[name] = KV(name, value, typ, sub)
    tensors = []
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        tensors.append(TensorEntry(t.name, shape, GGMLQuantizationType(int(t.tensor_type)), int(t.n_bytes),
                                   int(t.data_offset)))
    return GGUFFile(path=path, kvs=kvs, tensors=tensors, reader=reader)


def _validate_header(path: Path) -> None:
    try:
        from .gguf_header import read_header  # bounds-checked parser (never trusts a length)
    except ImportError:
        return
    read_header(path)
