"""One exception hierarchy; each class carries the CLI exit code for its failure class.

The CLI catches DflashError only and prints ``str(err)`` as one line. Exit codes are
documented in docs/exit-codes.md; keep the two in step.
"""
from __future__ import annotations


class DflashError(Exception):
    """Base class: a clean, user-facing failure (no traceback)."""

    exit_code = 1


class UsageError(DflashError):
    """Flags that contradict each other or name something unsupported."""

    exit_code = 2


class ConfigError(DflashError):
    """config.json is missing, unreadable, or lacks / contradicts a required field."""

    exit_code = 3


class WeightsError(DflashError):
    """Safetensors weights are corrupt, truncated, or disagree with the config."""

    exit_code = 4


class OutputError(DflashError):
    """Input not found, output exists (without --force), or a write failed."""

    exit_code = 5


class GGUFFormatError(DflashError):
    """A GGUF file is truncated or corrupt (its header cannot be trusted)."""

    exit_code = 6


class TargetError(DflashError):
    """The target model (tokenizer, sizes) is missing or does not fit the drafter."""

    exit_code = 7


class QuantizationError(DflashError):
    """A tensor cannot be quantized as asked (NaN/inf, shape, already quantized)."""

    exit_code = 8


class Interrupted(DflashError):
    """Ctrl-C: the partial output was removed."""

    exit_code = 130
