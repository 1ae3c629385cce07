"""`check` end to end through ``main([...])``: every fixture clean, the JSON report, exit
codes 6 / 7 / 12 and their precedence, header-only speed."""
from __future__ import annotations

import json
import os
import time

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
    doc = json.loads(out)
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


def test_multi_gb_sparse_file_checks_in_milliseconds(cli, tmp_path):
    p = tmp_path / "big.gguf"
    w = gguf.GGUFWriter(p, "llama")
    w.add_name("Big 70B Instruct")
    nbytes = 1 << 30
    for i in range(4):  # 4 GiB of F16 data that is never written (sparse)
        w.add_tensor_info(f"blk.{i}.ffn_up.weight", (1 << 14, 1 << 15), np.dtype(np.float16), nbytes)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_ti_data_to_file(); w.close()
    header_end = p.stat().st_size
    data_offset = header_end + (-header_end % 32)
    os.truncate(p, data_offset + 4 * nbytes)
    t0 = time.perf_counter()
    rc, out, _ = cli("check", p)
    elapsed = time.perf_counter() - t0
    assert rc == 0, out
    assert elapsed < 0.5  # generous for a shared CI box; the bench shows ~1 ms
    assert p.stat().st_size > 4 * nbytes and p.stat().st_blocks * 512 < 1 << 20  # really sparse
