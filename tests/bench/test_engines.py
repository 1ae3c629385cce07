"""`bench --server URL`: a running llama-server (with its log), vLLM (Prometheus deltas) and SGLang
(meta_info), each served by the fake."""
import os
import subprocess
import sys
import time

import pytest

from dflash_gguf.bench.server import free_port
from dflash_gguf.metrics.acceptance import Acceptance
from tests.bench import fake_llama_server as fake
from tests.bench.conftest import FAKE, TARGET, bench_json, pid_gone

N = 24


@pytest.fixture
def serve(tmp_path):
    """Start fakes ourselves, as a user would start their server: ``serve(engine, drafter)`` -> URL."""
    procs = []

    def start(engine, drafter=None, log=None):
        port = free_port()
        argv = [sys.executable, str(FAKE), "-m", str(TARGET), "--port", str(port)]
        if drafter:
            argv += ["-md", str(drafter), "--spec-draft-n-max", "15"]
        env = {**os.environ, "FAKE_ENGINE": engine, "LLAMA_TRACE": "1"}
        out = open(log, "wb") if log else subprocess.DEVNULL
        procs.append(subprocess.Popen(argv, env=env, stdout=out, stderr=out))
        url = f"http://127.0.0.1:{port}"
        import urllib.request
        for _ in range(200):
            try:
                urllib.request.urlopen(url + "/health", timeout=1).close()
                return url
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("fake server did not come up")

    yield start
    for p in procs:
        p.kill()
        p.wait()


def plan_steps(drafter, think=None, raw=False, suite_prompts=()):
    out = []
    for text in suite_prompts:
        prompt = text if raw else text + ("<think>" if think else "")
        out.append([s for s in fake.plan(prompt, N, str(drafter), 0, 0.0) if s[0]])
    return out


def prompts(n=2):
    from dflash_gguf.bench.suites import load_suite
    return [p.text for p in load_suite("maths", n).prompts]


def test_vllm_counters_per_request(cli, tmp_path, serve, drafters):
    url = serve("vllm", drafters["good"])
    base = serve("vllm")
    code, rep, _, se = bench_json(cli, tmp_path, "--server", f"good={url}", "--baseline-server", base, "--engine", "vllm",
                                  "--suite", "maths", "--limit", 2, "--n-predict", N, "--thinking", "both")
    assert code == 0, se
    assert rep["modes"] == ["think", "no-think"]
    row = next(r for r in rep["rows"] if r["config"] == "good" and r["mode"] == "no-think")
    steps = [s for req in plan_steps(drafters["good"], think=False, suite_prompts=prompts()) for s in req]
    want = Acceptance.of([steps], 15)
    assert row["source"] == "metrics"
    run = row["runs"][0]["acceptance"]
    assert (run["drafted"], run["accepted"], run["steps"]) == (want.drafted, want.accepted, len(want.steps))
    assert run["per_position"] == pytest.approx(want.per_position()) and run["histogram"] == want.histogram()
    assert row["drift"] is None  # counters lose the order of steps
    assert row["speedup"] is not None


def test_sglang_meta_info(cli, tmp_path, serve, drafters):
    url = serve("sglang", drafters["good"])
    code, rep, _, se = bench_json(cli, tmp_path, "--server", url, "--engine", "sglang", "--suite", "maths",
                                  "--limit", 2, "--n-predict", N)
    assert code == 0, se
    assert rep["modes"] == ["raw"]
    row = rep["rows"][0]
    steps = [s for req in plan_steps(drafters["good"], raw=True, suite_prompts=prompts()) for s in req]
    want = Acceptance.of([steps], 15)
    assert row["source"] == "histogram" and row["config"] == "server"
    assert row["runs"][0]["acceptance"]["histogram"] == want.histogram()
    assert row["mean_acceptance_length"]["mean"] == pytest.approx(want.mean_length)


def test_running_llama_server_with_its_log(cli, tmp_path, serve, drafters):
    log = tmp_path / "server.log"
    url = serve("llama.cpp", drafters["good"], log=log)
    code, rep, _, se = bench_json(cli, tmp_path, "--server", url, "--server-log", log, "--suite", "maths",
                                  "--limit", 2, "--n-predict", N, "--thinking", "off")
    assert code == 0, se
    row = rep["rows"][0]
    want = Acceptance.of([[s for s in fake.plan(f"<user>{t}</user><assistant>", N, str(drafters["good"]), 0, 0.0) if s[0]]
                          for t in prompts()], 15)
    assert row["source"] == "trace" and row["runs"][0]["acceptance"] == want.to_json()
    # without the log: totals from timings only
    code, rep, _, se = bench_json(cli, tmp_path, "--server", url, "--suite", "maths", "--limit", 2,
                                  "--n-predict", N, "--thinking", "off", name="r2.json")
    row = rep["rows"][0]
    assert row["source"] == "totals" and row["acceptance_rate"]["mean"] == pytest.approx(want.rate)
    assert row["mean_acceptance_length"] is None and row["per_position"] is None


def test_server_gone_is_one_line(cli, tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    code, so, se = cli("bench", "--server", url, "--engine", "vllm", "--suite", "chat", "--limit", 1)
    assert code == 40 and "nothing answers" in se and url in se and se.count("\n") == 1


def test_server_and_target_together_is_a_usage_error(cli):
    code, so, se = cli("bench", "--server", "http://127.0.0.1:1", "--target", TARGET)
    assert code == 2 and "--server measures" in se
