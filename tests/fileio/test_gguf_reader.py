"""The tensor-byte readers of fileio/gguf_reader.py."""
import os

import numpy as np
import pytest
from gguf import GGUFWriter

from dflash_gguf.errors import GGUFFormatError, InputError
from dflash_gguf.fileio.gguf_reader import TensorReader, read_gguf


def small_gguf(path):
    w = GGUFWriter(path, "test")
    w.add_tensor("a", np.arange(1000, dtype=np.float32))
    w.add_tensor("b", np.arange(64, dtype=np.float16).reshape(8, 8))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return path


def test_positional_reads_equal_the_mapped_bytes(tmp_path):
    f = read_gguf(small_gguf(tmp_path / "s.gguf"))
    with TensorReader(f.path) as r:
        for t in f.tensors:
            assert np.array_equal(r.read(t, 0, t.nbytes), f.raw(t))
            buf = np.full(t.nbytes + 16, 7, np.uint8)
            got = r.read(t, 8, t.nbytes - 8, into=buf)
            assert got.base is buf or got.base is buf.base  # a view of the caller's buffer
            assert np.array_equal(got, f.raw(t)[8:]) and (buf[t.nbytes - 8:] == 7).all()


def test_input_that_shrinks_while_read_is_a_format_error(tmp_path):
    src = small_gguf(tmp_path / "s.gguf")
    f = read_gguf(src)
    t = f.tensors[-1]
    with TensorReader(f.path) as r:
        assert r.read(t, 0, 8).size == 8
        os.truncate(src, t.offset_abs + 4)
        with pytest.raises(GGUFFormatError, match=f"tensor {t.name} needs bytes up to {t.end:,}"):
            r.read(t, 0, 8)


def test_unreadable_file_is_an_input_error(tmp_path):
    src = small_gguf(tmp_path / "s.gguf")
    f = read_gguf(src)
    os.unlink(src)
    with pytest.raises(InputError, match="cannot read it"):
        TensorReader(f.path)
