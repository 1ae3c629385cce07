"""DSpark drafters through convert: every architecture mainline registers, identical to
mainline's converter (KV names, types, values; tensor names, types, shapes, bytes), its
refusals with its reasons, and files real llama.cpp loads. Plus the plan's own choices
(d2t, t2d, lm_head, the heads' shapes) without llama.cpp."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.convert.dspark_ckpt import (CASES, VOCAB, build_case, dspark_config, gemma4_config, reduced_d2t,
                                       spm_target_dir, write_dspark)

from tests.convert.test_llamacpp_ground_truth import fields, llama_src  # one reader, one skip rule


# --- refusal cases: name -> (checkpoint writer, mainline's reason, our exit code) -------------
def _reduced(**kw):
    return lambda d: write_dspark(d, dspark_config("Qwen3DSparkModel", draft_vocab=200), **kw)


def _gemma(**cfg):
    return lambda d: write_dspark(d, gemma4_config(**cfg))


_DUP = reduced_d2t(200)
_DUP[5] = _DUP[4] - 1  # draft id 5 lands on draft id 4's target id
_RANGE = reduced_d2t(200)
_RANGE[-1] = VOCAB  # the last draft id maps past the vocabulary
REFUSALS = {
    "markov-head": (lambda d: write_dspark(d, dspark_config(markov_head_type="gated")),
                    "unsupported markov_head_type 'gated' (only 'vanilla' is supported)", 3),
    "draft-exceeds-vocab": (lambda d: write_dspark(d, dspark_config(draft_vocab=600)),
                            "draft_vocab_size 600 exceeds vocab_size 512", 3),
    "d2t-range": (_reduced(d2t=_RANGE), "d2t target ids out of range for target vocab size 512", 4),
    "d2t-duplicate": (_reduced(d2t=_DUP), "d2t contains duplicate target ids", 4),
    "d2t-size": (_reduced(d2t=reduced_d2t(150)), "d2t size 150 does not match draft_vocab_size 200", 4),
    "no-d2t": (_reduced(drop=("d2t",)), "draft_vocab_size 200 < vocab_size 512 but no d2t table found", 4),
    "gemma4-k-ne-v": (_gemma(attention_k_eq_v=False), "Gemma4 DSpark currently requires attention_k_eq_v", 3),
    "gemma4-sliding": (_gemma(layer_types=["sliding_attention", "full_attention"]),
                       "Gemma4 DSpark currently requires uniform full_attention layer types", 3),
    "gemma4-act": (_gemma(hidden_activation="gelu"),
                   "Gemma4 DSpark currently requires hidden_activation=gelu_pytorch_tanh", 3),
    "gemma4-moe": (_gemma(enable_moe_block=True), "Gemma4 DSpark attention bias and MoE are not supported", 3),
    "gemma4-bias": (_gemma(attention_bias=True), "Gemma4 DSpark attention bias and MoE are not supported", 3),
    "gemma4-reduced": (_gemma(draft_vocab_size=200), "Gemma4 DSpark currently requires a full draft vocabulary", 3),
    "gemma4-no-head": (lambda d: write_dspark(d, gemma4_config(), lm_head=False),
                       "Gemma4 DSpark requires lm_head.weight unless tie_word_embeddings is true", 4),
    "gemma4-markov": (_gemma(dflash_config={"mask_token_id": 500, "target_layer_ids": [0, 1, 3],
                                            "markov_head_type": "gated"}),
                      "Gemma4 DSpark currently requires a vanilla Markov head", 3),
    "gemma4-yarn": (_gemma(rope_parameters={"full_attention": {"rope_type": "yarn", "factor": 2.0, "rope_theta": 1e6,
                                                               "original_max_position_embeddings": 2048}}),
                    "Gemma4 DSpark requires default or proportional RoPE", 3),
    "gemma4-no-mask": (_gemma(dflash_config={"target_layer_ids": [0, 1, 3]}), "Gemma4 DSpark requires mask_token_id", 3),
    "gemma4-no-taps": (_gemma(dflash_config={"mask_token_id": 500}), "Gemma4 DSpark requires target_layer_ids", 3),
    "gemma4-softcap": (_gemma(final_logit_softcapping=30.0), "Gemma4 DSpark logit softcapping is not supported", 3),
    "gemma4-swa": (_gemma(dflash_config={"mask_token_id": 500, "target_layer_ids": [0, 1, 3], "use_swa": True,
                                         "swa_window_size": 0}), "Gemma4 DSpark swa_window_size must be positive", 3),
    "gemma4-rotary": (_gemma(rope_parameters={"full_attention": {"rope_type": "proportional", "rope_theta": 1e6,
                                                                 "partial_rotary_factor": 0.3}}),
                      "Gemma4 DSpark rotary dimension count must be positive and even", 3),
}


# --- our own plan, no llama.cpp needed ----------------------------------------------------------
def test_d2t_written_as_absolute_i64_ids(dspark):
    kv, ts = fields(dspark["gguf"]["qwen3-reduced"])
    offsets = reduced_d2t(200)
    typ, shape, data = ts["d2t"]
    assert (typ, shape) == ("I64", [200])
    ids = np.frombuffer(data, "<i8")
    assert (ids == offsets + np.arange(200)).all() and len(set(ids.tolist())) == 200
    assert ts["output.weight"][:2] == ("BF16", [64, 200])  # the reduced head is kept
    assert ts["markov_w2.weight"][:2] == ("BF16", [32, 200]) and ts["markov_w1.weight"][:2] == ("BF16", [32, 512])
    assert "t2d" not in ts and list(ts)[-1] == "d2t"  # written last, as mainline adds it
    assert kv["dflash.sample_from_anchor"] == (["BOOL"], True) and kv["dflash.has_confidence_head"] == (["BOOL"], True)


@pytest.mark.parametrize("case, anchor, conf, head", [
    ("draft", True, True, False), ("speculator", False, False, True), ("lfm2", True, True, False),
    ("ling", False, True, False), ("gemma4", True, True, True), ("gemma4-tied", True, False, False)])
def test_keys_and_heads(dspark, case, anchor, conf, head):
    kv, ts = fields(dspark["gguf"][case])
    assert kv["dflash.sample_from_anchor"] == (["BOOL"], anchor)
    assert kv["dflash.has_confidence_head"] == (["BOOL"], conf)
    assert ("conf_proj.weight" in ts) == conf
    if conf:
        assert ts["conf_proj.weight"][:2] == ("BF16", [96, 1])  # {n_embd + rank, 1}, what the runtime reads
    assert ("output.weight" in ts) == head  # a full-vocab DSpark head is dropped (not Gemma4's)


def test_gemma4_layout_keys_and_rope_freqs(dspark):
    kv, ts = fields(dspark["gguf"]["gemma4"])
    assert kv["dflash.attention.head_count_kv"] == (["UINT32"], 1)
    assert kv["dflash.attention.key_length"] == kv["dflash.attention.value_length"] == (["UINT32"], 32)
    assert kv["dflash.rope.dimension_count"] == (["UINT32"], 32)
    assert kv["dflash.embedding_scale"] == (["FLOAT32"], 8.0) and kv["dflash.attention.scale"] == (["FLOAT32"], 1.0)
    assert kv["dflash.hidden_activation"] == (["STRING"], "gelu_pytorch_tanh")
    freqs = np.frombuffer(ts["rope_freqs.weight"][2], "<f4")
    assert freqs.tolist() == [1.0] * 4 + [np.float32(1e30)] * 12  # 32 * 0.25 / 2 rotated pairs
    assert {"blk.0.post_attention_norm.weight", "blk.0.post_ffw_norm.weight", "blk.0.layer_output_scale.weight",
            "blk.0.ffn_norm.weight"} <= set(ts)
    assert "blk.0.attn_v.weight" not in ts and ts["blk.0.attn_k.weight"][1] == [64, 32]


def test_dropped_tensors_are_reported(cli, dspark, tmp_path):
    code, so, se = cli("convert", dspark["dirs"]["qwen3-reduced"], "--target-dir", dspark["target"], "--dry-run",
                       "--json")
    assert code == 0, se
    plan = json.loads(so)
    assert [d["name"] for d in plan["dropped"]] == ["t2d"]
    d2t = [t for t in plan["tensors"] if t["name"] == "d2t"]
    assert d2t and d2t[0]["type"] == "I64" and d2t[0]["source"] is None
    code, so, _ = cli("convert", dspark["dirs"]["draft"], "--target-dir", dspark["target"], "--dry-run", "--json")
    assert [d["name"] for d in json.loads(so)["dropped"]] == ["lm_head.weight"]


@pytest.mark.parametrize("case, says, exit_code", [
    (name, says, code) for name, (_w, says, code) in REFUSALS.items()])
def test_refusals_name_mainlines_reason(cli, tmp_path, case, says, exit_code):
    d = REFUSALS[case][0](tmp_path / case)
    out = tmp_path / "out.gguf"
    code, _, se = cli("convert", d, "--target-dir", spm_target_dir(tmp_path), "-o", out)
    assert code == exit_code and says in se, se
    assert len(se.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("writer, says", [
    (lambda d: write_dspark(d, dspark_config(), drop=("markov_head.markov_w2.weight",)),
     "the Markov head is incomplete: markov_head.markov_w1.weight is there but markov_head.markov_w2.weight is missing"),
    (lambda d: write_dspark(d, dspark_config(markov_rank=0), conf=False),
     "unexpected tensor(s) markov_head.markov_w1.weight, markov_head.markov_w2.weight"),
    (lambda d: write_dspark(d, {k: v for k, v in dspark_config().items() if k != "markov_rank"},
                            drop=("markov_head.markov_w1.weight", "markov_head.markov_w2.weight")),
     "a confidence head without a Markov head: llama.cpp reads confidence_head.proj.weight only next to markov_w1"),
    (lambda d: write_dspark(d, dspark_config(), replace={"confidence_head.proj.weight": ("F32", np.zeros((1, 64),
                                                                                                     np.float32))}),
     "a confidence head without the Markov features (confidence_head_with_markov=false)"),
    (lambda d: write_dspark(d, dspark_config("Qwen3DSparkModel", draft_vocab=200), lm_head=False),
     "draft_vocab_size 200 < vocab_size 512 but there is no lm_head.weight [200, 64]"),
    (lambda d: write_dspark(d, dspark_config(markov_rank=16)),
     "markov_head.markov_w1.weight has shape [512, 32] but config.json implies [512, 16]"),
    (lambda d: write_dspark(d, gemma4_config(), replace={"d2t": ("I64", np.zeros(512, np.int64))}),
     "d2t is a reduced-vocabulary table, but Gemma4 DSpark has no reduced vocabulary"),
])
def test_heads_the_runtime_cannot_load_are_refused(cli, tmp_path, writer, says):
    d = writer(tmp_path / "d")
    out = tmp_path / "out.gguf"
    code, _, se = cli("convert", d, "--target-dir", spm_target_dir(tmp_path), "-o", out)
    assert code == 4 and says in se, se
    assert not out.exists()


@pytest.mark.parametrize("fmt", ["llama.cpp-pr22105", "dflash-draft", "lucebox"])
def test_fork_formats_refuse_dspark_by_name(cli, dspark, tmp_path, fmt):
    out = tmp_path / "out.gguf"
    code, _, se = cli("convert", dspark["dirs"]["qwen3-reduced"], "--target-dir", dspark["target"], "--format", fmt,
                      "-o", out)
    assert code == 2 and "DSpark drafters" in se and "--format llama.cpp instead of --format " + fmt in se, se
    assert not out.exists()


def test_speculator_without_mask_id_converts_without_the_key(cli, tmp_path):
    cfg = dspark_config("DSparkSpeculator", speculators=True, draft_vocab=128)
    del cfg["mask_token_id"]
    d = write_dspark(tmp_path / "d", cfg, conf=False)
    out = tmp_path / "out.gguf"
    code, _, se = cli("convert", d, "--target-dir", spm_target_dir(tmp_path), "-o", out)
    assert code == 0 and "mask_token_id is missing" in se, se
    assert "tokenizer.ggml.mask_token_id" not in fields(out)[0]


# --- ground truth: mainline's converter and loader (llama-cpp-python 0.3.36) -----------------------
RUNNER = r'''
import json, runpy, sys
from pathlib import Path
import transformers

jobs, script, results_path = json.loads(Path(sys.argv[1]).read_text()), sys.argv[2], Path(sys.argv[3])
_from_pretrained = transformers.AutoConfig.from_pretrained


def from_pretrained(path, *args, **kwargs):
    # transformers 5's Gemma4TextConfig folds global_head_dim into per_layer_config, which
    # mainline's Gemma4DSparkModel does not read (KeyError): give it config.json as published,
    # as a transformers without Gemma 4 does (the converter falls back to the file)
    cfg = Path(path) / "config.json"
    if cfg.is_file() and "Gemma4DSparkModel" in json.loads(cfg.read_text()).get("architectures", []):
        raise ValueError("config.json as published")
    return _from_pretrained(path, *args, **kwargs)


transformers.AutoConfig.from_pretrained = from_pretrained
results = {}
for name, argv in jobs.items():  # one process: torch and transformers are imported once
    sys.argv = [script, *argv]
    try:
        runpy.run_path(script, run_name="__main__")
        results[name] = "ok"
    except SystemExit as e:
        results[name] = "ok" if not e.code else f"exit {e.code}"
    except Exception as e:
        results[name] = f"{type(e).__name__}: {e}"
results_path.write_text(json.dumps(results))
'''

LOAD_MANY = r'''
import sys, llama_cpp
llama_cpp.llama_backend_init()
for path in sys.argv[1:]:
    m = llama_cpp.llama_model_load_from_file(path.encode(), llama_cpp.llama_model_default_params())
    print(path, "LOADED" if m else "FAILED", flush=True)
'''


def load_many(paths) -> dict[str, str]:
    pytest.importorskip("llama_cpp")
    r = subprocess.run([sys.executable, "-c", LOAD_MANY, *map(str, paths)], capture_output=True, text=True, timeout=300)
    got = dict(line.rsplit(" ", 1) for line in r.stdout.splitlines() if line.endswith(("LOADED", "FAILED")))
    return {str(p): got.get(str(p), "CRASHED " + r.stderr[-300:]) for p in paths}


@pytest.fixture(scope="module")
def mainline(tmp_path_factory):
    """Mainline's converter on every case and every refusal, in one process."""
    src = str(llama_src())  # skips without the sources, torch, transformers or sentencepiece
    root = tmp_path_factory.mktemp("mainline")
    target = spm_target_dir(root)
    dirs = {n: build_case(root / "ckpt", n) for n in CASES}
    dirs.update({n: REFUSALS[n][0](root / "refuse" / n) for n in REFUSALS})
    jobs = {n: [str(d), "--target-model-dir", str(target), "--outfile", str(root / f"{n}.gguf"), "--outtype", "auto"]
            for n, d in dirs.items()}
    (root / "jobs.json").write_text(json.dumps(jobs))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(src) / "gguf-py"), src])}
    r = subprocess.run([sys.executable, "-c", RUNNER, str(root / "jobs.json"), str(Path(src) / "convert_hf_to_gguf.py"),
                        str(root / "results.json")], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return {"results": json.loads((root / "results.json").read_text()), "root": root, "dirs": dirs,
            "target": target}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_identical_to_mainline_converter(cli, mainline, tmp_path, case):
    assert mainline["results"][case] == "ok", mainline["results"][case]
    ours = tmp_path / "ours.gguf"
    code, _, se = cli("convert", mainline["dirs"][case], "--target-dir", mainline["target"], "-o", ours)
    assert code == 0, se
    ref_kv, ref_t = fields(mainline["root"] / f"{case}.gguf")
    our_kv, our_t = fields(ours)
    assert our_kv.keys() == ref_kv.keys(), (sorted(our_kv.keys() - ref_kv.keys()), sorted(ref_kv.keys() - our_kv.keys()))
    for k in ref_kv:
        assert our_kv[k] == ref_kv[k], k
    assert list(our_t) == list(ref_t)  # same tensors, in the same order
    for name in ref_t:
        assert our_t[name] == ref_t[name], name


@pytest.mark.slow
@pytest.mark.parametrize("case", list(REFUSALS))
def test_mainline_refuses_with_the_same_reason(mainline, case):
    got = mainline["results"][case]
    assert got.startswith("ValueError: ") and REFUSALS[case][1] in got, got
    assert not (mainline["root"] / f"{case}.gguf").exists()


@pytest.mark.slow
def test_real_llama_cpp_loads_every_case(dspark):
    paths = list(dspark["gguf"].values())
    assert set(load_many(paths).values()) == {"LOADED"}
