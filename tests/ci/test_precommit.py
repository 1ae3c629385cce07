""".pre-commit-hooks.yaml, run by the real pre-commit (`try-repo`, which installs this checkout in
its own environment) in a temporary git repository: good GGUFs pass, a truncated one is refused,
a base-model target is refused, a drafter is not judged as a target."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci.conftest import ROOT

GUARDS = ROOT / "fixtures" / "guards"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=repo, check=True,
                   capture_output=True)


@pytest.fixture(scope="module")
def try_repo(tmp_path_factory):
    pytest.importorskip("pre_commit")
    if shutil.which("git") is None:
        pytest.skip("needs git")
    home = tmp_path_factory.mktemp("pre-commit-home")  # its own cache: the hook environment is built once

    def run(repo: Path, hook: str, *files: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "PRE_COMMIT_HOME": str(home), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        env.pop("PRE_COMMIT", None)
        return subprocess.run([sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), hook, "--files", *files,
                               "--color", "never"], cwd=repo, env=env, capture_output=True, text=True, timeout=900)

    return run


def _repo(tmp_path: Path, files: dict[str, bytes]) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    for name, data in files.items():
        (repo / name).write_bytes(data)
    _git(repo, "add", ".")
    return repo


def test_check_passes_good_files_and_refuses_a_truncated_one(tmp_path, try_repo):
    drafter = (GUARDS / "qwen3-8b-dflash.gguf").read_bytes()
    repo = _repo(tmp_path, {"drafter.gguf": drafter, "target.gguf": (GUARDS / "qwen3-8b.gguf").read_bytes(),
                            "cut.gguf": drafter[:3000], "notes.txt": b"not a gguf"})
    good = try_repo(repo, "dflash-gguf-check", "drafter.gguf", "target.gguf", "notes.txt")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "Passed" in good.stdout
    bad = try_repo(repo, "dflash-gguf-check", "drafter.gguf", "cut.gguf")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "Failed" in bad.stdout and "check-TruncatedError in cut.gguf" in bad.stdout


def test_check_instruct_refuses_a_base_target_and_skips_drafters(tmp_path, try_repo):
    repo = _repo(tmp_path, {"drafter.gguf": (GUARDS / "qwen3-8b-dflash.gguf").read_bytes(),
                            "instruct.gguf": (GUARDS / "qwen3-8b.gguf").read_bytes(),
                            "base.gguf": (GUARDS / "qwen3-8b-base.gguf").read_bytes()})
    good = try_repo(repo, "dflash-gguf-check-instruct", "drafter.gguf", "instruct.gguf")
    assert good.returncode == 0, good.stdout + good.stderr
    bad = try_repo(repo, "dflash-gguf-check-instruct", "drafter.gguf", "base.gguf")
    assert bad.returncode == 1 and "instruct-verdict-base in base.gguf" in bad.stdout, bad.stdout + bad.stderr
