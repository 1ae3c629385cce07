"""What the CI-integration tests share: the repository root, the workflow in docs/ci.md, and how
to run a shell step the way a GitHub runner does (bash -e -o pipefail, GITHUB_* files)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def yaml():
    return pytest.importorskip("yaml")  # pyyaml: gguf-py's own dependency


def doc_workflow_text() -> str:
    """The first yaml block under "## A complete workflow" in docs/ci.md."""
    text = (ROOT / "docs" / "ci.md").read_text()
    section = text.split("## A complete workflow", 1)[1]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


def run_step(script: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """A `run:` step as the runner's default bash shell runs it, with our CLI on PATH."""
    bin_dir = str(Path(sys.executable).parent)
    full = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), **(env or {})}
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=600)


def github_env(tmp_path: Path) -> dict[str, str]:
    for name in ("summary.md", "output.txt"):
        (tmp_path / name).touch()
    return {"GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "GITHUB_OUTPUT": str(tmp_path / "output.txt")}


def workdir(tmp_path: Path) -> Path:
    """A checkout-like directory: fixtures/ as in the repository, the reports written beside it."""
    d = tmp_path / "checkout"
    d.mkdir()
    (d / "fixtures").symlink_to(ROOT / "fixtures")
    return d
