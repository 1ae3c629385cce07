"""Shared test helpers: fixture paths and an in-process CLI runner."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
DRAFTERS = FIXTURES / "drafters"
TARGETS = FIXTURES / "targets"
BROKEN = FIXTURES / "broken"
# Golden vectors from ggml's C reference live beside the checkout (read-only).
SHARED = ROOT.parent / "shared"


@pytest.fixture
def cli(capsys):
    """Run ``dflash-gguf ARGS`` in-process; returns (exit_code, stdout, stderr)."""
    from dflash_gguf.cli import main

    def run(*args: str | os.PathLike):
        capsys.readouterr()
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run
