"""DSpark checks: converted DSpark drafters are clean (header and data), then one defect at a
time, each named with what the runtime would do."""
from __future__ import annotations

import numpy as np
import pytest

from dflash_gguf.guards.run import run_checks
from tests.conftest import rewrite_gguf
from tests.guards.conftest import V, assert_defect, rewrite


@pytest.mark.parametrize("case", ["draft", "qwen3-reduced", "speculator", "lfm2", "ling", "gemma4", "gemma4-tied"])
def test_converted_dspark_drafters_are_clean(cli, dspark, case, tmp_path):
    r = run_checks(dspark["gguf"][case], deep=True)
    assert r.findings == (), [f.message for f in r.findings]
    q = tmp_path / "q.gguf"
    assert cli("quantize", dspark["gguf"][case], q, "q4_k_m")[0] == 0
    r = run_checks(q, deep=True)  # llama-quantize's layout: conf_proj.weight is 1-D there
    assert r.findings == (), [f.message for f in r.findings]


def _ones(n, dtype=np.float32):
    return np.ones(n, dtype)


@pytest.mark.parametrize("case, change, code, says", [
    ("qwen3-reduced", {"set_kv": {"dflash.sample_from_anchor": (1, V.UINT8, None)}}, "dspark-key-type",
     "dflash.sample_from_anchor is UINT8; the runtime compares its text with \"true\""),
    ("speculator", {"drop": ("dflash.sample_from_anchor",)}, "dspark-key-missing",
     "dflash.sample_from_anchor is missing: the runtime samples the anchor slot (true)"),
    ("draft", {"set_kv": {"dflash.has_confidence_head": (False, V.BOOL, None)}}, "dspark-confidence",
     "dflash.has_confidence_head = false but the file has conf_proj.weight"),
    ("draft", {"drop_tensors": ("markov_w2.weight",)}, "dspark-markov",
     "markov_w1.weight without markov_w2.weight: the runtime requires both"),
    ("draft", {"drop_tensors": ("markov_w1.weight",)}, "dspark-markov",
     "markov_w2.weight without markov_w1.weight: the runtime reads the DSpark heads only next to markov_w1"),
    ("draft", {"drop_tensors": ("conf_proj.weight",), "add_tensors": (("conf_proj.weight", np.ones((1, 64), np.float32)),)},
     "dspark-confidence", "conf_proj.weight has ne [64, 1]; the runtime needs {n_embd + rank, 1} = {96, 1} (a head "
                          "without the Markov features"),
    ("qwen3-reduced", {"drop_tensors": ("d2t",), "add_tensors": (("d2t", np.arange(200, dtype=np.int32)),)},
     "dspark-d2t", "d2t is I32; the runtime asserts I64"),
    ("qwen3-reduced", {"drop_tensors": ("d2t",)}, "dspark-output",
     "output.weight has ne [64, 200]; the runtime needs {n_embd, n_vocab_draft} = {64, 512}"),
    ("qwen3-reduced", {"drop_tensors": ("output.weight",)}, "dspark-output",
     "a reduced vocabulary (d2t) without output.weight"),
    ("qwen3-reduced", {"drop_tensors": ("d2t",), "add_tensors": (("d2t", np.arange(600, dtype=np.int64)),)},
     "dspark-d2t", "d2t maps 600 draft ids into a 512-token vocabulary"),
    ("draft", {"add_tensors": (("blk.0.attn_sinks.weight", _ones(3)),)}, "drafter-sinks",
     "blk.0.attn_sinks.weight has ne [3]; the runtime needs one sink logit per head {4}"),
    ("gemma4", {"set_kv": {"dflash.hidden_activation": ("relu", V.STRING, None)}}, "dspark-activation",
     "the runtime throws 'unsupported DFlash hidden activation'"),
    ("gemma4", {"drop_tensors": ("rope_freqs.weight",), "add_tensors": (("rope_freqs.weight", _ones(8)),)},
     "dspark-rope-freqs", "rope_freqs.weight has ne [8]; the runtime needs {key_length / 2} = {16}"),
])
def test_dspark_defects(cli, dspark, tmp_path, case, change, code, says):
    p = rewrite(dspark["gguf"][case], tmp_path / "d.gguf", **change)
    assert_defect(cli, p, code, says)


def test_dspark_in_a_fork_format_is_an_error(drafters, tmp_path):
    p = rewrite(drafters["dflash-draft"], tmp_path / "d.gguf", add_tensors=(("markov_w1.weight", np.ones((8, 4),
                                                                                                          np.float32)),))
    found = [f for f in run_checks(p).findings if f.code == "dspark-format"]
    assert found and "only mainline llama.cpp loads DSpark" in found[0].message


@pytest.mark.parametrize("edit, code, says", [
    (lambda a: np.concatenate([a[:-1], [512]]), "dspark-d2t-range",
     "d2t[199] = 512 is outside the 512-token vocabulary"),
    (lambda a: np.concatenate([a[:-1], a[:1]]), "dspark-d2t-duplicate",
     "d2t maps 1 target id(s) from more than one draft id"),
])
def test_deep_checks_d2t_ids(cli, dspark, tmp_path, edit, code, says):
    p = rewrite_gguf(dspark["gguf"]["qwen3-reduced"], tmp_path / "d.gguf", data={"d2t": edit})
    assert run_checks(p).findings == ()  # the header cannot see the ids
    found = [f for f in run_checks(p, deep=True).findings if f.code == code]
    assert found and says in found[0].message and found[0].category == "data", found
    assert cli("check", p, "--deep", "--no-progress")[0] == 12
