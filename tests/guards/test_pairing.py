"""`check --target`: a drafter against the right target, the wrong one, and shifted taps."""
from __future__ import annotations

import json

from dflash_gguf.guards.run import run_checks
from tests.guards.conftest import DRAFTER, GUARDS, QWEN, V, rewrite


def test_pairing_ok_and_mismatches(cli, tmp_path):
    assert cli("check", DRAFTER, "--target", QWEN)[0] == 0
    rc, out, _ = cli("check", DRAFTER, "--target", GUARDS / "qwen3-8b-base.gguf")
    assert rc == 13 and "pair-target-base" in out
    rc, out, _ = cli("check", DRAFTER, "--target", GUARDS / "gemma-3-1b-it.gguf", "--json")
    env = json.loads(out)
    (doc,) = env["payload"]["files"]
    assert rc == 13 and {f["code"] for f in doc["findings"]} >= {"pair-vocab-mismatch", "pair-mask-token"}
    assert {f["rule_id"] for f in env["findings"] if f["stage"] == "pairing"} >= {"pair-vocab-mismatch", "pair-mask-token"}
    assert doc["target"] == str(GUARDS / "gemma-3-1b-it.gguf")


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


def test_a_tap_on_the_targets_last_layer_is_refused_for_llama_cpp(cli, tmp_path):
    # Stored 36 = z-lab 35, the last layer of a 36-layer target: mainline reads the input of layer
    # 36, which does not exist, and llama-server aborts on the first request (seen with the
    # fixtures/runtime pair before its taps were moved below the last layer).
    p = rewrite(DRAFTER, tmp_path / "d.gguf", set_kv={"dflash.target_layers": ([2, 10, 18, 26, 36], V.ARRAY, V.INT32)})
    rc, out, _ = cli("check", p, "--target", QWEN)
    assert rc == 13 and "pair-taps-last-layer: target layer 36 (stored; z-lab id 35) is the output of the target's " \
                        "last layer" in out
    ok = rewrite(DRAFTER, tmp_path / "ok.gguf", set_kv={"dflash.target_layers": ([2, 10, 18, 26, 35], V.ARRAY, V.INT32)})
    assert "pair-taps-last-layer" not in cli("check", ok, "--target", QWEN)[1]


def test_stale_drafter_for_an_mrope_target(cli, tmp_path):
    """A mainline drafter without rope.dimension_sections next to an M-RoPE target is stale
    (error, with the fix); retarget with that target adds [head_dim/2, 0, 0, 0] and clears it."""
    mrope = rewrite(QWEN, tmp_path / "qwen35.gguf",
                    set_kv={"qwen3.rope.dimension_sections": ([11, 11, 10, 0], V.ARRAY, V.INT32)})
    rc, out, _ = cli("check", DRAFTER, "--target", mrope, "--json")
    stale = [f for f in json.loads(out)["payload"]["files"][0]["findings"] if f["code"] == "pair-mrope-stale"]
    assert rc == 13 and len(stale) == 1 and stale[0]["severity"] == "error"
    assert "dflash-gguf retarget FILE --target-gguf TARGET" in stale[0]["message"]
    assert cli("check", DRAFTER, "--target", QWEN)[0] == 0  # the same drafter is fine for a plain target

    fixed = tmp_path / "fixed.gguf"
    rc, _, err = cli("retarget", DRAFTER, "--format", "llama.cpp", "--target-gguf", mrope, "-o", fixed)
    assert rc == 0, err
    r = run_checks(fixed, target=mrope)
    assert "pair-mrope-stale" not in {f.code for f in r.findings}
    from dflash_gguf.fileio.gguf_reader import read_gguf
    kv = read_gguf(fixed).kvs["dflash.rope.dimension_sections"]
    head_dim = read_gguf(fixed).kvs["dflash.attention.key_length"].value
    assert list(kv.value) == [head_dim // 2, 0, 0, 0]
