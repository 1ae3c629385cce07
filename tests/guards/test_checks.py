"""`check` and `check-instruct` end to end through ``main([...])``: exit codes, JSON, findings."""
from __future__ import annotations

import json
import os
import shutil
import struct
import time
from pathlib import Path

import gguf
import numpy as np
import pytest

from dflash_gguf.guards.checks import run_checks
from dflash_gguf.fileio.gguf_header import read_header

ROOT = Path(__file__).resolve().parents[2]
GUARDS = ROOT / "fixtures" / "guards"
Q = gguf.GGMLQuantizationType
QWEN = GUARDS / "qwen3-8b.gguf"
DRAFTER = GUARDS / "qwen3-8b-dflash.gguf"
SHARD1 = GUARDS / "qwen3-8b-sharded-00001-of-00002.gguf"
SHARD2 = GUARDS / "qwen3-8b-sharded-00002-of-00002.gguf"


def write(path: Path, tensors, kvs=None, arch="llama") -> Path:
    """A small GGUF; ``tensors`` = [(name, array, raw_dtype or None)]."""
    w = gguf.GGUFWriter(path, arch)
    w.add_name("Test 1B Instruct")
    for k, v in (kvs or {}).items():
        if isinstance(v, list):
            w.add_array(k, v)
        else:
            w.add_string(k, v)
    for name, arr, raw in tensors:
        w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return path


def codes(report) -> set[str]:
    return {f.code for f in report.findings}


# --- check-instruct ------------------------------------------------------------------------

@pytest.mark.parametrize("name, code", [
    ("qwen3-8b.gguf", 0), ("qwen3-8b-base.gguf", 10), ("gemma-3-1b-it.gguf", 0), ("gemma-3-1b-pt.gguf", 10),
    ("gemma-4-e2b-it.gguf", 0), ("llama-3.1-8b-instruct.gguf", 0), ("llama-3.1-8b.gguf", 10),
    ("frankenmerge-7b.gguf", 11), ("qwen3-8b-dflash.gguf", 0),
    # shard 2 has no metadata of its own: the verdict comes from shard 1
    ("qwen3-8b-sharded-00002-of-00002.gguf", 0),
])
def test_check_instruct_exit_codes(cli, name, code):
    rc, out, _ = cli("check-instruct", GUARDS / name)
    assert rc == code
    assert out.startswith(f"{GUARDS / name}: ")


def test_allow_unknown(cli):
    assert cli("check-instruct", GUARDS / "frankenmerge-7b.gguf", "--allow-unknown")[0] == 0
    assert cli("check-instruct", GUARDS / "qwen3-8b-base.gguf", "--allow-unknown")[0] == 10


def test_check_instruct_json(cli):
    rc, out, _ = cli("check-instruct", QWEN, "--json")
    doc = json.loads(out)
    assert rc == 0 and set(doc) == {"file", "shards", "verdict", "reason", "exit_code", "evidence"}
    assert doc["verdict"] == "instruct" and doc["exit_code"] == 0
    ev = doc["evidence"][0]
    assert set(ev) == {"rule", "tier", "leans", "field", "value", "matched", "description"}
    assert {e["rule"] for e in doc["evidence"]} >= {"eos-turn-end", "family-qwen3", "template-chatml"}


def test_truncated_file_is_6_before_any_verdict(cli, tmp_path):
    cut = tmp_path / "qwen3-8b.gguf"
    cut.write_bytes(QWEN.read_bytes()[:3000])
    rc, out, err = cli("check-instruct", cut)
    assert rc == 6 and out == ""
    assert err.startswith(f"error: {cut}: tensor token_embd.weight needs bytes up to")
    rc, out, err = cli("check-instruct", cut, "--json")
    doc = json.loads(out)
    assert rc == 6 and doc["exit_code"] == 6 and doc["error"]["type"] == "TruncatedError"
    assert "verdict" not in doc


def test_incomplete_shards_are_6_for_check_instruct(cli, tmp_path):
    shutil.copy(SHARD1, tmp_path / SHARD1.name)
    rc, _, err = cli("check-instruct", tmp_path / SHARD1.name)
    assert rc == 6 and "1 of 2 shards missing: qwen3-8b-sharded-00002-of-00002.gguf" in err
    shutil.copy(SHARD2, tmp_path / SHARD2.name)
    (tmp_path / SHARD1.name).unlink()
    rc, _, err = cli("check-instruct", tmp_path / SHARD2.name)
    assert rc == 6 and "the first shard is missing" in err


def test_missing_file_is_5(cli, tmp_path):
    rc, _, err = cli("check-instruct", tmp_path / "nope.gguf")
    assert rc == 5 and "no such file" in err


# --- check: header-level -------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(GUARDS.glob("*.gguf")), ids=lambda p: p.name)
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


def _patch_u64(data: bytearray, pos: int, value: int) -> None:
    data[pos:pos + 8] = struct.pack("<Q", value)


def _offset_field(h, t) -> int:
    return t.info_offset + 8 + len(t.name.encode()) + 4 + 8 * len(t.shape_ne) + 4


def test_out_of_order_tensors_are_a_layout_error(cli, tmp_path):
    # Swap two same-size tensors' offsets: no overlap, all in the file, but llama.cpp requires
    # tensors stored back to back in header order.
    data = bytearray(QWEN.read_bytes())
    h = read_header(QWEN)
    a, b = h.tensors_by_name["blk.0.attn_norm.weight"], h.tensors_by_name["output_norm.weight"]
    _patch_u64(data, _offset_field(h, a), b.offset_abs - h.data_offset)
    _patch_u64(data, _offset_field(h, b), a.offset_abs - h.data_offset)
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


# --- shards ---------------------------------------------------------------------------------

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


# --- deep -----------------------------------------------------------------------------------

def _q8_with_bad_scale(block: int, value: int) -> np.ndarray:
    raw = gguf.quantize(np.ones((4, 64), np.float32), Q.Q8_0)
    flat = raw.reshape(-1, 34).copy()
    flat[block, 0:2] = np.frombuffer(struct.pack("<H", value), np.uint8)
    return flat.reshape(raw.shape)


def test_deep_finds_nan_inf_zero_and_bad_scales(cli, tmp_path):
    f32 = np.ones(64, np.float32)
    f32[[3, 9]] = np.nan
    f32[10] = np.inf
    f16 = np.ones(64, np.float16)
    f16[5] = np.inf
    bf16 = np.zeros((2, 64), np.uint8)
    bf16[0, 0:2] = np.frombuffer(struct.pack("<H", 0x7FC0), np.uint8)  # BF16 NaN
    bf16[1, 2] = 1
    q4k = np.zeros((1, 144), np.uint8)
    q4k[0, 0] = 1
    q4k[0, 2:4] = np.frombuffer(struct.pack("<H", 0x7E00), np.uint8)  # dmin = NaN
    p = write(tmp_path / "m.gguf", [
        ("f32", f32, None), ("f16", f16, None), ("bf16", bf16, Q.BF16), ("zero", np.zeros(32, np.float32), None),
        ("q8", _q8_with_bad_scale(5, 0x7C00), Q.Q8_0), ("q4k", q4k, Q.Q4_K),
        ("q8ok", gguf.quantize(np.ones((2, 32), np.float32), Q.Q8_0), Q.Q8_0),
    ])
    assert cli("check", p)[0] == 0  # header-only sees nothing wrong
    rc, out, _ = cli("check", p, "--deep", "--json")
    doc = json.loads(out)
    assert rc == 12 and doc["deep"] and doc["summary"]["bytes_scanned"] == sum(t.nbytes for t in read_header(p).tensors)
    msgs = {(f["code"], f["where"]): f["message"] for f in doc["findings"]}
    assert msgs[("nan-inf", "tensor f32")].startswith("tensor f32 (F32) has 2 NaN and 1 inf values (first at element 3)")
    assert "has 0 NaN and 1 inf values (first at element 5)" in msgs[("nan-inf", "tensor f16")]
    assert "has 1 NaN and 0 inf values (first at element 0)" in msgs[("nan-inf", "tensor bf16")]
    assert msgs[("bad-quant-scale", "tensor q8")].startswith("tensor q8 (Q8_0): 1 of 8 blocks have an inf/NaN scale (first at block 5)")
    assert "1 of 1 blocks" in msgs[("bad-quant-scale", "tensor q4k")]
    assert ("all-zero", "tensor zero") in msgs
    assert not any(w == "tensor q8ok" for _, w in msgs)
    assert {f["category"] for f in doc["findings"]} == {"data"}


@pytest.mark.parametrize("qtype, scale_at", [(Q.Q6_K, 208), (Q.Q2_K, 82), (Q.Q3_K, 108), (Q.IQ4_XS, 0), (Q.TQ2_0, 64)])
def test_deep_scale_positions(tmp_path, qtype, scale_at):
    _, tsize = gguf.GGML_QUANT_SIZES[qtype]
    raw = np.zeros((1, tsize), np.uint8)
    raw[0, scale_at:scale_at + 2] = np.frombuffer(struct.pack("<H", 0xFC00), np.uint8)  # -inf
    r = run_checks(write(tmp_path / "m.gguf", [("w", raw, qtype)]), deep=True)
    assert codes(r) == {"bad-quant-scale"}


def test_deep_progress_reports_every_byte(tmp_path):
    p = write(tmp_path / "m.gguf", [("a", np.ones((64, 64), np.float32), None), ("b", np.ones(8, np.float16), None)])
    seen = []
    run_checks(p, deep=True, progress=seen.append)
    assert sum(seen) == 64 * 64 * 4 + 16


# --- pairing --------------------------------------------------------------------------------

def test_pairing_ok_and_mismatches(cli, tmp_path):
    assert cli("check", DRAFTER, "--target", QWEN)[0] == 0
    rc, out, _ = cli("check", DRAFTER, "--target", GUARDS / "qwen3-8b-base.gguf")
    assert rc == 13 and "pair-target-base" in out
    rc, out, _ = cli("check", DRAFTER, "--target", GUARDS / "gemma-3-1b-it.gguf", "--json")
    doc = json.loads(out)
    assert rc == 13 and {f["code"] for f in doc["findings"]} >= {"pair-vocab-mismatch", "pair-mask-token"}
    assert doc["target"] == str(GUARDS / "gemma-3-1b-it.gguf")


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
    _patch_u64(data, _offset_field(h, a), b.offset_abs - h.data_offset)
    _patch_u64(data, _offset_field(h, b), a.offset_abs - h.data_offset)
    p.write_bytes(bytes(data))
    assert cli("check", p, "--target", GUARDS / "qwen3-8b-base.gguf")[0] == 12


# --- speed: header-only work does not depend on the file size ----------------------------------

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


# --- drafter formats (phase 2): the converter's output, then one defect at a time ------------------

FORMATS = ("llama.cpp", "llama.cpp-pr22105", "dflash-draft", "lucebox")


def rewrite(src: Path, dst: Path, *, drop: tuple[str, ...] = (), set_kv: dict | None = None,
            drop_tensors: tuple[str, ...] = (), add_tensors: tuple[tuple[str, np.ndarray], ...] = ()) -> Path:
    """Copy a GGUF through gguf-py's writer with some keys / tensors changed (a real file, not a patch)."""
    h = read_header(src)
    w = gguf.GGUFWriter(dst, h.arch)
    V = gguf.GGUFValueType
    for k in h.kv_order:
        f = h.kv[k]
        if k == "general.architecture" or k in drop or k in (set_kv or {}):
            continue
        value = list(f.value) if f.type == V.ARRAY else f.value
        w.add_key_value(k, value, f.type, sub_type=f.sub_type)
    for k, (value, vtype, sub) in (set_kv or {}).items():
        w.add_key_value(k, value, vtype, sub_type=sub)
    raw = src.read_bytes()
    for t in h.tensors:
        if t.name in drop_tensors:
            continue
        b = np.frombuffer(raw[t.offset_abs:t.end], np.uint8)
        w.add_tensor(t.name, b.reshape(*reversed(t.shape_ne[1:]), -1), raw_dtype=t.ggml_type)
    for name, arr in add_tensors:
        w.add_tensor(name, arr)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return dst


@pytest.fixture(scope="module")
def drafters(tmp_path_factory):
    from dflash_gguf.convert import convert

    d = tmp_path_factory.mktemp("drafters")
    out = {}
    for fmt in FORMATS:
        out[fmt] = d / f"{fmt}.gguf"
        convert(ROOT / "fixtures" / "drafters" / "qwen3-nested", out[fmt], format=fmt,
                target_dir=ROOT / "fixtures" / "targets" / "qwen3-tiny")
    # The target those drafters fit: 5 layers, hidden 64, the same vocabulary, RoPE 1e7.
    h = read_header(out["llama.cpp"])
    w = gguf.GGUFWriter(d / "target.gguf", "qwen3")
    w.add_name("Qwen3 Tiny")
    w.add_basename("Qwen3")
    for k, v in (("qwen3.block_count", 5), ("qwen3.embedding_length", 64)):
        w.add_uint32(k, v)
    w.add_float32("qwen3.rope.freq_base", h.get("dflash.rope.freq_base"))
    for k in h.kv_order:
        if k.startswith("tokenizer.") and k != "tokenizer.ggml.mask_token_id":
            f = h.kv[k]
            w.add_key_value(k, list(f.value) if f.sub_type is not None else f.value, f.type, sub_type=f.sub_type)
    w.add_tensor("token_embd.weight", np.zeros((4, 64), np.float16))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    out["target"] = d / "target.gguf"
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_converted_drafters_are_clean_and_pair(cli, drafters, fmt):
    r = run_checks(drafters[fmt], target=drafters["target"])
    assert r.findings == (), [f.message for f in r.findings]
    assert cli("check", drafters[fmt], "--target", drafters["target"], "--deep", "--no-progress")[0] == 0


V = gguf.GGUFValueType


@pytest.mark.parametrize("fmt, change, code, says", [
    ("dflash-draft", {"drop": ("dflash-draft.dflash.n_target_features",)}, "drafter-key-missing",
     "dflash-draft.dflash.n_target_features is missing (dflash-draft format): the fork loaders size dflash_fc from it"),
    ("dflash-draft", {"set_kv": {"dflash-draft.dflash.n_target_features": (300, V.UINT32, None)}}, "drafter-fc-width",
     "dflash-draft.dflash.n_target_features = 300 but dflash_fc.weight is 256 wide"),
    ("llama.cpp", {"drop": ("dflash.target_layers",)}, "drafter-format",
     "not a loadable llama.cpp drafter: required key dflash.target_layers is missing"),
    ("llama.cpp", {"set_kv": {"dflash.target_layers": ([0, 1, 2, 3], V.ARRAY, V.INT32)}}, "drafter-taps-offset",
     "target layers [0, 1, 2, 3] contain 0: llama.cpp stores z-lab id + 1"),
    ("lucebox", {"set_kv": {"qwen35-dflash-draft.dflash.n_target_layers": (5, V.UINT32, None)}}, "drafter-tap-count",
     "qwen35-dflash-draft.dflash.n_target_layers = 5 but there are 4 target layers (that looks like the target's depth"),
    ("llama.cpp", {"set_kv": {"dflash.attention.sliding_window_pattern": ([True, False, False], V.ARRAY, V.BOOL)}},
     "drafter-swa-pattern", "dflash.attention.sliding_window_pattern has 3 entries for 2 layers"),
    ("dflash-draft", {"set_kv": {"dflash-draft.attention.sliding_window_pattern": ([1, 0], V.ARRAY, V.INT32)}},
     "drafter-swa-pattern", "is ARRAY[INT32]; runtimes read ARRAY[BOOL] only"),
    ("llama.cpp", {"drop": ("dflash.attention.sliding_window_pattern",)}, "drafter-swa-pattern",
     "dflash.attention.sliding_window = 8 without a per-layer pattern"),
    ("llama.cpp", {"drop_tensors": ("blk.1.ffn_up.weight",)}, "drafter-tensor-missing",
     "1 tensor(s) the llama.cpp loader needs are missing: blk.1.ffn_up.weight"),
    ("dflash-draft", {"add_tensors": (("blk.0.ffn_norm.weight", np.ones(64, np.float32)),)}, "drafter-tensor-unclaimed",
     "tensor blk.0.ffn_norm.weight is not part of a dflash-draft drafter (llama.cpp format's name"),
    ("llama.cpp", {"drop": tuple(k for k in ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                                              "tokenizer.ggml.merges", "tokenizer.ggml.pre", "tokenizer.ggml.scores"))},
     "drafter-no-tokenizer", "no tokenizer: the llama.cpp runtimes need the target's vocabulary"),
])
def test_drafter_defects(cli, drafters, tmp_path, fmt, change, code, says):
    p = rewrite(drafters[fmt], tmp_path / f"{fmt}.gguf", **change)
    r = run_checks(p)
    found = [f for f in r.findings if f.code == code]
    assert found and any(says in f.message for f in found), [f.message for f in r.findings]
    assert all(f.category == "drafter" for f in found)
    expected = 12 if any(f.severity.value == "error" for f in r.findings) else 0
    assert cli("check", p)[0] == expected


def test_pairing_with_the_wrong_target(drafters, tmp_path):
    small = rewrite(drafters["target"], tmp_path / "t.gguf", set_kv={
        "qwen3.embedding_length": (32, V.UINT32, None), "qwen3.block_count": (4, V.UINT32, None),
        "qwen3.rope.freq_base": (1e6, V.FLOAT32, None)})
    r = run_checks(drafters["dflash-draft"], target=small)
    msgs = {f.code: f.message for f in r.findings}
    assert msgs["pair-fc-width"].startswith("dflash_fc.weight takes 256 features = 4 taps x 64, but the target's hidden size is 32")
    assert msgs["pair-taps-depth"] == "target layers [1, 2, 3, 4] (stored; z-lab ids [1, 2, 3, 4]) reach past the target's 4 layers"
    assert msgs["pair-rope-theta"].startswith("drafter RoPE base 1e+07 differs from the target's 1e+06")
    assert {f.category for f in r.findings} == {"pairing"}


def test_taps_shifted_by_one_are_flagged(cli, tmp_path):
    # Stored [3, 11, ...] = z-lab [2, 10, 18, 26, 34]: the standard Qwen3-8B taps + 1 (written twice +1?)
    p = rewrite(DRAFTER, tmp_path / "d.gguf", set_kv={"dflash.target_layers": ([3, 11, 19, 27, 35], V.ARRAY, V.INT32)})
    rc, out, _ = cli("check", p, "--target", QWEN)
    assert rc == 0 and "pair-taps-offset: target layers [3, 11, 19, 27, 35] are z-lab's standard taps " \
                       "[1, 9, 17, 25, 33] for a 36-layer target shifted by +1" in out
