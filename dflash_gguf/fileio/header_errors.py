"""The ways a GGUF header cannot be trusted: one class per failure, all ``GGUFFormatError``
(exit code 6), each carrying the byte offset of the problem.
"""
from __future__ import annotations

from ..errors import GGUFFormatError


class GGUFHeaderError(GGUFFormatError):
    """A GGUF header cannot be trusted; ``offset`` is the byte where the problem is."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


class NotGGUFError(GGUFHeaderError):
    """The file does not start with the GGUF magic."""


class UnsupportedVersionError(GGUFHeaderError):
    """GGUF version 0, 1 (32-bit counts), newer than 3, or a big-endian file."""


class TruncatedError(GGUFHeaderError):
    """The file ends before a byte the header says must exist."""


class LimitError(GGUFHeaderError):
    """A count or length is beyond what any real file has (corrupt field)."""


class InvalidKVError(GGUFHeaderError):
    """A metadata pair is malformed: value type, empty or duplicate key, bad alignment."""


class InvalidTensorInfoError(GGUFHeaderError):
    """A tensor info is malformed: dims, type, block size, size overflow, offset, duplicate."""


class TensorOverlapError(GGUFHeaderError):
    """Two tensors' data ranges overlap."""
