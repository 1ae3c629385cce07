"""Reading a GGUF's tensors (retarget, quantize, compare, parity, inspect).

Every file goes through the bounds-checked header parser (``gguf_header``): bad strings, bad
offsets and bad types are one ``GGUFFormatError`` naming where and what. Tensor bytes are then
read lazily from a read-only memory map, one tensor at a time, at offsets the header already
checked against the file size. (gguf-py's ``GGUFReader`` is not used: it trusts lengths and
decodes strings strictly, so one flipped byte in a value is a traceback.)

Typed access to the metadata keys (``get_int``, ``get_str``, …) is in ``gguf_kv``.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import GGUFFormatError, InputError
from .gguf_header import GGUFHeader, read_header
from .types import KV, TensorInfo

if TYPE_CHECKING:
    import numpy as np


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


class TensorReader:
    """Positional reads of tensor bytes (``os.preadv``): safe from several threads at once, and
    nothing stays resident afterwards, unlike pages of ``GGUFFile.raw``'s memory map, which count
    in the process's RSS for as long as the map lives. Use as a context manager (one descriptor);
    ``path`` is the GGUF's (``GGUFFile.path``).

    Raises:
        InputError: the file cannot be opened.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = path
        try:
            self._fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise InputError(f"{path}: cannot read it ({exc.strerror})") from None

    def __enter__(self) -> TensorReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def read(self, t: TensorInfo, start: int, size: int, into: np.ndarray | None = None) -> np.ndarray:
        """``size`` bytes of tensor ``t``'s data from its byte ``start``, into ``into[:size]``
        (uint8) or a new buffer.

        Raises:
            GGUFFormatError: the file shrank since its header was read.
        """
        import numpy as np  # here, not at the top: header-only commands never read tensor data

        buf = np.empty(size, np.uint8) if into is None else into[:size]
        view, pos = memoryview(buf), t.offset_abs + start
        while view.nbytes:
            n = os.preadv(self._fd, [view], pos)
            if n == 0:
                raise GGUFFormatError(
                    f"{self.path}: tensor {t.name} needs bytes up to {t.end:,} but the file now ends at {pos:,} "
                    "(it changed while being read; re-run on a stable copy)")
            view, pos = view[n:], pos + n
        return buf


def read_gguf(path: str | Path) -> GGUFFile:
    """Open a GGUF: validated header (KVs, tensor infos), tensor data mapped on first use.

    Raises:
        InputError: the file does not exist or cannot be read.
        GGUFFormatError: the file is truncated or corrupt.
    """
    return GGUFFile(read_header(path))


def _map_file(h: GGUFHeader) -> np.ndarray:
    import numpy as np  # here, not at the top: header-only commands (inspect, checks) never map data

    try:
        with open(h.path, "rb") as f:
            if h.file_size == 0:
                return np.zeros(0, np.uint8)
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise InputError(f"{h.path}: cannot read it ({exc.strerror})") from None
    return np.frombuffer(mm, dtype=np.uint8)

