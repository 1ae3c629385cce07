"""Drafter-format checks: the converter's output in every format, then one defect at a time."""
from __future__ import annotations

import numpy as np
import pytest

from dflash_gguf.guards.run import run_checks
from tests.guards.conftest import FORMATS, V, assert_defect, rewrite


@pytest.mark.parametrize("fmt", FORMATS)
def test_converted_drafters_are_clean_and_pair(cli, drafters, fmt):
    r = run_checks(drafters[fmt], target=drafters["target"])
    if fmt == "llama.cpp":
        # qwen3-nested taps z-lab layer 4, the last of its 5-layer target: legal for z-lab's
        # reference, an abort in mainline llama.cpp (it captures layer inputs; a qwen3 graph has no
        # input for layer 5). The guard is for the mainline format only.
        assert [f.code for f in r.findings] == ["pair-taps-last-layer"]
        assert cli("check", drafters[fmt], "--target", drafters["target"], "--deep", "--no-progress")[0] == 13
        return
    assert r.findings == (), [f.message for f in r.findings]
    assert cli("check", drafters[fmt], "--target", drafters["target"], "--deep", "--no-progress")[0] == 0


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
    assert_defect(cli, p, code, says)
