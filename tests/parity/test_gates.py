"""parity/gates.py: thresholds a parity run fails on, judged on the trained pair in fixtures/runtime
(a drafter whose acceptance is real, so a wrong constant shows as a real drop)."""
from __future__ import annotations

import json
import shutil

import pytest

from dflash_gguf.errors import EXIT_PARITY_GATE, UsageError
from dflash_gguf.parity.gates import Gates

from tests.conftest import FIXTURES, optional_packages

RUNTIME = FIXTURES / "runtime"
PROMPTS = RUNTIME / "prompts.jsonl"  # the text the pair was trained on: acceptance far above 1


def test_flags_out_of_range_are_usage_errors():
    for kw in ({"min_acceptance_length": float("nan")}, {"max_acceptance_drop": 1.5}, {"min_top1": -0.1}):
        with pytest.raises(UsageError):
            Gates(**kw)
    assert Gates(min_top1=0.9).min_top1 == 0.9 and Gates().max_acceptance_drop is None


@pytest.fixture(scope="module")
def wrong_theta(tmp_path_factory):
    """The trained drafter converted from a config whose rope_theta is wrong (1e4, trained at 1e6)."""
    from dflash_gguf.convert import convert

    d = tmp_path_factory.mktemp("theta") / "drafter"
    shutil.copytree(RUNTIME / "drafter", d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["rope_theta"] = 10000.0
    (d / "config.json").write_text(json.dumps(cfg))
    out = d.parent / "wrong-theta.gguf"
    with optional_packages():  # the target dir's tokenizer needs the [tokenizers] extra
        convert(d, out, target_dir=RUNTIME / "target")
    return out


def _parity(cli, tmp_path, gguf, *gates):
    pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")
    pytest.importorskip("tokenizers", reason="tokenizers is not installed (the [tokenizers] extra)")
    rep = tmp_path / "r.json"
    code, so, se = cli("parity", "--target", RUNTIME / "target", "--drafter", RUNTIME / "drafter",
                       "--drafter-gguf", gguf, "--prompts-file", PROMPTS, "--max-new-tokens", 48, "--device", "cpu",
                       "--report", rep, *gates)
    return code, json.loads(rep.read_text()), so, se  # the envelope: the run's report is its payload


GATES = ("--max-acceptance-drop", "0.1", "--min-acceptance-length", "4", "--min-top1", "0.9")


def test_the_good_pair_passes_every_gate(cli, tmp_path):
    code, doc, so, se = _parity(cli, tmp_path, RUNTIME / "drafter.gguf", *GATES)
    assert code == 0, se
    assert so.strip().splitlines()[-1] == doc["summary"] == "parity: PASS: 2 files, 0 errors, 0 warnings"
    assert doc["payload"]["lossless"] is True
    assert [x.split(":")[0] for x in se.strip().splitlines()] == [
        "gate min_acceptance_length passed", "gate max_acceptance_drop passed", "gate min_top1 passed"]
    gates = doc["payload"]["gates"]
    assert doc["exit_code"] == 0 and len(gates) == 3 and all(g["passed"] for g in gates)


def test_a_wrong_theta_fails_the_drop_gate(cli, tmp_path, wrong_theta):
    code, doc, so, se = _parity(cli, tmp_path, wrong_theta, *GATES)
    assert code == EXIT_PARITY_GATE and doc["exit_code"] == EXIT_PARITY_GATE and doc["verdict"] == "fail"
    gates = {g["gate"]: g for g in doc["payload"]["gates"]}
    assert not gates["max_acceptance_drop"]["passed"] and gates["max_acceptance_drop"]["value"] > 0.1
    # the verdict line (stdout, last) says it, with the first failed gate; each gate's note is on stderr
    assert so.strip().splitlines()[-1] == doc["summary"]
    assert doc["summary"].startswith("parity: FAIL (exit 31): 2 files, 3 errors, 0 warnings; first: "
                                     "parity-min_acceptance_length in wrong-theta.gguf")
    assert [(f["rule_id"], f["file"]) for f in doc["findings"]] == [
        (f"parity-{g}", str(wrong_theta)) for g in ("min_acceptance_length", "max_acceptance_drop", "min_top1")]
    assert [x.split(":")[:2] for x in se.strip().splitlines()[-3:]] == [
        [f"gate {g} FAILED", " wrong-theta.gguf"] for g in ("min_acceptance_length", "max_acceptance_drop", "min_top1")]
    assert not any(x.startswith("error:") for x in se.splitlines())
    # without gates the same run is a report, not a verdict
    code, doc, _, _ = _parity(cli, tmp_path, wrong_theta)
    assert code == 0 and doc["payload"]["gates"] == []


def test_a_failed_run_still_writes_its_json(cli, tmp_path):
    rep = tmp_path / "r.json"
    code, _, se = cli("parity", "--target", RUNTIME / "target", "--drafter", RUNTIME / "drafter",
                      "--drafter-gguf", tmp_path / "missing.gguf", "--prompt-ids", "1,2,3", "--device", "cpu",
                      "--report", rep)
    pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")
    doc = json.loads(rep.read_text())
    assert code != 0 and doc["exit_code"] == code and doc["verdict"] == "error" and doc["error"]["message"] in se
    assert [f["rule_id"] for f in doc["findings"]] == [f"parity-{doc['error']['type']}"]
