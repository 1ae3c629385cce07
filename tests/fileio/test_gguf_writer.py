"""The streaming writer: byte-identical to gguf-py's plain writer, and sparse where data is zero."""
import os
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFWriter

from dflash_gguf.errors import OutputError, WeightsError
from dflash_gguf.fileio import gguf_writer, span_copy
from dflash_gguf.fileio.gguf_writer import FileSpan, TensorOut, write_gguf
from dflash_gguf.fileio.types import kv_str, kv_u32
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader

from dflash_gguf.fileio.gguf_reader import read_gguf
from dflash_gguf.fileio.gguf_writer import tensor_nbytes

F32 = GGMLQuantizationType.F32
KVS = [kv_u32("test.count", 7), kv_str("test.name", "holes")]


def tensor(name: str, arr: np.ndarray, chunk_rows: int | None = None) -> TensorOut:
    """An F32 tensor produced whole, or in row chunks of ``chunk_rows`` (chunks not aligned to
    the hole pieces are the case where a zero run spans two chunks)."""
    def produce():
        if chunk_rows is None:
            return arr
        return (arr[i:i + chunk_rows] for i in range(0, arr.shape[0], chunk_rows))
    return TensorOut(name, arr.shape, F32, arr.nbytes, produce)


def plain_gguf(path: Path, tensors: dict[str, np.ndarray]) -> bytes:
    """The same file written by gguf-py's own writer, which writes every byte."""
    w = GGUFWriter(path, "test")
    w.add_uint32("test.count", 7)
    w.add_string("test.name", "holes")
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


def allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


@pytest.fixture
def sparse_fs(tmp_path):
    """Skip where the filesystem does not keep holes (the byte-equality tests still run)."""
    probe = tmp_path / "probe"
    with open(probe, "wb") as f:
        f.truncate(16 << 20)
    if allocated(probe) >= 1 << 20:
        pytest.skip("this filesystem stores holes as data")
    probe.unlink()
    return tmp_path


def mixed_tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    dense = rng.standard_normal((37, 300), dtype=np.float32)
    zeros = np.zeros((64, 1000), np.float32)
    spotted = np.zeros((90, 333), np.float32)
    spotted[0, 0] = 1.0          # nonzero first byte of a piece
    spotted[45, 17] = -2.5       # one value in the middle of a zero run
    spotted[-1, -1] = 3.0        # nonzero last byte
    tail_zero = rng.standard_normal((50, 257), dtype=np.float32)
    tail_zero[20:] = 0           # the file ends in zeros: the final size must still be right
    return {"dense": dense, "zeros": zeros, "spotted": spotted, "neg_zero": np.full((10, 100), -0.0, np.float32),
            "tail_zero": tail_zero}


@pytest.mark.parametrize("chunk_rows", [None, 7])
def test_bytes_equal_gguf_py_plain_write(tmp_path, monkeypatch, chunk_rows):
    # Small pieces so the small tensors above hold many of them, aligned and not.
    monkeypatch.setattr(gguf_writer, "HOLE_BYTES", 4096)
    arrays = mixed_tensors()
    ours = tmp_path / "ours.gguf"
    write_gguf(ours, "test", KVS, [tensor(n, a, chunk_rows) for n, a in arrays.items()])
    assert ours.read_bytes() == plain_gguf(tmp_path / "plain.gguf", arrays)


def test_equal_with_real_piece_size_and_chunks_straddling_pieces(tmp_path):
    rng = np.random.default_rng(1)
    a = np.zeros((3000, 1001), np.float32)  # 12 MB: pieces of 1 MiB, rows of 4004 bytes
    a[1234] = rng.standard_normal(1001, dtype=np.float32)
    arrays = {"a": a, "b": rng.standard_normal((8, 8), dtype=np.float32)}
    ours = tmp_path / "ours.gguf"
    write_gguf(ours, "test", KVS, [tensor("a", a, 333), tensor("b", arrays["b"])])
    assert ours.read_bytes() == plain_gguf(tmp_path / "plain.gguf", arrays)


def test_gigabyte_of_zeros_takes_no_disk_blocks(sparse_fs):
    zero_chunk = np.zeros((16 << 20) // 4, np.float32)  # one buffer handed out 64 times
    n_chunks = 64
    t = TensorOut("z", (n_chunks * zero_chunk.size,), F32, n_chunks * zero_chunk.nbytes,
                  lambda: (zero_chunk for _ in range(n_chunks)))
    out = sparse_fs / "z.gguf"
    report = write_gguf(out, "test", KVS, [t])
    assert report.tensor_bytes == 1 << 30
    assert out.stat().st_size == report.file_size > 1 << 30
    assert allocated(out) <= 64 << 10  # the header's block(s) only
    with open(out, "rb") as f:  # reads back as zeros, to the last byte
        f.seek(-(8 << 20), os.SEEK_END)
        assert not any(f.read())


def test_zero_run_split_across_unaligned_chunks_is_a_hole(sparse_fs):
    # Rows of 1,000,004 bytes, one row a chunk: no chunk covers a whole 1 MiB piece on its own,
    # so the holes come only from a chunk's zero tail and the next chunk's zero head.
    a = np.zeros((16, 250_001), np.float32)
    out = sparse_fs / "z.gguf"
    write_gguf(out, "test", KVS, [tensor("z", a, 1)])
    assert allocated(out) <= 64 << 10


def test_dense_data_is_all_written(sparse_fs):
    a = np.random.default_rng(2).standard_normal((1024, 1024), dtype=np.float32)  # 4 MiB
    out = sparse_fs / "d.gguf"
    write_gguf(out, "test", KVS, [tensor("d", a, 100)])
    assert allocated(out) >= a.nbytes


def test_error_after_a_hole_leaves_the_old_file(tmp_path):
    out = tmp_path / "o.gguf"
    out.write_bytes(b"old")

    def produce():
        yield np.zeros((4 << 20) // 4, np.float32)
        raise RuntimeError("producer failed")
    t = TensorOut("z", (2 << 20,), F32, 8 << 20, produce)
    with pytest.raises(RuntimeError, match="producer failed"):
        write_gguf(out, "test", KVS, [t], force=True)
    assert out.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["o.gguf"]  # no temp file left behind
    with pytest.raises(OutputError, match="already exists"):
        write_gguf(out, "test", KVS, [tensor("d", np.ones((2, 2), np.float32))])


def test_i64_tensor_round_trips(tmp_path):
    ids = np.array([3, 0, 511, 7], dtype=np.int64)
    w = np.arange(6, dtype=np.float32).reshape(1, 6)
    out = tmp_path / "t.gguf"
    write_gguf(out, "dflash", [kv_u32("dflash.block_count", 1)],
               [TensorOut("conf_proj.weight", (1, 6), Q.F32, tensor_nbytes((1, 6), Q.F32), lambda: w),
                TensorOut("d2t", (4,), Q.I64, tensor_nbytes((4,), Q.I64), lambda: ids)])
    t = {x.name: x for x in GGUFReader(out).tensors}
    assert t["d2t"].tensor_type == Q.I64 and list(t["d2t"].shape) == [4]
    assert np.array_equal(np.asarray(t["d2t"].data), ids)
    assert list(t["conf_proj.weight"].shape) == [6, 1]  # ne order, both dimensions kept (as gguf-py writes)
    f = read_gguf(out)
    assert {e.name: (e.ggml_type, e.shape, e.nbytes) for e in f.tensors}["d2t"] == (Q.I64, (4,), 32)
    assert np.frombuffer(f.raw(f.tensors[1]).tobytes(), "<i8").tolist() == ids.tolist()


# --- FileSpan: stored bytes copied file to file ---------------------------------------------

def span_tensors(tmp_path: Path, arrays: dict[str, np.ndarray]) -> list[TensorOut]:
    """The arrays stored back to back in one source file (at odd offsets), each written as a
    FileSpan of its bytes."""
    src = tmp_path / "source.bin"
    spans, pos = [], 13
    with open(src, "wb") as f:
        f.write(b"\x07" * pos)
        for name, a in arrays.items():
            f.write(a.tobytes())
            spans.append((name, a, pos))
            pos += a.nbytes
    return [TensorOut(n, a.shape, F32, a.nbytes, (lambda s=FileSpan(src, at, a.nbytes, n): s)) for n, a, at in spans]


def _unmappable(*args, **kwargs):
    raise OSError(19, "No such device")  # what mmap says of a file it cannot map


@pytest.mark.parametrize("how", ["mmap", "read-write"])
def test_file_spans_write_the_same_bytes(tmp_path, monkeypatch, how):
    import mmap

    monkeypatch.setattr(gguf_writer, "HOLE_BYTES", 4096)
    # many windows per span, none page-aligned to the source, several writes per window
    monkeypatch.setattr(span_copy, "WINDOW_BYTES", 10_000)
    monkeypatch.setattr(span_copy, "PIECE_BYTES", 3_000)
    if how == "read-write":
        monkeypatch.setattr(mmap, "mmap", _unmappable)
    arrays = mixed_tensors()
    ours, seen = tmp_path / "ours.gguf", []
    report = write_gguf(ours, "test", KVS, span_tensors(tmp_path, arrays), progress=seen.append)
    assert ours.read_bytes() == plain_gguf(tmp_path / "plain.gguf", arrays)
    assert sum(seen) == report.tensor_bytes == sum(a.nbytes for a in arrays.values())


def test_copy_writes_are_cut_at_piece_boundaries_of_the_output(tmp_path, monkeypatch):
    """Each write of a span stays within one PIECE_BYTES piece of the output, whatever offset
    the tensor lands at, so it fills whole page-cache folios (see span_copy.PIECE_BYTES)."""
    monkeypatch.setattr(span_copy, "WINDOW_BYTES", 10_000)
    monkeypatch.setattr(span_copy, "PIECE_BYTES", 4096)
    writes = []
    real = span_copy.write_all

    def record(fout, buf):
        writes.append((fout.tell(), buf.nbytes))
        real(fout, buf)
    monkeypatch.setattr(span_copy, "write_all", record)
    arrays = mixed_tensors()
    out = tmp_path / "o.gguf"
    write_gguf(out, "test", KVS, span_tensors(tmp_path, arrays))
    assert out.read_bytes() == plain_gguf(tmp_path / "plain.gguf", arrays)
    assert sum(n for _, n in writes) >= 3 * 4096  # several pieces' worth went through the copy
    assert [(at, n) for at, n in writes if at // 4096 != (at + n - 1) // 4096] == []


def test_failed_write_mid_copy_leaves_no_file(tmp_path, monkeypatch):
    """The write's own error surfaces (not the mapping's clean-up), and no output or temp file
    is left."""
    import errno

    monkeypatch.setattr(span_copy, "WINDOW_BYTES", 10_000)
    monkeypatch.setattr(span_copy, "PIECE_BYTES", 3_000)
    calls = []
    real = span_copy.write_all

    def full_disk(fout, buf):
        calls.append(1)
        if len(calls) == 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fout, buf)
    monkeypatch.setattr(span_copy, "write_all", full_disk)
    tensors = span_tensors(tmp_path, mixed_tensors())
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(OutputError, match="No space left on device") as info:
        write_gguf(tmp_path / "o.gguf", "test", KVS, tensors)
    assert info.value.__cause__.errno == errno.ENOSPC
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_source_shrinking_mid_copy_is_a_weights_error(tmp_path, monkeypatch):
    """A source truncated while it is copied fails with the one-line error before a mapped page
    past its end is touched (that would be SIGBUS), and leaves no output."""
    monkeypatch.setattr(span_copy, "WINDOW_BYTES", 1 << 16)
    src = tmp_path / "src.bin"
    n = 1 << 20
    src.write_bytes(np.arange(n // 4, dtype=np.float32).tobytes())

    def shrink(done):
        os.truncate(src, n // 2)
    out = tmp_path / "o.gguf"
    with pytest.raises(WeightsError, match="src.bin: tensor s ends early .* shrank while it was copied"):
        write_gguf(out, "test", KVS, [TensorOut("s", (n // 4,), F32, n, lambda: FileSpan(src, 0, n, "s"))],
                   progress=shrink)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.bin"]


def test_zero_pieces_and_holes_of_a_span_stay_holes(sparse_fs):
    src = sparse_fs / "sparse.bin"
    with open(src, "wb") as f:
        f.write(np.ones(1 << 18, np.float32).tobytes())  # 1 MiB of data, then
        f.write(bytes(8 << 20))                           # 8 MiB of written zeros, then
        f.truncate(f.tell() + (64 << 20))                 # a 64 MiB hole
    n = src.stat().st_size
    out = sparse_fs / "o.gguf"
    write_gguf(out, "test", KVS, [TensorOut("s", (n // 4,), F32, n, lambda: FileSpan(src, 0, n, "s"))])
    # the data's two 1 MiB output pieces (it starts after the header) and the header's block(s)
    assert (1 << 20) <= allocated(out) <= (2 << 20) + (64 << 10)
    with open(out, "rb") as f:
        f.seek(-n, os.SEEK_END)
        assert f.read(1 << 20) == np.ones(1 << 18, np.float32).tobytes() and not any(f.read())


def test_zero_pieces_of_a_dense_span_are_found_in_its_mapping(sparse_fs, monkeypatch):
    """A source without holes (every real checkpoint) is not asked piece by piece whether it has
    any: its written zeros are found in the mapped windows, and still go out as holes."""
    def per_piece(*args):
        raise AssertionError("a dense span asked the file about a piece")
    monkeypatch.setattr(span_copy, "_in_hole", per_piece)
    monkeypatch.setattr(span_copy, "_all_zero", per_piece)
    src = sparse_fs / "dense.bin"
    data = np.ones(1 << 18, np.float32).tobytes()
    src.write_bytes(data + bytes(8 << 20) + data)  # 1 MiB of data, 8 MiB of written zeros, 1 MiB of data
    n = src.stat().st_size
    assert allocated(src) >= n  # no holes: the dense path is the one taken
    out, seen = sparse_fs / "o.gguf", []
    write_gguf(out, "test", KVS, [TensorOut("s", (n // 4,), F32, n, lambda: FileSpan(src, 0, n, "s"))],
               progress=seen.append)
    assert sum(seen) == n
    # the data's 1 MiB pieces that hold data (up to two at each end, as the data starts after the
    # header) and the header's block(s); the zeros between them are holes
    assert (2 << 20) <= allocated(out) <= (4 << 20) + (64 << 10)
    with open(out, "rb") as f:
        f.seek(-n, os.SEEK_END)
        assert f.read() == src.read_bytes()


def test_span_past_the_end_of_its_file_is_a_weights_error(tmp_path):
    src = tmp_path / "short.bin"
    src.write_bytes(bytes(100))
    out = tmp_path / "o.gguf"
    with pytest.raises(WeightsError, match="short.bin: tensor s needs bytes up to 132"):
        write_gguf(out, "test", KVS, [TensorOut("s", (32,), F32, 128, lambda: FileSpan(src, 4, 128, "s"))])
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["short.bin"]


# --- the header: packed without gguf-py, GGUFWriter's bytes ---------------------------------

def _gguf_py_header(path: Path, arch: str, kvs, infos) -> bytes:
    """Header + metadata + tensor infos as gguf-py's GGUFWriter writes them (its data padding
    and data are not part of it)."""
    w = GGUFWriter(path, arch)
    for kv in kvs:
        if kv.key == "general.alignment":
            w.data_alignment = int(kv.value)
        w.add_key_value(kv.key, kv.value, kv.type, sub_type=kv.sub_type)
    for name, shape, qtype, nbytes in infos:
        if qtype in (Q.F32, Q.F16):
            w.add_tensor_info(name, shape, np.dtype(np.float32 if qtype == Q.F32 else np.float16), nbytes, raw_dtype=qtype)
        else:
            w.add_tensor_info(name, gguf_writer._byte_shape(shape, qtype), np.dtype(np.uint8), nbytes, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return path.read_bytes()


@pytest.mark.parametrize("alignment", [None, 64])
def test_header_is_gguf_py_s(tmp_path, alignment):
    """Every value type, a repeated key, an empty typed array, tensors of float, quantized and
    0-d shapes, a custom alignment: the bytes GGUFWriter writes before the data."""
    from gguf import GGUFValueType as T

    from dflash_gguf.fileio.types import KV

    kvs = [KV("a.u8", 7, T.UINT8), KV("a.i8", -3, T.INT8), KV("a.u16", 65535, T.UINT16), KV("a.i16", -2, T.INT16),
           KV("a.u32", 2**32 - 1, T.UINT32), KV("a.i32", -(2**31), T.INT32), KV("a.f32", 0.1, T.FLOAT32),
           KV("a.u64", 2**64 - 1, T.UINT64), KV("a.i64", -5, T.INT64), KV("a.f64", 1 / 3, T.FLOAT64),
           KV("a.bool", True, T.BOOL), KV("a.str", "é中 x", T.STRING), KV("a.raw", b"\xff\x00", T.STRING),
           KV("a.toks", ["a", "bb", ""], T.ARRAY, T.STRING), KV("a.ids", (1, 2, 3), T.ARRAY, T.INT32),
           KV("a.scores", [0.5, -1.0], T.ARRAY, T.FLOAT32), KV("a.nested", [[1, 2], [3]], T.ARRAY, T.ARRAY),
           KV("a.u32", 5, T.UINT32), KV("a.np", np.float32(2.5), T.FLOAT32)]
    if alignment:
        kvs.append(KV("general.alignment", alignment, T.UINT32))
    infos = [("w", (4, 64), Q.BF16, 512), ("q", (2, 64), Q.Q8_0, 136), ("k", (1, 256), Q.Q4_K, 144),
             ("n", (64,), Q.F32, 256), ("h", (3, 5), Q.F16, 30), ("s", (), Q.F32, 4), ("b", (), Q.BF16, 2)]
    tensors = [TensorOut(n, s, t, nb, lambda: None) for n, s, t, nb in infos]
    parts, align = gguf_writer._header("test", kvs, tensors)
    assert align == (alignment or 32)
    assert b"".join(parts) == _gguf_py_header(tmp_path / "plain.gguf", "test", kvs, infos)
    # no architecture (a file whose general.architecture is not a string): none written, as there
    for arch in ("", None):
        assert b"".join(gguf_writer._header(arch, kvs, tensors)[0]) == _gguf_py_header(tmp_path / "none.gguf", arch, kvs, infos)
    # and an empty array with a known item type, which gguf-py refuses but GGUF allows
    empty = b"".join(gguf_writer._header("test", [KV("a.none", [], T.ARRAY, T.UINT32)], tensors[:1])[0])
    assert empty[24:].startswith(b"".join([
        len(b"general.architecture").to_bytes(8, "little"), b"general.architecture", (8).to_bytes(4, "little"),
        (4).to_bytes(8, "little"), b"test", len(b"a.none").to_bytes(8, "little"), b"a.none",
        (9).to_bytes(4, "little"), (4).to_bytes(4, "little"), (0).to_bytes(8, "little")]))


_COPY_PROBE = """
import sys
from dflash_gguf.fileio.gguf_writer import FileSpan, TensorOut, write_gguf
from dflash_gguf.fileio.gguf_constants import GGMLQuantizationType as Q
from dflash_gguf.fileio.types import kv_str
src, out = sys.argv[1], sys.argv[2]
tensors = [TensorOut("w", (2, 8), Q.BF16, 32, lambda: FileSpan(src, 3, 32, "w")),
           TensorOut("n", (8,), Q.F32, 32, lambda: bytes(range(32)))]
write_gguf(out, "test", [kv_str("a.name", "x")], tensors)
print(sorted(m for m in ("numpy", "gguf") if m in sys.modules))
"""


def test_copying_bytes_imports_neither_numpy_nor_gguf_py(tmp_path):
    """Stored bytes and bytes chunks go out without numpy or gguf-py (a fresh process): a
    conversion that copies a checkpoint's tensors pays for neither."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    src = tmp_path / "src.bin"
    src.write_bytes(bytes(range(64)))
    out = tmp_path / "out.gguf"
    r = subprocess.run([sys.executable, "-c", _COPY_PROBE, str(src), str(out)], capture_output=True, text=True,
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["[]"]
    f = read_gguf(out)
    assert [f.raw(e).tobytes() for e in f.tensors] == [bytes(range(3, 35)), bytes(range(32))]



def test_a_zeros_chunk_is_the_zero_bytes_it_stands_for(tmp_path):
    """``Zeros(n)`` (a producer's known-zero run, e.g. a hole of a sparse source) gives the same
    file as n zero bytes handed over as data, between dense chunks and as a whole tensor."""
    from dflash_gguf.fileio.span_copy import Zeros

    rng = np.random.default_rng(3)
    head, tail = rng.standard_normal(1000, dtype=np.float32), rng.standard_normal(24, dtype=np.float32)
    gap = 3024
    n = head.size + gap + tail.size

    def t(name, chunks):
        return TensorOut(name, (n,), F32, 4 * n, lambda: iter(chunks))

    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    write_gguf(a, "test", KVS, [t("x", [head, Zeros(4 * gap), tail]), t("y", [Zeros(4 * n)])])
    write_gguf(b, "test", KVS, [t("x", [head, np.zeros(gap, np.float32), tail]), t("y", [np.zeros(n, np.float32)])])
    assert a.read_bytes() == b.read_bytes()
