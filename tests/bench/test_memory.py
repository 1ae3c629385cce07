"""The memory guard: sizes of every shard, a refusal naming them, 'inf' turning it off."""
import math

import pytest

from dflash_gguf.bench import memory
from dflash_gguf.errors import MemoryGuardError


def test_model_bytes_counts_every_shard(tmp_path):
    for i, n in ((1, 100), (2, 50)):
        (tmp_path / f"m-{i:05d}-of-00002.gguf").write_bytes(b"x" * n)
    (tmp_path / "single.gguf").write_bytes(b"x" * 7)
    assert memory.model_bytes(tmp_path / "m-00001-of-00002.gguf") == 150
    assert memory.model_bytes(tmp_path / "m-00002-of-00002.gguf") == 150
    assert memory.model_bytes(tmp_path / "single.gguf") == 7


def test_refusal_names_sizes_and_limit(tmp_path):
    t, d = tmp_path / "t.gguf", tmp_path / "d.gguf"
    t.write_bytes(b"x" * 3000)
    d.write_bytes(b"x" * 1000)
    with pytest.raises(MemoryGuardError) as e:
        memory.check("d.gguf", {"target": t, "drafter": d}, 2000, "--max-memory")
    msg = str(e.value)
    assert "target" in msg and "drafter" in msg and "--max-memory" in msg and "\n" not in msg
    assert memory.check("d.gguf", {"target": t}, math.inf, "--max-memory") == 3000
    assert memory.check("d.gguf", {"target": t, "drafter": d}, None, "unknown") == 4000


def test_default_limit_is_a_share_of_mem_available(monkeypatch):
    monkeypatch.setattr(memory, "mem_available", lambda: 10 * memory.GIB)
    limit, how = memory.default_limit()
    assert limit == pytest.approx(9 * memory.GIB) and "MemAvailable" in how
    assert memory.mem_available.__module__  # the real reader works on this Linux box too


@pytest.mark.parametrize("gib", [math.nan, -1.0, -math.inf])
def test_a_limit_that_would_switch_the_guard_off_silently_is_refused(tmp_path, gib):
    from dflash_gguf.errors import UsageError

    t = tmp_path / "t.gguf"
    t.write_bytes(b"x" * 3000)
    with pytest.raises(UsageError, match="--max-memory"):
        memory.check_limit_gib(gib)
    with pytest.raises(UsageError):
        memory.check("t", {"target": t}, gib * memory.GIB, "--max-memory")
