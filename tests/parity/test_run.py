"""parity end to end on the fixtures (CPU): lossless, JSON schema, GGUF parity, dump/against."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.conftest import DRAFTERS, TARGETS, rewrite_gguf  # noqa: E402

QWEN = TARGETS / "qwen3-tiny"
PROMPT = "1,5,9,33,71,100,7,250"


def gguf_of(cli, tmp_path, drafter="qwen3-flat", outtype="q8_0", name="d.gguf", fmt="llama.cpp"):
    out = tmp_path / name
    code, _, se = cli("convert", DRAFTERS / drafter, "--target-dir", QWEN, "--outtype", outtype, "--format", fmt,
                      "-o", out)
    assert code == 0, se
    return out


def parity(cli, tmp_path, *extra, drafter="qwen3-flat", target=QWEN, prompt=PROMPT, n=20):
    rep = tmp_path / "report.json"
    code, so, se = cli("parity", "--target", target, "--drafter", DRAFTERS / drafter, "--prompt-ids", prompt,
                       "--max-new-tokens", n, "--device", "cpu", "--json", rep, *extra)
    return code, (json.loads(rep.read_text()) if rep.exists() else None), so, se


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


def test_bf16_gguf_is_exact_and_corrupted_gguf_is_flagged(cli, tmp_path):
    good = gguf_of(cli, tmp_path, outtype="auto", name="good.gguf")
    # corrupt: negate the final norm (what a sign bug in a converter would do)
    bad = rewrite_gguf(good, tmp_path / "bad.gguf", data={"output_norm.weight": lambda a: -a})
    code, rep, so, se = parity(cli, tmp_path, "--drafter-gguf", good, "--drafter-gguf", bad)
    assert code == 0, se  # still lossless: the target verifies every token
    exact, corrupt = rep["drafters"]
    assert exact["logit_parity"]["max_abs"] == 0.0 and exact["logit_parity"]["top1_agreement"] == 1.0
    assert corrupt["logit_parity"]["top1_agreement"] < 0.9
    assert corrupt["logit_parity"]["first_divergence"] is not None
    assert "FLAGGED" in so and "bad.gguf" in se


def test_llama_target_gguf_and_gemma_style_drafter(cli, tmp_path):
    code, rep, _, se = parity(cli, tmp_path, drafter="gemma-style", target=TARGETS / "llama-tiny.gguf", n=12)
    assert code == 0, se
    assert rep["reference"]["lossless"] is True


def test_same_report_from_hf_target_and_its_gguf(cli, tmp_path):
    """llama-tiny as HF dir and as GGUF (Q/K permuted by llama.cpp's convention) decode alike."""
    a = parity(cli, tmp_path, drafter="gemma-style", target=TARGETS / "llama-tiny", n=12)[1]
    b = parity(cli, tmp_path, drafter="gemma-style", target=TARGETS / "llama-tiny.gguf", n=12)[1]
    assert a["reference"]["new_ids"] == b["reference"]["new_ids"]


def test_dump_against_round_trip(cli, tmp_path):
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    assert parity(cli, tmp_path, "--dump", d1)[0] == 0
    code, rep, so, se = parity(cli, tmp_path, "--dump", d2, "--against", d1)
    assert code == 0, se
    a = rep["against"]
    assert a["identical"] is True and a["tensors_compared"] > 0
    index = json.loads((d1 / "index.json").read_text())
    assert index["version"] == 1 and index["entries"][0]["steps"]
    step = index["entries"][0]["steps"][0]
    from safetensors.numpy import load_file

    t = load_file(str(d1 / step["file"]))
    assert {"context", "block_ids", "positions", "draft_logits"} <= set(t)
    assert t["block_ids"].tolist()[0] == rep["prompt_ids"][-1] or step["start"] > len(rep["prompt_ids"])
    # a perturbed dump is detected
    t["draft_logits"][0, 0] += 1.0
    from safetensors.numpy import save_file

    save_file(t, str(d1 / step["file"]))
    code, rep, _, _ = parity(cli, tmp_path, "--dump", tmp_path / "d3", "--against", d1)
    assert rep["against"]["identical"] is False and rep["against"]["max_abs_by_tensor"]["draft_logits"] > 0.99


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


def test_text_prompt_uses_target_tokenizer(cli, tmp_path):
    rep = tmp_path / "r.json"
    code, _, se = cli("parity", "--target", QWEN, "--drafter", DRAFTERS / "qwen3-flat", "--prompt", "hello world",
                      "--max-new-tokens", "4", "--device", "cpu", "--json", rep)
    assert code == 0, se
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(QWEN / "tokenizer.json")).encode("hello world", add_special_tokens=False).ids
    assert json.loads(rep.read_text())["prompt_ids"] == ids


@pytest.mark.parametrize("args,needle", [
    ((), "exactly one of"),
    (("--prompt-ids", "1,x"), "comma-separated"),
    (("--prompt-ids", "1,99999"), "outside the target's vocabulary"),
])
def test_bad_inputs_are_one_line(cli, tmp_path, args, needle):
    code, so, se = cli("parity", "--target", QWEN, "--drafter", DRAFTERS / "qwen3-flat", "--device", "cpu", *args)
    assert code == 2 and needle in se and "Traceback" not in se


@pytest.mark.gpu
def test_cuda_path_matches_cpu(cli, tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    rep = tmp_path / "g.json"
    code, _, se = cli("parity", "--target", QWEN, "--drafter", DRAFTERS / "qwen3-flat", "--prompt-ids", PROMPT,
                      "--max-new-tokens", "20", "--device", "cuda", "--json", rep)
    assert code == 0, se
    g = json.loads(rep.read_text())
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


def test_emulate_llama_cpp_caps_the_draft_context(cli, tmp_path, monkeypatch):
    """--emulate llama.cpp also applies the historical 512-position cross_ctx cap (listed in the notes),
    to the emulated run only; a small cap, set through ParityOptions, binds on a longer prompt and stays
    lossless. (That the cap changes the drafter's logits is tested in tests/reference/test_loop.py.)"""
    from dflash_gguf import reference as ref
    from dflash_gguf.parity import LLAMA_CPP_DRAFT_CONTEXT, ParityOptions, run_parity

    code, rep, so, se = parity(cli, tmp_path, "--emulate", "llama.cpp")
    assert code == 0, se
    notes = rep["emulated"]["notes"]
    assert LLAMA_CPP_DRAFT_CONTEXT == 512
    assert any("draft context capped at the last 512 positions" in n and "cross_ctx" in n for n in notes)
    assert any("never binds" in n for n in notes)  # 8 + 20 tokens < 512
    assert "capped at the last 512" in se or "capped at the last 512" in so

    caps = []
    real = ref.generate

    def spy(*args, **kwargs):
        caps.append(kwargs.get("draft_context"))
        return real(*args, **kwargs)

    monkeypatch.setattr(ref, "generate", spy)
    prompt = list(range(3, 40))
    opts = ParityOptions(max_new_tokens=16, device="cpu", emulate="llama.cpp", draft_context=4)
    report = run_parity(QWEN, DRAFTERS / "qwen3-flat", [prompt], options=opts)
    assert caps == [None, 4]  # the reference runs uncapped, the emulated drafter capped
    (p,) = report.prompts
    assert any("capped at the last 4 positions" in n for n in p.emulated.notes)
    assert not any("never binds" in n for n in p.emulated.notes)
    assert p.emulated.lossless is True and p.reference.lossless is True
    caps.clear()
    report = run_parity(QWEN, DRAFTERS / "qwen3-flat", [prompt], options=ParityOptions(max_new_tokens=16, device="cpu"))
    assert caps == [None] and report.prompts[0].emulated is None


def test_cli_draft_context_cap_is_reported(cli, tmp_path):
    code, rep, so, se = parity(cli, tmp_path, "--emulate", "llama.cpp", "--draft-context", "4",
                               prompt=",".join(str(i) for i in range(3, 40)), n=8)
    assert code == 0, se
    assert rep["settings"]["draft_context"] == 4
    assert any("last 4 positions" in n for n in rep["emulated"]["notes"])
    code, rep, _, _ = parity(cli, tmp_path)
    assert rep["settings"]["draft_context"] is None  # no emulation: the reference is never capped


@pytest.mark.slow
def test_transformers_backend_gives_the_same_report(cli, tmp_path):
    pytest.importorskip("transformers")
    native = parity(cli, tmp_path, n=12)[1]
    code, hf, _, se = parity(cli, tmp_path, "--target-backend", "transformers", n=12)
    assert code == 0, se
    assert hf["reference"]["new_ids"] == native["reference"]["new_ids"]
    assert hf["reference"]["acceptance_lengths"] == native["reference"]["acceptance_lengths"]
    code, _, _, se = parity(cli, tmp_path, "--target-backend", "transformers", target=TARGETS / "llama-tiny.gguf")
    assert code == 2 and "must be a Hugging Face directory" in se
