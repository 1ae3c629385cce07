"""Split GGUFs: missing shards, inconsistent split keys, a renamed shard."""
from __future__ import annotations

import shutil
import struct
from pathlib import Path

from dflash_gguf.fileio.gguf_header import read_header
from dflash_gguf.guards.run import run_checks
from tests.guards.conftest import SHARD1, SHARD2, codes


def test_incomplete_shards_are_6_for_check_instruct(cli, tmp_path):
    shutil.copy(SHARD1, tmp_path / SHARD1.name)
    rc, _, err = cli("check-instruct", tmp_path / SHARD1.name)
    assert rc == 6 and "1 of 2 shards missing: qwen3-8b-sharded-00002-of-00002.gguf" in err
    shutil.copy(SHARD2, tmp_path / SHARD2.name)
    (tmp_path / SHARD1.name).unlink()
    rc, _, err = cli("check-instruct", tmp_path / SHARD2.name)
    assert rc == 6 and "the first shard is missing" in err


def _copy_shards(tmp_path: Path) -> tuple[Path, Path]:
    return Path(shutil.copy(SHARD1, tmp_path)), Path(shutil.copy(SHARD2, tmp_path))


def test_missing_shard_is_a_finding_for_check(cli, tmp_path):
    s1, s2 = _copy_shards(tmp_path)
    s2.unlink()
    rc, out, _ = cli("check", s1)
    assert rc == 12 and "shard-missing: 1 of 2 shards missing" in out


def test_inconsistent_split_keys(tmp_path):
    s1, s2 = _copy_shards(tmp_path)
    h = read_header(s2)
    data = bytearray(s2.read_bytes())
    f = h.kv["split.tensors.count"]
    pos = f.offset + 8 + len(f.key) + 4
    data[pos:pos + 4] = struct.pack("<i", 5)
    s2.write_bytes(bytes(data))
    r = run_checks(s1)
    assert "split-keys-mismatch" in codes(r)
    assert any("disagree on split.tensors.count ([4, 5])" in f.message for f in r.findings)


def test_renamed_shard(tmp_path):
    p = Path(shutil.copy(SHARD1, tmp_path / "model.gguf"))
    assert codes(run_checks(p)) == {"split-not-named"}
