"""inspect (convert/describe.py): format, keys, tensors and the target-layer ids in both conventions."""
from __future__ import annotations

import json

from tests.convert.conftest import LLAMA_GGUF, do_convert


def test_inspect_shows_both_conventions(cli, tmp_path):
    code, src, _, _ = do_convert(cli, tmp_path, "qwen3-flat", "llama.cpp")
    code, so, se = cli("inspect", src, "--json")
    assert code == 0, se
    j = json.loads(so)
    assert j["format"] == "llama.cpp"
    assert j["target_layers"] == {"zlab_output_of_layer": [0, 1, 2, 3], "llamacpp_input_of_layer": [1, 2, 3, 4],
                                  "stored": [1, 2, 3, 4]}


def test_inspect_summarises_dspark(cli, dspark):
    code, so, se = cli("inspect", dspark["gguf"]["speculator"])
    assert code == 0, se
    assert ("DSpark: Markov head rank 32, draft vocabulary 128 of 512 (d2t), no confidence head, slot 0 is a bonus "
            "anchor") in so
    j = json.loads(cli("inspect", dspark["gguf"]["gemma4"], "--json")[1])
    assert j["dspark"] == {"markov_rank": 32, "vocab_size": 512, "draft_vocab_size": None, "confidence_head": True,
                           "sample_from_anchor": True, "has_confidence_head": True, "gemma4_layout": True}
    code, so, _ = cli("inspect", LLAMA_GGUF, "--json")
    assert json.loads(so)["dspark"] is None
