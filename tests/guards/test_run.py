"""`check` end to end through ``main([...])``: every fixture clean, the JSON report, exit
codes 6 / 7 / 12 and their precedence, no tensor byte read without ``--deep``."""
from __future__ import annotations

import json
import os
from pathlib import Path

import gguf
import numpy as np
import pytest

from dflash_gguf.fileio.gguf_header import read_header
from tests.conftest import GUARD_FIXTURES
from tests.guards.conftest import DRAFTER, GUARDS, QWEN, SHARD1, SHARD2, offset_field, patch_u64


@pytest.mark.parametrize("path", GUARD_FIXTURES, ids=lambda p: p.name)
def test_every_fixture_is_clean(cli, path):
    rc, out, _ = cli("check", path, "--deep", "--no-progress")
    assert rc == 0, out
    assert ": OK (" in out


def test_check_json_schema(cli):
    rc, out, _ = cli("check", SHARD2, "--json")
    env = json.loads(out)
    assert set(env) == {"schema_version", "tool", "tool_version", "command", "exit_code", "verdict", "summary",
                        "files", "findings", "error", "payload"}
    assert env["command"] == "check" and env["verdict"] == "pass" and env["files"] == [str(SHARD2)]
    (doc,) = env["payload"]["files"]
    assert rc == 0 and set(doc) == {"file", "shards", "target", "deep", "exit_code", "summary", "findings"}
    assert doc["shards"] == [str(SHARD1), str(SHARD2)]
    assert doc["summary"] == {"errors": 0, "warnings": 0, "infos": 0, "tensors": 4,
                              "file_bytes": SHARD1.stat().st_size + SHARD2.stat().st_size, "bytes_scanned": 0}


@pytest.mark.parametrize("cut_at", ["kv", "tensor_info", "data"])
def test_check_truncated_is_6_with_offset(cli, tmp_path, cut_at):
    data = QWEN.read_bytes()
    h = read_header(QWEN)
    cut = {"kv": h.kv["tokenizer.chat_template"].offset + 20, "tensor_info": h.tensors[2].info_offset + 5,
           "data": h.tensors[2].offset_abs + 10}[cut_at]
    p = tmp_path / "m.gguf"
    p.write_bytes(data[:cut])
    rc, out, err = cli("check", p, "--json")
    doc = json.loads(out)
    assert rc == 6 and doc["exit_code"] == 6
    assert f"the file ends at {cut:,}" in doc["error"]["message"] and "truncated download?" in err


def test_target_missing_or_broken(cli, tmp_path):
    rc, _, err = cli("check", DRAFTER, "--target", tmp_path / "t.gguf")
    assert rc == 7 and "target GGUF not found" in err
    (tmp_path / "t.gguf").write_bytes(QWEN.read_bytes()[:100])
    rc, _, err = cli("check", DRAFTER, "--target", tmp_path / "t.gguf")
    assert rc == 6 and str(tmp_path / "t.gguf") in err


def test_integrity_errors_outrank_pairing(cli, tmp_path):
    p = tmp_path / "d.gguf"
    data = bytearray(DRAFTER.read_bytes())
    h = read_header(DRAFTER)
    a, b = h.tensors_by_name["blk.0.attn_norm.weight"], h.tensors_by_name["output_norm.weight"]
    patch_u64(data, offset_field(h, a), b.offset_abs - h.data_offset)
    patch_u64(data, offset_field(h, b), a.offset_abs - h.data_offset)
    p.write_bytes(bytes(data))
    assert cli("check", p, "--target", GUARDS / "qwen3-8b-base.gguf")[0] == 12


class TensorDataRead(Exception):
    """Raised by ``DataTripwire`` at the first read of a tensor byte."""


class DataTripwire:
    """Every way dflash_gguf reads a file, instrumented for one file (matched by device and inode):
    a read through ``open()`` (``Path.read_bytes`` included; binary mode), ``os.read``, ``os.readv``,
    ``os.pread`` or ``os.preadv`` that reaches byte ``limit`` or beyond is recorded in ``reads`` and
    raises ``TensorDataRead``; ``mmap.mmap`` of the file maps only its bytes before ``limit`` (one
    that starts at or past it is recorded and raises), so a tensor byte read through a map is out of
    the map's bounds (an index raises IndexError, a slice comes back short). ``seen`` counts the
    instrumented reads and maps of the file, within the limit or not: > 0 shows the file really was
    read through them."""

    def __init__(self, monkeypatch, path, limit: int) -> None:
        import builtins
        import io
        import mmap

        st = os.stat(path)
        self.key, self.size, self.limit = (st.st_dev, st.st_ino), st.st_size, limit
        self.reads: list[tuple[str, int, int]] = []
        self.seen = 0
        real_open, real_mmap = io.open, mmap.mmap
        trip = self

        def ours(fd: int) -> bool:
            try:
                st = os.fstat(fd)
            except (OSError, TypeError, ValueError):
                return False
            return (st.st_dev, st.st_ino) == trip.key

        def opened(file, mode="r", *args, **kwargs):
            f = real_open(file, mode, *args, **kwargs)
            return _Watched(f, trip) if "b" in mode and "r" in mode and ours(f.fileno()) else f

        def mapped(fileno, length, *args, **kwargs):
            if not ours(fileno):
                return real_mmap(fileno, length, *args, **kwargs)
            # mmap(fileno, length, flags, prot, access, offset)
            offset = kwargs.pop("offset", args[3] if len(args) > 3 else 0)
            end = offset + length if length else trip.size
            trip.note("mmap", offset, end if offset >= trip.limit else min(end, trip.limit))
            return real_mmap(fileno, min(end, trip.limit) - offset, *args[:3], offset=offset, **kwargs)

        def positional(name: str, n_arg: int, count_of):
            real = getattr(os, name)

            def call(fd, *args):
                if not ours(fd):
                    return real(fd, *args)
                start = args[n_arg] if n_arg >= 0 else os.lseek(fd, 0, os.SEEK_CUR)
                out = real(fd, *args)
                trip.note(name, start, start + count_of(out))
                return out
            monkeypatch.setattr(os, name, call)

        monkeypatch.setattr(builtins, "open", opened)
        monkeypatch.setattr(io, "open", opened)
        monkeypatch.setattr(mmap, "mmap", mapped)
        positional("read", -1, len)
        positional("readv", -1, int)
        positional("pread", 1, len)
        positional("preadv", 1, int)

    def note(self, how: str, start: int, end: int) -> None:
        """Bytes [start, end) of the file were read (or mapped) through ``how``."""
        self.seen += 1
        if end > self.limit:
            self.reads.append((how, start, end))
            raise TensorDataRead(f"{how} read bytes [{start:,}, {end:,}): the tensor data starts at {self.limit:,}")


class _Watched:
    """A binary file opened for reading, each read reported to a ``DataTripwire``."""

    def __init__(self, f, trip: DataTripwire) -> None:
        self._f, self._trip = f, trip

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()

    def __iter__(self):
        return iter(self.readline, b"")

    def _reader(name: str):  # noqa: N805 (a method factory, used in the class body)
        def read(self, *args, **kwargs):
            start = self._f.tell()
            out = getattr(self._f, name)(*args, **kwargs)
            self._trip.note(f"open().{name}", start, self._f.tell())
            return out
        return read

    read, read1, readinto, readinto1, readline, readlines = map(
        _reader, ("read", "read1", "readinto", "readinto1", "readline", "readlines"))


def _sparse_gguf(tmp_path) -> tuple[Path, int]:
    """A GGUF declaring 4 GiB of F16 tensor data that is never written (a sparse file), and the
    offset where that data starts."""
    p = tmp_path / "big.gguf"
    w = gguf.GGUFWriter(p, "llama")
    w.add_name("Big 70B Instruct")
    nbytes = 1 << 30
    for i in range(4):
        w.add_tensor_info(f"blk.{i}.ffn_up.weight", (1 << 14, 1 << 15), np.dtype(np.float16), nbytes)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_ti_data_to_file(); w.close()
    header_end = p.stat().st_size
    data_offset = header_end + (-header_end % 32)
    os.truncate(p, data_offset + 4 * nbytes)
    assert p.stat().st_size > 4 * nbytes and p.stat().st_blocks * 512 < 1 << 20  # really sparse
    assert read_header(p).data_offset == data_offset
    return p, data_offset


def test_multi_gb_sparse_file_is_checked_from_its_header_alone(cli, tmp_path, monkeypatch):
    p, data_offset = _sparse_gguf(tmp_path)
    trip = DataTripwire(monkeypatch, p, data_offset)
    rc, out, _ = cli("check", p)
    assert rc == 0, out
    assert trip.reads == [], "check read tensor data"
    assert trip.seen, "the header was not read through the instrumented calls: this test proves nothing"


def test_the_tripwire_catches_every_way_of_reading_tensor_data(tmp_path, monkeypatch):
    """The test above is only as good as its tripwire: reads of tensor bytes through open() (the
    deep scan), os.preadv (TensorReader) and a memory map (GGUFFile.raw) must all be caught."""
    import mmap

    from dflash_gguf.errors import GGUFFormatError
    from dflash_gguf.fileio.gguf_reader import TensorReader, read_gguf
    from dflash_gguf.guards.run import run_checks

    p, data_offset = _sparse_gguf(tmp_path)
    trip = DataTripwire(monkeypatch, p, data_offset)
    t = read_header(p).tensors[1]
    with pytest.raises(TensorDataRead):
        run_checks(p, deep=True)
    with TensorReader(p) as r, pytest.raises(TensorDataRead):
        r.read(t, 0, 16)
    with pytest.raises(GGUFFormatError, match="needs bytes up to"):  # the map ends where the data starts
        read_gguf(p).raw(t)
    assert [how for how, _, _ in trip.reads] == ["open().read", "preadv"]
    with open(p, "rb") as f, pytest.raises(TensorDataRead):  # a map of the data region itself
        mmap.mmap(f.fileno(), 4096, access=mmap.ACCESS_READ, offset=t.offset_abs - t.offset_abs % mmap.PAGESIZE)
    assert trip.reads[-1][0] == "mmap"
