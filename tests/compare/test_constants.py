"""compare/constants.py: the keys convert derives from config.json, compared with the file's.
Faults are planted in files our converter wrote, re-written with gguf-py (tensors untouched)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from gguf import GGUFValueType as V

from dflash_gguf.compare import compare_weights
from dflash_gguf.errors import EXIT_MISMATCH

from tests.compare.conftest import SUMMARY
from tests.conftest import DRAFTERS, rewrite_gguf

FLAT = DRAFTERS / "qwen3-flat"


def _constant(report, key):
    return next(c for c in report.constants if c.key == key)


def test_a_converted_file_matches_every_constant(converted):
    r = compare_weights(FLAT, converted("qwen3-flat"))
    keys = {c.key for c in r.constants}
    assert {"dflash.rope.freq_base", "dflash.attention.layer_norm_rms_epsilon", "dflash.block_size",
            "dflash.target_layers", "tokenizer.ggml.mask_token_id"} <= keys
    assert r.passed and not r.constants_differing
    assert SUMMARY.match(r.summary) and r.summary.endswith(f"; {len(r.constants)} constants match")


def test_a_theta_edited_in_the_header_fails_naming_the_key(converted, tmp_path, cli):
    """The Lucebox bug: every tensor bit-identical, the theta hard-coded."""
    bad = rewrite_gguf(converted("qwen3-flat"), tmp_path / "bad.gguf", values={"dflash.rope.freq_base": 10000.0})
    r = compare_weights(FLAT, bad)
    assert r.counts["bit-identical"] == len(r.tensors) and not r.passed
    c = _constant(r, "dflash.rope.freq_base")
    assert (c.status, c.ours, c.theirs, c.source) == ("differs", 1e6, 10000.0, "config.rope_theta")
    code, out, _ = cli("compare-weights", FLAT, bad)
    assert code == EXIT_MISMATCH
    assert "constant differs: dflash.rope.freq_base = 10000 in the file, 1000000 from config.rope_theta" in out
    *_, counts, verdict = out.strip().splitlines()
    assert counts.startswith("25 tensors: 25 bit-identical")
    assert verdict.startswith(f"compare-weights: FAIL (exit {EXIT_MISMATCH}): 1 file, 1 error, 0 warnings; "
                              "first: constant-differs in bad.gguf [key dflash.rope.freq_base]: "
                              "dflash.rope.freq_base = 10000 in the file, 1000000 from config.rope_theta")
    code, out, _ = cli("compare-weights", FLAT, bad, "--json")
    doc = json.loads(out)
    assert doc["exit_code"] == EXIT_MISMATCH and doc["verdict"] == doc["payload"]["verdict"] == "fail"
    assert [c["key"] for c in doc["payload"]["constants"] if c["status"] != "same"] == ["dflash.rope.freq_base"]
    assert [(f["rule_id"], f["where"]) for f in doc["findings"]] == [("constant-differs", "key dflash.rope.freq_base")]
    assert cli("compare-weights", FLAT, bad, "--no-constants")[0] == 0


def test_floats_compare_at_the_precision_gguf_stores(converted, tmp_path):
    eps = float(np.nextafter(np.float32(1e-6), np.float32(1)))  # the next float32 after 1e-6: a real change
    near = float(np.float64(np.float32(1e-6)))  # 1e-6 as float32 reads back as this: the same constant
    same = rewrite_gguf(converted("qwen3-flat"), tmp_path / "same.gguf",
                        values={"dflash.attention.layer_norm_rms_epsilon": near})
    assert compare_weights(FLAT, same).passed
    off = rewrite_gguf(converted("qwen3-flat"), tmp_path / "off.gguf",
                       values={"dflash.attention.layer_norm_rms_epsilon": eps})
    c = _constant(compare_weights(FLAT, off), "dflash.attention.layer_norm_rms_epsilon")
    assert c.status == "differs" and c.source == "config.rms_norm_eps"


@pytest.mark.parametrize("fault,key,status", [
    ({"drop": ("dflash.attention.layer_norm_rms_epsilon",)}, "dflash.attention.layer_norm_rms_epsilon", "missing"),
    ({"add": {"dflash.attention.sliding_window": (8, V.UINT32, None)}}, "dflash.attention.sliding_window", "extra"),
    ({"values": {"dflash.target_layers": [0, 1, 2, 3]}}, "dflash.target_layers", "differs"),  # taps not +1
    ({"values": {"tokenizer.ggml.mask_token_id": 7}}, "tokenizer.ggml.mask_token_id", "differs"),
    ({"add": {"dflash.attention.causal": (True, V.BOOL, None)}}, "dflash.attention.causal", "extra"),
])
def test_each_kind_of_planted_fault_is_named(converted, tmp_path, fault, key, status):
    bad = rewrite_gguf(converted("qwen3-flat"), tmp_path / "bad.gguf", **fault)
    r = compare_weights(FLAT, bad)
    assert not r.passed
    assert [(c.key, c.status) for c in r.constants_differing] == [(key, status)]


def test_the_tap_source_names_where_config_json_spells_them(converted, tmp_path):
    bad = rewrite_gguf(converted("qwen3-flat"), tmp_path / "bad.gguf", values={"dflash.target_layers": [2, 3, 4, 5]})
    c = _constant(compare_weights(FLAT, bad), "dflash.target_layers")
    assert c.ours == [1, 2, 3, 4] and c.source == "dflash_config.target_layer_ids"


@pytest.mark.parametrize("fmt", ["llama.cpp", "dflash-draft", "lucebox", "llama.cpp-pr22105"])
def test_every_format_and_family_of_our_own_conversions_matches(converted, fmt):
    for drafter in ("qwen3-flat", "qwen3-nested", "gemma-style"):
        r = compare_weights(DRAFTERS / drafter, converted(drafter, fmt))
        assert r.constants and not r.constants_differing, [c.detail for c in r.constants_differing]


def test_dspark_keys_are_compared(dspark, tmp_path):
    r = compare_weights(dspark["dirs"]["qwen3-reduced"], dspark["gguf"]["qwen3-reduced"])
    assert r.passed and "dflash.sample_from_anchor" in {c.key for c in r.constants}
    bad = rewrite_gguf(dspark["gguf"]["qwen3-reduced"], tmp_path / "bad.gguf",
                       values={"dflash.sample_from_anchor": not _constant(r, "dflash.sample_from_anchor").ours})
    c = _constant(compare_weights(dspark["dirs"]["qwen3-reduced"], bad), "dflash.sample_from_anchor")
    assert c.status == "differs" and "family" in c.source
