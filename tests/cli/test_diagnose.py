"""`diagnose` on the command line (cli/diagnose.py): bad inputs are one line and exit 2 before
anything runs; the trained pair of fixtures/runtime with a planted wrong-theta GGUF ends in the
conversion verdict, with a badly quantized served target (--target-gguf) in the target verdict;
a runtime (the fake llama-server) that loses what the emulated rules keep is "runtime", gated by
--max-stage-loss (exit 32); without torch stage 5 still runs, per --suite, and on a running
vLLM endpoint (--engine vllm)."""
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from dflash_gguf.errors import EXIT_DIAGNOSE
from tests.conftest import RUNTIME
from tests.diagnose import plant_target, plant_theta
from tests.verdict.conftest import envelope_validator, sarif_validator

BASE = ("diagnose", "--target", RUNTIME / "target", "--device", "cpu", "--jobs", "1")


@pytest.fixture
def second_prompt(tmp_path):
    """One prompt of the fixture's file (the trained pair accepts most of its drafts)."""
    p = tmp_path / "p.jsonl"
    p.write_text((RUNTIME / "prompts.jsonl").read_text().splitlines()[1] + "\n")
    return ("--prompts-file", p, "--tokenizer-dir", RUNTIME / "target")


@pytest.mark.parametrize("args,says", [
    (("--drafter", "no-such-dir", "--prompt-ids", "1,2"), "--drafter no-such-dir: no such directory"),
    (("--drafter", RUNTIME / "drafter.gguf", "--prompt-ids", "1,2"), "a GGUF file; --drafter takes the original checkpoint"),
    (("--drafter", RUNTIME / "drafter"), "give exactly one of --prompt-ids, --prompt, --prompts-file"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,x"), "expected comma-separated integers"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--quants", "q8_0,q9_9"), "--quants 'q9_9': unsupported file type"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--quants", "iq2_xxs"), "needs an importance matrix"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--target-quant", "q7"), "--target-quant 'q7'"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--server-bin", "/no/llama-server"), "no such file"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--server-bin", "/bin/sh"), "give --target-gguf"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--server", "http://127.0.0.1:9",
      "--drafter-gguf", RUNTIME / "drafter.gguf", "--drafter-gguf", RUNTIME / "drafter.gguf"), "say which drafter"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--drafter-gguf", "missing.gguf"),
     "--drafter-gguf missing.gguf: no such file"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--max-stage-loss", "-1"), "--max-stage-loss -1"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--expect", "0.5"), "--expect 0.5"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--emulate", "vllm"), "--emulate 'vllm'"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--draft-context", "0"), "--draft-context 0"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--engine", "tgi", "--server", "http://127.0.0.1:9"),
     "--engine 'tgi': choose llama.cpp, vllm, sglang"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--engine", "vllm"), "point --server at the running vllm"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--suite", "chat"), "give --suite or one of"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--limit", "2"), "--limit takes the first N prompts"),
    (("--drafter", RUNTIME / "drafter", "--suite", "chat", "--limit", "0"), "--limit 0: must be at least 1"),
    (("--drafter", RUNTIME / "drafter", "--suite", "nope"), "--suite 'nope': not a suite name"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--server-args", "-ngl 99"), "give --server-bin"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--device-map", "auto"), "add --target-backend transformers"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--target-backend", "transformers", "--target",
      RUNTIME / "target.gguf"), "--target-backend transformers loads a Hugging Face directory"),
    (("--drafter", RUNTIME / "drafter", "--prompt-ids", "1,2", "--server-args", "-a 'b"), "cannot split it into flags"),
])
def test_bad_inputs_are_one_line_and_exit_2(cli, args, says):
    code, so, se = cli(*BASE, *args)
    assert code == 2, se
    assert says in se and "Traceback" not in se and len(se.strip().splitlines()) == 1


def test_the_trained_pair_with_a_planted_theta_ends_in_the_conversion_verdict(cli, tmp_path):
    pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")
    theta = plant_theta(tmp_path / "theta.gguf")
    rep = tmp_path / "r.json"
    code, so, se = cli(*BASE, "--drafter", RUNTIME / "drafter", "--drafter-gguf", RUNTIME / "drafter.gguf",
                       "--drafter-gguf", theta, "--prompts-file", RUNTIME / "prompts.jsonl",
                       "--tokenizer-dir", RUNTIME / "target", "--max-new-tokens", "16", "--report", rep)
    assert code == 0, se
    lines = so.strip().splitlines()
    assert lines[-1].startswith("diagnose: PASS: stage 2 (conversion) loses the most: theta.gguf")
    assert "stage 5 (runtime) not run: no --server-bin/--server" in so
    assert "verdict: conversion:" in so and "rope_theta is 10000.0 in the GGUF" in so
    assert "recommendation: drafter.gguf (BF16" in so
    env = json.loads(rep.read_text())
    envelope_validator().validate(env)
    assert (env["command"], env["exit_code"], env["summary"]) == ("diagnose", 0, lines[-1])
    p = env["payload"]
    assert p["verdict"]["stage"] == "conversion" and p["settings"]["prompts"] == 5
    assert p["recommendation"]["drafter"]["name"] == "drafter.gguf"


def test_a_badly_quantized_served_target_is_the_target_stage(cli, tmp_path, second_prompt):
    pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")
    served = plant_target(tmp_path / "target-Q4_0.gguf")
    code, so, se = cli(*BASE, "--drafter", RUNTIME / "drafter", "--drafter-gguf", RUNTIME / "drafter.gguf",
                       *second_prompt, "--max-new-tokens", "24", "--target-gguf", served, "--json")
    assert code == 0, se
    p = json.loads(so)["payload"]
    assert p["verdict"]["stage"] == "target", p["verdict"]["text"]
    assert p["verdict"]["facts"][0] == "target as served: target-Q4_0.gguf (Q4_0)"
    assert p["settings"]["target_stage3"] == {"source": "served", "quant": "Q4_0", "path": str(served),
                                              "label": "target as served: target-Q4_0.gguf (Q4_0)"}
    good = next(x for x in p["drafters"] if x["name"] == "drafter.gguf")
    conversion = next(d for d in p["deltas"] if d["drafter"] == "drafter.gguf" and d["stage"] == "conversion")
    assert conversion["loss"] == 0  # stage 2 is lossless: the drafter file is not to blame
    target = good["stages"]["target"]["mean_acceptance_length"]["mean"]
    assert target < good["stages"]["conversion"]["mean_acceptance_length"]["mean"]
    assert good["stages"]["runtime-semantics"]["mean_acceptance_length"]["mean"] == pytest.approx(target)


def test_a_runtime_that_loses_what_its_rules_keep_is_blamed_and_gated(cli, tmp_path, fake_bin, fake_env, second_prompt):
    pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the [plots] extra)")
    bad = tmp_path / "bad.gguf"  # the fake server drafts badly for a file named so; the reference, well
    shutil.copyfile(RUNTIME / "drafter.gguf", bad)
    code, so, se = cli(*BASE, "--drafter", RUNTIME / "drafter", "--drafter-gguf", bad, *second_prompt,
                       "--max-new-tokens", "24", "--server-bin", fake_bin, "--target-gguf", RUNTIME / "target.gguf",
                       "--max-stage-loss", "1", "--json", "--plots", tmp_path / "plots", "--report", tmp_path / "r.sarif")
    assert code == EXIT_DIAGNOSE, se
    env = json.loads(so)
    envelope_validator().validate(env)
    sarif = json.loads((tmp_path / "r.sarif").read_text())
    sarif_validator().validate(sarif)
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["diagnose-max-stage-loss"]
    p = env["payload"]
    assert env["exit_code"] == EXIT_DIAGNOSE and env["summary"].startswith("diagnose: FAIL (exit 32): stage 5 (runtime)")
    assert p["verdict"]["stage"] == "runtime" and p["verdict"]["drafter"] == "bad.gguf"
    assert any("runtime bug, not your file" in f for f in p["verdict"]["facts"])
    assert p["gate"] == {"max_stage_loss": 1.0, "loss": p["verdict"]["loss"], "passed": False}
    (f,) = env["findings"]
    assert f["rule_id"] == "diagnose-max-stage-loss" and f["file"] == str(bad)
    assert sorted(x.rsplit("/", 1)[1] for x in p["plots"]) == ["acceptance_by_position.png", "waterfall.png"]
    assert all((tmp_path / "plots" / n).stat().st_size > 0 for n in ("waterfall.png", "acceptance_by_position.png"))


@pytest.fixture
def no_torch(monkeypatch):
    """diagnose as it runs where the [torch] extra is not installed."""
    import dflash_gguf.parity as parity
    from dflash_gguf.errors import UsageError

    def refuse():
        raise UsageError("parity needs the 'torch' package: pip install 'dflash-gguf[torch]'")

    monkeypatch.setattr(parity, "require_torch", refuse)


def test_without_torch_stage_5_still_runs_and_quants_are_made_from_the_checkpoint(cli, fake_bin, fake_env, no_torch):
    code, so, se = cli(*BASE, "--drafter", RUNTIME / "drafter", "--quants", "q8_0", "--prompt-ids", "1,5,9,33",
                       "--max-new-tokens", "8", "--server-bin", fake_bin, "--target-gguf", RUNTIME / "target.gguf",
                       "--json")
    assert code == 0, se
    p = json.loads(so)["payload"]
    for s in p["stages"][:4]:
        assert not s["ran"] and "parity needs the 'torch' package" in s["why"]
    assert p["stages"][4]["ran"]
    made = {x["name"]: x for x in p["drafters"][1:]}
    assert set(made) == {"drafter-BF16.gguf", "drafter-BF16-Q8_0.gguf"}  # converted, then quantized
    assert made["drafter-BF16.gguf"]["origin"] == "converted" and made["drafter-BF16.gguf"]["full_precision"]
    assert all("runtime" in x["stages"] for x in made.values())
    assert p["verdict"]["stage"] is None  # nothing to compare stage 5 with
    # the fake drafts alike for both files: the smaller one keeps the full-precision one's acceptance
    assert p["recommendation"]["stage"] == "runtime"
    assert p["recommendation"]["drafter"]["name"] == "drafter-BF16-Q8_0.gguf"


def test_a_running_server_is_measured_as_the_drafter_it_is_named_with(cli, tmp_path, fake_bin, fake_env, no_torch):
    from dflash_gguf.bench.server import free_port

    good = tmp_path / "good.gguf"
    shutil.copyfile(RUNTIME / "drafter.gguf", good)
    port, log = free_port(), tmp_path / "server.log"
    with open(log, "w") as f:  # the step lines come from its LLAMA_TRACE log (the fake writes them to stderr)
        srv = subprocess.Popen([str(fake_bin), "-m", str(RUNTIME / "target.gguf"), "-md", str(good), "--port", str(port),
                                "--spec-draft-n-max", "15"], stdout=subprocess.DEVNULL, stderr=f)
    try:
        _wait_healthy(port)
        code, so, se = cli(*BASE, "--drafter", RUNTIME / "drafter", "--drafter-gguf", RUNTIME / "drafter.gguf",
                           "--drafter-gguf", good, "--prompt-ids", "1,5,9,33", "--max-new-tokens", "8",
                           "--server", f"{good}=http://127.0.0.1:{port}", "--server-log", log, "--json")
    finally:
        srv.terminate()
        srv.wait(10)
    assert code == 0, se
    p = json.loads(so)["payload"]
    by_name = {x["name"]: x for x in p["drafters"]}
    assert "runtime" in by_name["good.gguf"]["stages"], (by_name["good.gguf"]["skipped"], p["stages"][4]["why"])
    assert "runtime" in by_name["good.gguf"]["stages"] and "runtime" not in by_name["drafter.gguf"]["stages"]
    assert by_name["good.gguf"]["stages"]["runtime"]["acceptance_rate"]["mean"] > 0


def test_each_suite_has_its_verdict_and_recommendation(cli, tmp_path, fake_bin, fake_env, no_torch):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the [plots] extra)")
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"prompt_ids": [1, 5, 9, 33]}\n{"prompt_ids": [2, 6]}\n')
    b.write_text('{"prompt_ids": [7, 8, 9]}\n')
    code, so, se = cli(*BASE, "--drafter", RUNTIME / "drafter", "--drafter-gguf", RUNTIME / "drafter.gguf",
                       "--suite", a, "--suite", b, "--limit", "1", "--max-new-tokens", "8", "--server-bin", fake_bin,
                       "--target-gguf", RUNTIME / "target.gguf", "--json", "--plots", tmp_path / "plots")
    assert code == 0, se
    env = json.loads(so)
    envelope_validator().validate(env)
    p = env["payload"]
    assert [x["settings"]["suite"] for x in p["suites"]] == ["a", "b"]
    assert [x["settings"]["prompt_tokens"] for x in p["suites"]] == [[4], [3]]  # --limit 1 each
    for x in p["suites"]:
        assert x["stages"][4]["ran"] and x["recommendation"]["drafter"]["name"] == "drafter.gguf"
        assert "runtime" in x["drafters"][1]["stages"]
    assert "a: " in env["summary"] and "; b: " in env["summary"]
    assert sorted(str(Path(x).relative_to(tmp_path / "plots")) for x in p["plots"]) == [
        "a/acceptance_by_position.png", "a/waterfall.png", "b/acceptance_by_position.png", "b/waterfall.png"]


def test_a_running_vllm_endpoint_is_stage_5(cli, tmp_path, no_torch):
    import os
    import sys

    from dflash_gguf.bench.server import free_port
    from tests.bench.conftest import FAKE

    good = tmp_path / "good.gguf"
    shutil.copyfile(RUNTIME / "drafter.gguf", good)
    port = free_port()
    srv = subprocess.Popen([sys.executable, str(FAKE), "-m", str(RUNTIME / "target.gguf"), "-md", str(good), "--port",
                            str(port), "--spec-draft-n-max", "15"], env={**os.environ, "FAKE_ENGINE": "vllm"},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_healthy(port)
        code, so, se = cli(*BASE, "--drafter", RUNTIME / "drafter", "--drafter-gguf", good, "--prompt-ids", "1,5,9,33",
                           "--max-new-tokens", "8", "--server", f"http://127.0.0.1:{port}", "--engine", "vllm", "--json")
    finally:
        srv.terminate()
        srv.wait(10)
    assert code == 0, se
    p = json.loads(so)["payload"]
    assert p["settings"]["engine"] == "vllm"
    assert p["stages"][4]["ran"] and "running vllm server(s)" in p["stages"][4]["notes"][0]
    runtime = p["drafters"][1]["stages"]["runtime"]  # vLLM's counters give the steps: a mean acceptance length
    assert runtime["mean_acceptance_length"]["mean"] > 1 and runtime["steps"] > 0


def _wait_healthy(port: int, within: float = 10.0) -> None:
    import urllib.request

    deadline = time.monotonic() + within
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
