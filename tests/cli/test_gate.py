"""`dflash-gguf gate` end to end on the trained pair: exit 0 / 50, the verdict as the last line on
stdout, one JSON envelope with --json, a bad policy as one usage line."""
from __future__ import annotations

import json

from dflash_gguf.errors import EXIT_GATE

from tests.conftest import FIXTURES, rewrite_gguf

RUNTIME = FIXTURES / "runtime"
BASE = ("gate", "--drafter", RUNTIME / "drafter", "--target", RUNTIME / "target.gguf")


def test_a_good_candidate_passes_and_says_so_last(cli):
    code, so, se = cli(*BASE, "--drafter-gguf", RUNTIME / "drafter.gguf")
    assert code == 0, se
    assert so.strip().splitlines()[-1].startswith("gate: PASS: 4 stages ran, 0 errors")


def test_a_refused_candidate_exits_50_with_the_verdict_last_on_stdout(cli, tmp_path):
    bad = rewrite_gguf(RUNTIME / "drafter.gguf", tmp_path / "theta.gguf", values={"dflash.rope.freq_base": 1e4})
    code, so, se = cli(*BASE, "--drafter-gguf", bad)
    assert code == EXIT_GATE
    verdict = "gate: FAIL: 4 stages ran, 1 errors, 1 warnings (skipped: parity); failed at compare-weights"
    assert so.strip().splitlines()[-1] == verdict and verdict not in se
    line = next(x for x in so.splitlines() if "constant-differs" in x)
    assert "theta.gguf [key dflash.rope.freq_base]" in line and "fingerprint " in line
    code, so, _ = cli(*BASE, "--drafter-gguf", bad, "--json")
    doc = json.loads(so)
    assert doc["exit_code"] == EXIT_GATE and doc["verdict"] == doc["payload"]["verdict"] == "fail"
    assert doc["summary"] == doc["payload"]["summary"] == verdict
    assert [f["rule_id"] for f in doc["findings"] if f["severity"] == "error"] == ["constant-differs"]
    assert [f["rule_id"] for f in doc["payload"]["findings"] if f["severity"] == "error"] == ["constant-differs"]


def test_a_policy_without_a_justification_is_one_usage_line(cli, tmp_path):
    pol = tmp_path / "p.toml"
    pol.write_text('[[waiver]]\nfingerprint = "0123456789abcdef"\n')
    code, _, se = cli(*BASE, "--drafter-gguf", RUNTIME / "drafter.gguf", "--policy", pol)
    assert code == 2 and se.strip().splitlines() == [
        f"error: --policy {pol}: waiver 1 (0123456789abcdef) has no justification; a waiver must say why the finding "
        "is acceptable"]
