"""`inspect` on the command line (cli/inspect.py): the header lines in both tap conventions, the
metadata and tensor tables, the JSON document, and the DSpark summary line. Expected values come
from the drafter's config.json and from gguf-py's GGUFReader of the same file."""
from __future__ import annotations

import json

import pytest
from gguf import GGUFReader

from dflash_gguf.cli.inspect import dspark_line
from tests.conftest import DRAFTERS, TARGETS

DRAFTER = DRAFTERS / "gemma-style"
TARGET = TARGETS / "llama-tiny.gguf"
ZLAB = json.loads((DRAFTER / "config.json").read_text())["dflash_config"]["target_layer_ids"]


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory):
    from dflash_gguf.convert import convert

    root = tmp_path_factory.mktemp("inspect")
    out = {}
    for fmt in ("llama.cpp", "dflash-draft"):
        out[fmt] = root / f"{fmt}.gguf"
        convert(DRAFTER, out[fmt], format=fmt, target_gguf=TARGET)
    return out


def _n_kv(path) -> int:
    return sum(not k.startswith("GGUF.") for k in GGUFReader(path).fields)


@pytest.mark.parametrize("fmt,arch,stored", [("llama.cpp", "dflash", [t + 1 for t in ZLAB]),
                                             ("dflash-draft", "dflash-draft", ZLAB)])
def test_taps_in_both_conventions(cli, ggufs, fmt, arch, stored):
    path = ggufs[fmt]
    code, so, se = cli("inspect", path)
    assert code == 0, se
    lines = so.splitlines()
    assert lines[:4] == [f"{path}: architecture {arch}, format {fmt}",
                         f"  taps (z-lab, output of layer L):      {ZLAB}",
                         f"  taps (llama.cpp, input of layer L+1): {[t + 1 for t in ZLAB]}",
                         f"  stored in the file:                   {stored}"]
    key = "dflash.target_layers" if fmt == "llama.cpp" else "dflash-draft.dflash.target_layer_ids"
    assert list(GGUFReader(path).fields[key].contents()) == stored
    assert f"metadata ({_n_kv(path)})" in lines and f"tensors ({len(GGUFReader(path).tensors)})" in lines


def test_a_model_that_is_not_a_drafter(cli):
    code, so, se = cli("inspect", TARGET)
    assert code == 0, se
    lines = so.splitlines()
    assert lines[0] == f"{TARGET}: architecture llama, format not a DFlash drafter"
    assert lines[1] == f"metadata ({_n_kv(TARGET)})"  # no tap lines
    assert not any("taps" in line for line in lines)


def test_json_lists_what_gguf_py_reads(cli, ggufs):
    path = ggufs["llama.cpp"]
    code, so, se = cli("inspect", path, "--json")
    assert code == 0, se
    doc = json.loads(so)
    r = GGUFReader(path)
    assert doc["architecture"] == "dflash" and doc["format"] == "llama.cpp" and doc["dspark"] is None
    assert doc["target_layers"] == {"zlab_output_of_layer": ZLAB, "llamacpp_input_of_layer": [t + 1 for t in ZLAB],
                                    "stored": [t + 1 for t in ZLAB]}
    assert [t["name"] for t in doc["tensors"]] == [t.name for t in r.tensors]
    for mine, theirs in zip(doc["tensors"], r.tensors):
        assert (mine["ne"], mine["type"], mine["nbytes"]) == (
            [int(d) for d in theirs.shape], theirs.tensor_type.name, int(theirs.n_bytes))
        assert mine["offset"] == theirs.data_offset
    assert len(doc["kv"]) == _n_kv(path)


def test_missing_and_truncated_files(cli, ggufs, tmp_path):
    code, _, se = cli("inspect", tmp_path / "nope.gguf")
    assert code == 5 and "nope.gguf" in se
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(ggufs["llama.cpp"].read_bytes()[:500])
    code, so, se = cli("inspect", cut)
    assert code == 6 and so == "" and len(se.strip().splitlines()) == 1


def _d(**kw):
    base = {"markov_rank": 32, "vocab_size": 512, "draft_vocab_size": None, "confidence_head": True,
            "sample_from_anchor": True, "gemma4_layout": False}
    return {**base, **kw}


def test_dspark_line():
    assert dspark_line(_d()) == ("Markov head rank 32, full vocabulary (512), confidence head, "
                                 "samples the anchor slot")
    assert dspark_line(_d(markov_rank=None, draft_vocab_size=128, confidence_head=False,
                          sample_from_anchor=False, gemma4_layout=True)) == (
        "no Markov head, draft vocabulary 128 of 512 (d2t), no confidence head, slot 0 is a bonus anchor, Gemma4 block")
    assert dspark_line(_d(vocab_size=None, sample_from_anchor=None)) == (
        "Markov head rank 32, full vocabulary (?), confidence head, sample_from_anchor missing (runtime: true)")
