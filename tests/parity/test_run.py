"""run_parity end to end on the fixtures (CPU): lossless, JSON schema, GGUF drafters, sampling, bad inputs."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.conftest import DRAFTERS, rewrite_gguf  # noqa: E402
from tests.parity.conftest import PROMPT, QWEN, gguf_of, parity  # noqa: E402


def test_greedy_is_lossless_and_schema(cli, tmp_path):
    g = gguf_of(cli, tmp_path)
    code, rep, so, se = parity(cli, tmp_path, "--drafter-gguf", g)
    assert code == 0, se
    assert rep["prompt_ids"] == [int(t) for t in PROMPT.split(",")]
    ref = rep["reference"]
    assert set(ref) >= {"new_ids", "steps", "acceptance_lengths", "mean_acceptance_length", "acceptance_rate",
                        "tokens_per_s", "lossless"}
    assert ref["lossless"] is True and rep["lossless"] is True
    assert len(ref["new_ids"]) == 20
    for s in ref["steps"]:
        assert set(s) == {"draft", "accepted", "bonus"} and 0 <= s["accepted"] <= len(s["draft"])
    assert sum(ref["acceptance_lengths"]) == len(ref["new_ids"]) - 1  # the prefill token is not a round
    assert ref["mean_acceptance_length"] == pytest.approx(np.mean(ref["acceptance_lengths"]))
    (d,) = rep["drafters"]
    lp = d["logit_parity"]
    assert set(lp) >= {"max_abs", "mean_kl", "max_kl", "top1_agreement", "first_divergence"}
    assert d["format"] == "llama.cpp" and d["lossless"] is True
    assert lp["top1_agreement"] >= 0.95 and lp["mean_kl"] < 1e-3
    assert "reference" in so and "FLAGGED" not in so


def test_target_quant_and_emulate(cli, tmp_path):
    code, rep, so, se = parity(cli, tmp_path, "--target-quant", "q8_0", "--emulate", "llama.cpp", drafter="qwen3-nested")
    assert code == 0, se
    assert rep["settings"]["target_quant"] == "q8_0"
    emu = rep["emulated"]
    assert emu["notes"] and "non-causal" in emu["notes"][0] and "sliding layers causal" in emu["notes"][0]
    assert emu["lossless"] is True


def test_sampling_is_seeded(cli, tmp_path):
    args = ("--temperature", "0.8", "--top-p", "0.9", "--seed", "3", "--runs", "2")
    a = parity(cli, tmp_path, *args)[1]
    b = parity(cli, tmp_path, *args)[1]
    assert a["reference"]["new_ids"] == b["reference"]["new_ids"]
    assert a["reference"]["lossless"] is None  # lossless is a temperature-0 property


@pytest.mark.gpu
def test_cuda_path_matches_cpu(cli, tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    rep = tmp_path / "g.json"
    code, _, se = cli("parity", "--target", QWEN, "--drafter", DRAFTERS / "qwen3-flat", "--prompt-ids", PROMPT,
                      "--max-new-tokens", "20", "--device", "cuda", "--report", rep)
    assert code == 0, se
    g = json.loads(rep.read_text())["payload"]
    c = parity(cli, tmp_path, n=20)[1]
    assert g["device"].startswith("cuda") and g["reference"]["lossless"] is True
    assert g["reference"]["new_ids"] == c["reference"]["new_ids"]


def test_wrong_theta_baked_in_a_gguf_is_reported_and_used(cli, tmp_path):
    """A converter that baked the wrong RoPE theta: parity names the constant and runs with it."""
    good = gguf_of(cli, tmp_path, drafter="qwen3-nested", outtype="auto", name="good.gguf")
    bad = rewrite_gguf(good, tmp_path / "theta.gguf", values={"dflash.rope.freq_base": 1e6})
    code, rep, so, se = parity(cli, tmp_path, "--drafter-gguf", good, "--drafter-gguf", bad, drafter="qwen3-nested",
                               prompt=",".join(str(i) for i in range(3, 60)), n=16)
    assert code == 0, se
    exact, wrong = rep["drafters"]
    assert exact["logit_parity"]["max_abs"] == 0.0 and not exact.get("notes")
    assert any("rope_theta is 1000000.0 in the GGUF but 10000000.0" in n for n in wrong["notes"])
    assert wrong["logit_parity"]["max_abs"] > 0  # the wrong theta was really used
    assert "rope_theta" in se


@pytest.mark.parametrize("kind", ["dspark", "mimo"])
def test_dspark_and_mimo_drafters_run_through_parity(tmp_path, kind):
    from dflash_gguf.parity import ParityOptions, run_parity
    from dflash_gguf.reference import tiny

    tcfg = json.loads((QWEN / "config.json").read_text())
    if kind == "dspark":
        kw = dict(extra={"architectures": ["DSparkDraftModel"], "markov_rank": 8, "draft_vocab_size": 256})
    else:
        kw = dict(extra={"partial_rotary_factor": 0.5}, dflash_extra={
            "use_swa": True, "swa_window_size": 6, "attention_sink_bias": True, "attention_value_scale": 0.6})
    tiny.save_drafter(tmp_path / "d", tiny.drafter_config(tcfg, taps=(0, 4), **kw), seed=5, residual=0.5)
    prompt = [int(t) for t in PROMPT.split(",")]
    rep = run_parity(QWEN, tmp_path / "d", [prompt], options=ParityOptions(max_new_tokens=12, device="cpu",
                                                                          emulate="llama.cpp")).to_json()
    assert rep["lossless"] is True and rep["emulated"]["lossless"] is True
    steps = rep["reference"]["steps"]
    if kind == "dspark":
        assert rep["settings"]["drafter_family"] == "dspark"
        assert rep["settings"]["attention_rules"] == "mlx-dspark 0.20.3"
        # sample_from_anchor (DeepSpec's default): a block of 4 slots drafts 4 tokens
        assert len(steps[0]["draft"]) == 4 and all(len(s["confidence"]) == len(s["draft"]) for s in steps)
        sampled = run_parity(QWEN, tmp_path / "d", [prompt], options=ParityOptions(
            max_new_tokens=12, device="cpu", temperature=0.8, seed=2, runs=2)).to_json()["reference"]
        assert 0.0 <= sampled["acceptance_rate"] <= 1.0 and len(sampled["new_ids"]) == 12
    else:
        assert rep["settings"]["attention_rules"] == "vLLM qwen3_dflash"
        assert len(steps[0]["draft"]) == 3 and "confidence" not in steps[0]


def _without_timings(doc):
    """The report minus what depends on the clock (tokens/s) and on --jobs itself."""
    if isinstance(doc, dict):
        return {k: _without_timings(v) for k, v in doc.items() if not k.startswith("tokens_per_s") and k != "jobs"}
    if isinstance(doc, list):
        return [_without_timings(v) for v in doc]
    return doc


@pytest.mark.parametrize("backend", ["native", pytest.param("transformers", marks=pytest.mark.slow)])
def test_prompts_on_several_threads_report_what_one_at_a_time_does(cli, tmp_path, backend):
    if backend == "transformers":
        pytest.importorskip("transformers")
    lines = ['{"prompt_ids": [1, 5, 9, 33, 71, 100, 7, 250]}', '{"prompt_ids": [3, 3, 8]}',
             '{"prompt_ids": [200, 11, 17, 4, 90]}']
    (tmp_path / "p.jsonl").write_text("\n".join(lines) + "\n")
    from dflash_gguf.reference.pool import torch_threads

    g = gguf_of(cli, tmp_path)
    reps = {}
    for jobs in ("1", "3"):
        rep = tmp_path / f"r{jobs}.json"
        with torch_threads(1):  # --jobs 1 keeps torch's thread count; the jobs run at one each
            code, so, se = cli("parity", "--target", QWEN, "--drafter", DRAFTERS / "qwen3-flat", "--prompts-file",
                               tmp_path / "p.jsonl", "--drafter-gguf", g, "--max-new-tokens", 16, "--device", "cpu",
                               "--temperature", "0.7", "--seed", "4", "--jobs", jobs, "--target-backend", backend,
                               "--report", rep)
        assert code == 0, se
        reps[jobs] = json.loads(rep.read_text())["payload"]
    assert reps["1"]["settings"]["jobs"] == 1 and reps["3"]["settings"]["jobs"] == 3
    assert [p["prompt_ids"] for p in reps["3"]["prompts"]] == [json.loads(x)["prompt_ids"] for x in lines]
    assert _without_timings(reps["3"]) == _without_timings(reps["1"])


def test_negative_jobs_is_a_usage_error(cli, tmp_path):
    code, rep, so, se = parity(cli, tmp_path, "--jobs", "-1")
    assert code == 2 and "--jobs -1" in se and "Traceback" not in se
