"""Every exit code of the CLI, in one place: the exception hierarchy (1-9, 13, 30, 32, 40-41, 130) and the
verdict codes of the commands whose answer can be "no" (10-13, 20, 31-32, 50).

The CLI catches DflashError only and prints ``str(err)`` as one line. Exit codes are
documented in docs/exit-codes.md; keep the two in step (a test checks that they agree).
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


class InputError(DflashError):
    """An input file or directory does not exist, is not the kind of file expected, or cannot be read.

    Exit code 5, shared with OutputError: scripts already test for 5 as "file not found", so
    splitting the class does not split the code.
    """

    exit_code = 5


class OutputError(DflashError):
    """An output exists (without --force), is not a regular file, or a write to it failed."""

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


class HubError(DflashError):
    """A Hugging Face repo id could not be resolved: no such repo or revision, no access (gated,
    private), offline with nothing cached, or the Hub unreachable (dflash_gguf/hub.py)."""

    exit_code = 9


class ParityFailure(DflashError):
    """The lossless check failed: speculative output differs from plain greedy decoding."""

    exit_code = 30


class ServerError(DflashError):
    """The inference server could not be started, died, or answered something unusable."""

    exit_code = 40


class MemoryGuardError(DflashError):
    """A bench configuration's model files exceed the memory the user allows (--max-memory)."""

    exit_code = 41


class Interrupted(DflashError):
    """Ctrl-C: the partial output was removed."""

    exit_code = 130


# Verdicts, not crashes: the command ran and the answer is "no" (docs/exit-codes.md).
EXIT_OK = 0
EXIT_BASE = 10          # check-instruct: verdict base
EXIT_UNKNOWN = 11       # check-instruct: verdict unknown (0 with --allow-unknown)
EXIT_FINDINGS = 12      # check: an error-severity finding in the file itself
EXIT_PAIRING = 13       # check --target (and bench, PairingError): drafter and target do not fit
EXIT_MISMATCH = 20      # compare-weights: a tensor out of tolerance, missing, extra or mis-shaped, or a constant differs
EXIT_GATE = 50          # gate: the release candidate is refused (an error-severity finding no waiver covers)
EXIT_PARITY_GATE = 31   # parity: lossless, but a gate failed (--min-acceptance-length, --max-acceptance-drop, --min-top1)


class PairingError(DflashError):
    """A drafter and the target it is to run with do not fit (pairing findings of severity error):
    ``bench`` refuses the pair before starting a server, with the code ``check --target`` gives it."""

    exit_code = EXIT_PAIRING

    def __init__(self, message: str, findings: tuple = ()) -> None:
        super().__init__(message)
        self.findings = tuple(findings)  # the guards' Finding records, for the CLI to list


EXIT_DIAGNOSE = 32      # diagnose: a stage lost more mean acceptance length than --max-stage-loss allows


class DiagnoseFailure(DflashError):
    """diagnose --max-stage-loss: a stage lost more mean acceptance length (beyond 1σ) than allowed, or the
    runtime failed with a drafter."""

    exit_code = EXIT_DIAGNOSE
