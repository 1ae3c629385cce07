"""write_gguf with the integer tensors DSpark adds: an I64 table comes back from gguf-py's own
reader with its type, shape and values."""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader

from dflash_gguf.fileio.gguf_reader import read_gguf
from dflash_gguf.fileio.gguf_writer import TensorOut, tensor_nbytes, write_gguf
from dflash_gguf.fileio.types import kv_u32


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
