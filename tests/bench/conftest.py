"""Helpers for the bench tests: the fake llama-server as an executable, model files for it, and
``bench`` runs in-process (``cli``) or as a subprocess (for signals)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT

FAKE = Path(__file__).with_name("fake_llama_server.py")
TARGET = FIXTURES / "guards" / "qwen3-8b.gguf"           # has a chat template
PLAIN_TARGET = FIXTURES / "guards" / "llama-3.1-8b.gguf"  # has none
DRAFTER = FIXTURES / "guards" / "qwen3-8b-dflash.gguf"    # arch dflash, block 16


@pytest.fixture
def fake_bin(tmp_path) -> Path:
    """An executable named llama-server that runs the fake (exec keeps the pid the launcher sees)."""
    d = tmp_path / "bin"
    d.mkdir()
    p = d / "llama-server"
    p.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return p


@pytest.fixture
def drafters(tmp_path) -> dict[str, Path]:
    """Drafter GGUFs whose names tell the fake how well they draft."""
    out = {}
    for name in ("good", "bad"):
        out[name] = tmp_path / f"{name}.gguf"
        shutil.copyfile(DRAFTER, out[name])
    return out


@pytest.fixture
def fake_env(monkeypatch, tmp_path):
    """Set fake-server switches for this test; returns the pidfile path."""
    pidfile = tmp_path / "server.pid"
    monkeypatch.setenv("FAKE_PIDFILE", str(pidfile))
    for k in list(os.environ):
        if k.startswith("FAKE_") and k != "FAKE_PIDFILE":
            monkeypatch.delenv(k)
    return pidfile


def pid_gone(pid: int, within: float = 5.0) -> bool:
    """True once ``pid`` no longer runs (a zombie counts as gone: it holds no memory)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def bench_json(cli, tmp_path, *args, name="r.json"):
    """Run ``bench ... --report FILE`` in-process: (exit code, report or None, stdout, stderr)."""
    out = tmp_path / name
    code, so, se = cli("bench", *map(str, args), "--report", out)
    return code, (json.loads(out.read_text()) if out.exists() else None), so, se


def bench_subprocess(*args, env=None) -> subprocess.Popen:
    e = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
         **(env or {})}
    # SIGINT back to its default: a shell starts background jobs with it ignored, and the child
    # would inherit that (a Ctrl-C test run from such a job would then test nothing)
    return subprocess.Popen([sys.executable, "-m", "dflash_gguf", "bench", *map(str, args)], cwd=ROOT, env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
