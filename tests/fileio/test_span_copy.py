"""span_copy's page-cache and block handling: every byte written has its blocks reserved first
(no delayed allocation left for a rename over an old output to flush), and the cache of the
output being replaced is dropped, on a second thread, before the new one is published."""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from dflash_gguf.fileio import gguf_writer, span_copy
from dflash_gguf.fileio.gguf_constants import GGMLQuantizationType
from dflash_gguf.fileio.gguf_writer import FileSpan, TensorOut, write_gguf
from dflash_gguf.fileio.types import kv_str

F32 = GGMLQuantizationType.F32
KVS = [kv_str("test.name", "blocks")]


def _tensors(tmp_path) -> list[TensorOut]:
    """Arrays and file spans, small and large, with all-zero pieces (holes) among them."""
    rng = np.random.default_rng(1)
    dense = rng.standard_normal((300, 1000), dtype=np.float32)   # > 1 MiB: several pieces
    norm = rng.standard_normal(77, dtype=np.float32)              # a few hundred bytes
    gappy = rng.standard_normal((64, 1024), dtype=np.float32)
    gappy[8:40] = 0                                               # whole zero pieces: holes
    src = tmp_path / "src.bin"
    src.write_bytes(dense.tobytes() + norm.tobytes())
    return [TensorOut("norm", norm.shape, F32, norm.nbytes, lambda: norm),
            TensorOut("gappy", gappy.shape, F32, gappy.nbytes, lambda: gappy),
            TensorOut("span", dense.shape, F32, dense.nbytes, lambda: FileSpan(src, 0, dense.nbytes, "span")),
            TensorOut("span_norm", norm.shape, F32, norm.nbytes,
                      lambda: FileSpan(src, dense.nbytes, norm.nbytes, "span_norm"))]


@pytest.mark.parametrize("unmappable", [False, True])
def test_every_written_byte_is_reserved_and_holes_are_not(tmp_path, monkeypatch, unmappable):
    """The header, small tensors and every copied range are fallocate'd before they are written;
    all-zero pieces are not (they stay holes)."""
    import mmap

    monkeypatch.setattr(gguf_writer, "HOLE_BYTES", 4096)
    monkeypatch.setattr(span_copy, "WINDOW_BYTES", 10_000)
    if unmappable:
        def refuse(*args, **kwargs):
            raise OSError(19, "No such device")
        monkeypatch.setattr(mmap, "mmap", refuse)
    reserved, written = [], []

    def fallocate(fd, mode, offset, n):
        reserved.append((offset, offset + n))
        return 0
    monkeypatch.setattr(span_copy, "_fallocate", fallocate)
    real_write_all = span_copy.write_all

    def record(fout, buf):
        at = fout.tell()
        assert any(a <= at and at + buf.nbytes <= b for a, b in reserved), f"[{at}, +{buf.nbytes}) not reserved"
        written.append((at, at + buf.nbytes))
        real_write_all(fout, buf)
    monkeypatch.setattr(span_copy, "write_all", record)
    monkeypatch.setattr(gguf_writer, "write_all", record)
    out = tmp_path / "o.gguf"
    write_gguf(out, "test", KVS, _tensors(tmp_path))
    data = out.read_bytes()
    assert written and written[0][0] == 0  # the header went through the check too
    covered = np.zeros(len(data), bool)
    for a, b in reserved:
        covered[a:b] = True
    nonzero = np.frombuffer(data, np.uint8) != 0
    assert not (nonzero & ~covered).any()
    # the zero rows of "gappy" (32 KiB of 4 KiB pieces) were seeked over, not reserved
    assert (~covered).sum() >= 7 * 4096


def test_reserve_ignores_a_file_system_without_fallocate(tmp_path, monkeypatch):
    monkeypatch.setattr(span_copy, "_fallocate", False)
    with open(tmp_path / "f", "wb") as f:
        span_copy.reserve(f.fileno(), 0, 1 << 20)  # no error, nothing allocated
    assert os.path.getsize(tmp_path / "f") == 0


@pytest.fixture
def fadvised(monkeypatch):
    """The (device, inode) of every file whose cache release_cache drops."""
    calls = []

    def fadvise(fd, offset, n, advice):
        assert advice == os.POSIX_FADV_DONTNEED and (offset, n) == (0, 0)
        st = os.fstat(fd)
        calls.append((st.st_dev, st.st_ino))
    monkeypatch.setattr(os, "posix_fadvise", fadvise, raising=False)
    monkeypatch.setattr(span_copy, "RELEASE_MIN_BYTES", 1000)
    monkeypatch.setattr(gguf_writer, "RELEASE_MIN_BYTES", 1000)
    return calls


def _ident(path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def test_release_cache_drops_a_replaceable_file_only(tmp_path, fadvised):
    big, small = tmp_path / "big", tmp_path / "small"
    big.write_bytes(bytes(5000))
    small.write_bytes(bytes(10))
    span_copy.release_cache(big)
    span_copy.release_cache(small)  # too small to be worth it
    assert fadvised == [_ident(big)]
    fadvised.clear()
    # a symlink: the rename replaces the link, and its target keeps its cache
    (tmp_path / "link").symlink_to(big)
    span_copy.release_cache(tmp_path / "link")
    # a second hard link: the rename frees nothing, and the other name's readers keep their cache
    os.link(big, tmp_path / "hard")
    span_copy.release_cache(big)
    # absent, a directory, a FIFO (opened without blocking)
    span_copy.release_cache(tmp_path / "absent")
    span_copy.release_cache(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    span_copy.release_cache(tmp_path / "fifo")
    assert fadvised == []


def test_forced_write_releases_the_old_output_before_publishing(tmp_path, fadvised, monkeypatch):
    out = tmp_path / "o.gguf"
    out.write_bytes(bytes(5000))
    old = _ident(out)
    events = []
    real_release, real_replace = gguf_writer.release_cache, os.replace

    def slow_release(path):
        time.sleep(0.2)  # still running when the data is written: the rename must wait for it
        real_release(path)
        events.append(("released", threading.current_thread() is threading.main_thread()))

    def replace(src, dst):
        events.append(("replaced", _ident(dst) == old))
        real_replace(src, dst)
    monkeypatch.setattr(gguf_writer, "release_cache", slow_release)
    monkeypatch.setattr(os, "replace", replace)
    write_gguf(out, "test", KVS, _tensors(tmp_path), force=True)
    assert events == [("released", False), ("replaced", True)]
    assert fadvised == [old] and _ident(out) != old


def test_no_release_without_an_old_output_or_on_failure(tmp_path, fadvised, monkeypatch):
    out = tmp_path / "o.gguf"
    write_gguf(out, "test", KVS, _tensors(tmp_path), force=True)  # nothing to replace
    write_gguf(tmp_path / "p.gguf", "test", KVS, _tensors(tmp_path))  # not forced
    assert fadvised == []
    # a failed write leaves the old output whole (its bytes are on disk whatever its cache holds)
    before = out.read_bytes()

    def boom():
        raise RuntimeError("producer failed")
    with pytest.raises(RuntimeError, match="producer failed"):
        write_gguf(out, "test", KVS, [TensorOut("t", (4,), F32, 16, boom)], force=True)
    assert out.read_bytes() == before
