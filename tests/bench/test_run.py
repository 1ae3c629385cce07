"""`bench` end to end against the fake llama-server: what it reports is what the server counted."""
import socket

import pytest

from dflash_gguf.bench.suites import load_suite
from dflash_gguf.metrics.acceptance import Acceptance
from tests.bench import fake_llama_server as fake
from tests.bench.conftest import TARGET, bench_json, pid_gone
from tests.conftest import rewrite_gguf

N = 24


def templated(text, think):
    return f"<user>{text}</user><assistant>" + ("<think>" if think else "")


def expected_steps(drafter, suite="code", limit=2, think=True):
    """The fake's own per-request plan: what its timings and trace lines count."""
    return [[s for s in fake.plan(templated(p.text, think), N, str(drafter), 0, 0.0) if s[0]]
            for p in load_suite(suite, limit).prompts]


@pytest.fixture
def run_fake(cli, tmp_path, fake_bin, fake_env, drafters):
    def go(*extra, drafter_names=("good", "bad")):
        args = ["--server-bin", fake_bin, "--target", TARGET, "--suite", "code", "--limit", 2, "--n-predict", N]
        for d in drafter_names:
            args += ["--drafter", drafters[d]]
        return bench_json(cli, tmp_path, *args, *extra)
    return go


def test_reports_what_the_server_counted(run_fake, drafters):
    code, rep, so, se = run_fake("--runs", 2)
    assert code == 0, se
    assert rep["schema"] == "dflash-gguf.bench/1"
    assert rep["modes"] == ["think", "no-think"]  # the template has the enable_thinking switch
    assert [c["name"] for c in rep["configurations"]] == ["baseline", "good.gguf", "bad.gguf"]
    assert rep["configurations"][1]["spec_type"] == "draft-dflash" and rep["configurations"][1]["n_draft"] == 15
    argv = rep["configurations"][1]["argv"]
    assert "--spec-type" in argv and "-md" in argv
    assert argv[argv.index("--spec-draft-n-max") + 1] == "15"  # the whole block, not llama-server's 3
    for name in ("good", "bad"):
        for think, mode in ((True, "think"), (False, "no-think")):
            steps = expected_steps(drafters[name], think=think)
            want = Acceptance.of(steps, 15).to_json()
            row = next(r for r in rep["rows"] if r["config"] == f"{name}.gguf" and r["mode"] == mode)
            assert row["source"] == "trace"
            for run in row["runs"]:
                assert run["acceptance"] == want  # totals, per position, histogram, drift
            assert row["acceptance_rate"]["mean"] == pytest.approx(want["acceptance_rate"])
            assert row["acceptance_rate"]["sd"] == 0  # greedy: runs agree
            assert [p["mean"] for p in row["per_position"]] == pytest.approx(want["per_position"])
            assert row["histogram"] == [2 * n for n in want["histogram"]]
            reqs = [q for q in rep["requests"] if q["config"] == f"{name}.gguf" and q["mode"] == mode and q["run"] == 0]
            assert [[tuple(s) for s in q["steps"]] for q in reqs] == steps
            for q in reqs:  # the trace adds up to the response's timings, request by request
                assert sum(s[0] for s in q["steps"]) == q["drafted"]
                assert sum(s[1] for s in q["steps"]) == q["accepted"]
    good = next(r for r in rep["rows"] if r["config"] == "good.gguf" and r["mode"] == "think")
    assert good["speedup"]["mean"] > 1 and good["same_as_baseline"] == {"same": 4, "compared": 4}
    base = next(r for r in rep["rows"] if r["config"] == "baseline" and r["mode"] == "think")
    assert base["acceptance_rate"] is None and base["speedup"] is None
    assert base["tokens_per_s"]["mean"] == pytest.approx(1000 / fake.MS_PER_TOKEN)
    cmp_ = next(c for c in rep["comparisons"] if c["mode"] == "think")
    assert (cmp_["a"], cmp_["b"]) == ("good.gguf", "bad.gguf") and cmp_["mean_acceptance_length"]["real"]
    assert cmp_["mean_acceptance_length"]["delta"] < 0


def test_restore_checkpoint_targets_count_the_same(run_fake, drafters, monkeypatch):
    monkeypatch.setenv("FAKE_RESTORE", "1")
    code, rep, _, se = run_fake(drafter_names=("good",))
    assert code == 0, se
    row = next(r for r in rep["rows"] if r["config"] == "good.gguf" and r["mode"] == "think")
    assert row["runs"][0]["acceptance"] == Acceptance.of(expected_steps(drafters["good"]), 15).to_json()


def test_a_log_that_trails_the_answer_is_waited_for(run_fake, drafters, monkeypatch):
    monkeypatch.setenv("FAKE_LOG_LAG", "0.3")
    code, rep, _, se = run_fake("--thinking", "on", drafter_names=("good",))
    assert code == 0, se
    assert all(q["steps"] is not None for q in rep["requests"] if q["config"] == "good.gguf")


def test_trace_that_disagrees_with_timings_is_dropped_not_trusted(run_fake, monkeypatch):
    monkeypatch.setenv("FAKE_TRACE_OFF_BY_ONE", "1")
    code, rep, _, se = run_fake("--thinking", "on", drafter_names=("good",))
    assert code == 0, se
    row = next(r for r in rep["rows"] if r["config"] == "good.gguf")
    assert row["source"] == "totals" and row["per_position"] is None and row["acceptance_rate"]["mean"] > 0
    assert any("trace and timings disagree" in n for n in row["notes"])
    assert "trace and timings disagree" in se


@pytest.mark.parametrize("extra,n", [(["--draft-max", "4"], 4), (["--server-args", "--spec-draft-n-max 6"], 6),
                                     (["--draft-max", "99"], 15)])
def test_draft_max(run_fake, drafters, extra, n):
    code, rep, _, se = run_fake("--thinking", "on", *extra, drafter_names=("good",))
    assert code == 0, se
    cfg = rep["configurations"][1]
    assert cfg["n_draft"] == n and cfg["argv"].count("--spec-draft-n-max") == 1
    steps = [[s for s in fake.plan(templated(p.text, True), N, str(drafters["good"]), 0, 0.0, n) if s[0]]
             for p in load_suite("code", 2).prompts]
    row = next(r for r in rep["rows"] if r["config"] == "good.gguf")
    assert row["runs"][0]["acceptance"] == Acceptance.of(steps, n).to_json()


def test_pairing_names_only_the_drafters_that_do_not_fit(tmp_path):
    from dflash_gguf.bench.options import BenchOptions
    from dflash_gguf.bench.run import check_pairs
    from dflash_gguf.errors import EXIT_PAIRING, PairingError
    from tests.conftest import FIXTURES

    fits, misfit = FIXTURES / "guards" / "qwen3-8b-dflash.gguf", FIXTURES / "runtime" / "drafter.gguf"
    check_pairs(BenchOptions(target=TARGET, drafters=(fits,)))  # a pair that fits: nothing raised
    with pytest.raises(PairingError) as e:
        check_pairs(BenchOptions(target=TARGET, drafters=(fits, misfit)))
    assert e.value.exit_code == EXIT_PAIRING and str(e.value).startswith(f"{misfit} does not fit the target {TARGET}: ")
    assert e.value.findings and {f.file for f in e.value.findings} <= {str(misfit), str(TARGET)}
    assert all(f.category == "pairing" and f.severity.value == "error" for f in e.value.findings)


def test_raw_target_without_template(cli, tmp_path, fake_bin, fake_env, drafters):
    # the drafter's own target without its chat template: a pair that fits (bench checks pairing first)
    plain = rewrite_gguf(TARGET, tmp_path / "qwen3-8b-no-template.gguf", drop=("tokenizer.chat_template",))
    code, rep, _, se = bench_json(cli, tmp_path, "--server-bin", fake_bin, "--target", plain, "--drafter",
                                  drafters["good"], "--suite", "chat", "--limit", 1, "--n-predict", 8, "--no-baseline")
    assert code == 0, se
    assert rep["modes"] == ["raw"] and any("no chat template" in n for n in rep["notes"])


def test_sampled_runs_are_seeded_and_differ(run_fake):
    code, rep, _, se = run_fake("--runs", 2, "--temperature", "0.8", "--seed", "7", "--thinking", "on",
                                drafter_names=("good",))
    assert code == 0, se
    row = next(r for r in rep["rows"] if r["config"] == "good.gguf")
    assert row["acceptance_rate"]["sd"] > 0 and row["same_as_baseline"] is None


def test_memory_guard_refuses_before_starting_anything(cli, tmp_path, fake_bin, fake_env, drafters):
    code, so, se = cli("bench", "--server-bin", fake_bin, "--target", TARGET, "--drafter", drafters["good"],
                       "--max-memory", "0.00001")
    assert code == 41
    assert se.count("\n") == 1 and "good.gguf" in se and "GiB" in se and "--max-memory" in se
    assert not fake_env.exists()  # no server was started


def one_error(stderr: str) -> str:
    """The one error line, which ends stderr (progress lines may come before it)."""
    lines = stderr.splitlines()
    assert [ln for ln in lines if ln.startswith("error:")] == lines[-1:], stderr
    return lines[-1]


def test_server_dying_mid_run(cli, tmp_path, fake_bin, fake_env, drafters, monkeypatch):
    monkeypatch.setenv("FAKE_DIE_AT", "3")  # warm-up, prompt 1, then the crash
    code, so, se = cli("bench", "--server-bin", fake_bin, "--target", TARGET, "--suite", "code", "--limit", 3,
                       "--n-predict", 8)
    assert code == 40
    error = one_error(se)
    assert "died on prompt code-01" in error and "killed by SIGKILL" in error
    assert "simulated crash" in error  # the server's last words are quoted
    assert pid_gone(int(fake_env.read_text()))


@pytest.mark.parametrize("args,msg", [
    (["--server-bin", "/nonexistent/llama-server"], "no such file"),
    (["--suite", "nope"], "not a suite name"),
    (["--runs", "0"], "--runs 0"),
    (["--engine", "tgi"], "--engine 'tgi'"),
])
def test_usage_errors_are_one_line(cli, fake_bin, fake_env, args, msg):
    code, so, se = cli("bench", "--server-bin", fake_bin, "--target", TARGET, *args)
    assert code in (2, 40) and msg in se and se.count("\n") == 1


def test_bad_jsonl_line(cli, tmp_path, fake_bin, fake_env):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "ok"}\n{"text": "wrong key"}\n')
    code, so, se = cli("bench", "--server-bin", fake_bin, "--target", TARGET, "--suite", f)
    assert code == 2 and f"{f}:2:" in se and se.count("\n") == 1
    assert not fake_env.exists()


def test_port_in_use(cli, fake_bin, fake_env):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        code, so, se = cli("bench", "--server-bin", fake_bin, "--target", TARGET, "--port", s.getsockname()[1])
    assert code == 40 and "is in use" in se and se.count("\n") == 1


def test_plots_written(run_fake, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the [plots] extra)")
    code, rep, _, se = run_fake("--plots", tmp_path / "plots", "--thinking", "on")
    assert code == 0, se
    names = sorted(p.rsplit("/", 1)[-1] for p in rep["plots"])
    assert names == ["accept_length_histogram.png", "acceptance_by_position.png", "speedup_vs_acceptance.png"]
    for p in rep["plots"]:
        assert open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
