"""inspect (convert/describe.py): format, keys, tensors and the target-layer ids in both conventions."""
from __future__ import annotations

import json

from tests.convert.conftest import do_convert


def test_inspect_shows_both_conventions(cli, tmp_path):
    code, src, _, _ = do_convert(cli, tmp_path, "qwen3-flat", "llama.cpp")
    code, so, se = cli("inspect", src, "--json")
    assert code == 0, se
    j = json.loads(so)
    assert j["format"] == "llama.cpp"
    assert j["target_layers"] == {"zlab_output_of_layer": [0, 1, 2, 3], "llamacpp_input_of_layer": [1, 2, 3, 4],
                                  "stored": [1, 2, 3, 4]}
