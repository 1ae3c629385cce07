"""Reading a GGUF's tensors (retarget, quantize, compare, parity, inspect).

Every file goes through the bounds-checked header parser (``gguf_header``): bad strings, bad
offsets and bad types are one ``GGUFFormatError`` naming where and what. Tensor bytes are then
read lazily from a read-only memory map, one tensor at a time, at offsets the header already
checked against the file size. (gguf-py's ``GGUFReader`` is not used: it trusts lengths and
decodes strings strictly, so one flipped byte in a value is a traceback.)
"""
from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import GGUFFormatError, OutputError
from .gguf_header import GGUFHeader, read_header
from .types import KV, TensorInfo


@dataclass
class GGUFFile:
    """A validated header plus lazy access to tensor bytes."""

    header: GGUFHeader
    _map: np.ndarray | None = field(default=None, repr=False)

    @property
    def path(self) -> Path:
        return self.header.path

    @property
    def kvs(self) -> dict[str, KV]:
        """Every metadata pair in file order, keyed by name."""
        return self.header.kv

    @property
    def tensors(self) -> tuple[TensorInfo, ...]:
        return self.header.tensors

    @property
    def arch(self) -> str | None:
        return self.header.arch

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {t.name: t.shape for t in self.tensors}

    def raw(self, t: TensorInfo) -> np.ndarray:
        """The tensor's bytes as a flat uint8 view of the memory map (no copy).

        Raises:
            GGUFFormatError: the file shrank since its header was read.
        """
        if self._map is None:
            self._map = _map_file(self.header)
        if t.end > len(self._map):
            raise GGUFFormatError(f"{self.path}: tensor {t.name} needs bytes up to {t.end:,} but the file now ends "
                                  f"at {len(self._map):,} (it changed while being read; re-run on a stable copy)")
        return self._map[t.offset_abs: t.end]


def read_gguf(path: str | Path) -> GGUFFile:
    """Open a GGUF: validated header (KVs, tensor infos), tensor data mapped on first use.

    Raises:
        OutputError: the file does not exist or cannot be read.
        GGUFFormatError: the file is truncated or corrupt.
    """
    return GGUFFile(read_header(path))


def _map_file(h: GGUFHeader) -> np.ndarray:
    try:
        with open(h.path, "rb") as f:
            if h.file_size == 0:
                return np.zeros(0, np.uint8)
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise OutputError(f"{h.path}: cannot read it ({exc.strerror})") from None
    return np.frombuffer(mm, dtype=np.uint8)
