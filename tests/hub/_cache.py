"""A Hugging Face cache built on disk with huggingface_hub's own layout, and offline mode, so the
repo-id tests run the real snapshot_download without the network.

Layout (huggingface_hub's cache): ``models--ORG--NAME/blobs/<sha256>`` holds the bytes,
``snapshots/<commit>/<file>`` links to the blob, ``refs/<branch or tag>`` holds the commit.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tests.conftest import RUNTIME

DRAFTER = RUNTIME / "drafter"          # config.json + model.safetensors
DRAFTER_SWA = RUNTIME / "drafter-swa"  # another drafter: a different snapshot of the same repo
DRAFTER_GGUF = RUNTIME / "drafter.gguf"  # DRAFTER, converted
TARGET = RUNTIME / "target"
REPO = "dflash-test/tiny-drafter"      # no such directory under the repo root (the tests' cwd)


def add_snapshot(cache: Path, repo_id: str, src: Path, *, refs: tuple[str, ...] = ("main",)) -> str:
    """Every file of the directory ``src`` as one snapshot of ``repo_id`` in ``cache``, named by
    ``refs``; returns its commit hash."""
    files = {p.name: p.read_bytes() for p in sorted(src.iterdir()) if p.is_file()}
    commit = hashlib.sha1(b"".join(n.encode() + d for n, d in files.items())).hexdigest()
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / name).symlink_to(os.path.relpath(blob, snap))
    for ref in refs:
        (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return commit


def offline_env(hf_home: Path) -> dict[str, str]:
    """The environment of a subprocess that must not reach the network: offline, and a cache of
    its own (HF_HUB_CACHE left to default to HF_HOME/hub, as a user's would)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN", "HF_ENDPOINT")}
    env.update(HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
    return env


@pytest.fixture
def hf_cache(tmp_path, monkeypatch) -> Path:
    """An empty cache at ``tmp_path/hf/hub``, in use and offline for this test, in this process too:
    huggingface_hub reads HF_HUB_CACHE and HF_HUB_OFFLINE into ``constants`` at import, so the
    environment alone would not reach it."""
    constants = pytest.importorskip("huggingface_hub.constants")
    home = tmp_path / "hf"
    cache = home / "hub"
    cache.mkdir(parents=True)
    for k, v in offline_env(home).items():
        monkeypatch.setenv(k, v)
    for k in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN", "HF_ENDPOINT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache
