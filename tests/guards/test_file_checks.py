"""Integrity checks on any GGUF: layout, trailing bytes, names, key types, tokenizer, tensors."""
from __future__ import annotations

import gguf
import numpy as np

from dflash_gguf.fileio.gguf_header import read_header
from dflash_gguf.guards.run import run_checks
from tests.guards.conftest import QWEN, codes, offset_field, patch_u64, write


def test_out_of_order_tensors_are_a_layout_error(cli, tmp_path):
    # Swap two same-size tensors' offsets: no overlap, all in the file, but llama.cpp requires
    # tensors stored back to back in header order.
    data = bytearray(QWEN.read_bytes())
    h = read_header(QWEN)
    a, b = h.tensors_by_name["blk.0.attn_norm.weight"], h.tensors_by_name["output_norm.weight"]
    patch_u64(data, offset_field(h, a), b.offset_abs - h.data_offset)
    patch_u64(data, offset_field(h, b), a.offset_abs - h.data_offset)
    p = tmp_path / "m.gguf"
    p.write_bytes(bytes(data))
    rc, out, _ = cli("check", p)
    assert rc == 12 and "layout-not-contiguous: tensor blk.0.attn_norm.weight is at data offset" in out


def test_trailing_bytes_warn_but_pass(cli, tmp_path):
    p = tmp_path / "m.gguf"
    p.write_bytes(QWEN.read_bytes() + bytes(1000))
    rc, out, _ = cli("check", p)
    assert rc == 0 and "warning  trailing-bytes: 1,000 bytes after the last tensor" in out


def test_structural_findings(tmp_path):
    name = "blk.0." + "x" * 70 + ".weight"
    p = write(tmp_path / "m.gguf", [(name, np.ones(4, np.float32), None)],
              {"a.nested": [[1, 2], [3]], "general.file_type": "q8"})
    r = run_checks(p)
    assert codes(r) >= {"tensor-name-too-long", "nested-array", "key-type"}
    kt = next(f for f in r.findings if f.code == "key-type")
    assert kt.message == "general.file_type is STRING, loaders require UINT32: re-convert"


def test_tokenizer_consistency(tmp_path):
    w = gguf.GGUFWriter(tmp_path / "m.gguf", "llama")
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["a", "b", "c"])
    w.add_token_types([1, 1])
    w.add_eos_token_id(7)
    w.add_tensor("t", np.ones(4, np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    r = run_checks(tmp_path / "m.gguf")
    assert codes(r) == {"tokenizer-length", "token-id-range"}


def test_no_tensors_warns(tmp_path):
    assert codes(run_checks(write(tmp_path / "m.gguf", []))) == {"no-tensors"}


def test_zero_element_tensors(tmp_path):
    # ne [2^40, 0]: ggml's writers keep ne up to the last one above 1, so a re-write declares
    # 2^40 elements with no data (an error); ne [0, 2^40] and [0, 0] survive it (a warning).
    from tests.redteam.test_header_bombs import _zero_tensor

    for ne, code in (((1 << 40, 0), "empty-tensor-shape"), ((0, 1 << 40), "empty-tensor"), ((0, 0), "empty-tensor"),
                     ((8, 0, 1, 1), "empty-tensor-shape"), ((4096, 0, 1 << 40), "empty-tensor")):
        r = run_checks(_zero_tensor(tmp_path / "z.gguf", ne))
        assert codes(r) == {code}, ne
    f = next(f for f in run_checks(_zero_tensor(tmp_path / "z.gguf", (1 << 40, 0))).findings)
    assert f.message == ("tensor blk.0.attn_q.weight has shape [1099511627776, 0] (no elements), which ggml's writers "
                         "(llama-quantize, gguf-split) re-write as 1,099,511,627,776 elements with no data: remove the "
                         "tensor or re-convert")
