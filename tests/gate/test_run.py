"""gate/run.py on the trained pair in fixtures/runtime: the good candidate passes; a truncated
file, a constant edited in the header, a base target and a wrong-theta conversion each fail at
the stage that owns the fault. Broken files are written with gguf-py (tests.conftest.rewrite_gguf)."""
from __future__ import annotations

import json
import shutil

import pytest

from dflash_gguf.errors import UsageError
from dflash_gguf.gate import GateInputs, load_policy, run_gate

from tests.conftest import FIXTURES, optional_packages, rewrite_gguf

RUNTIME = FIXTURES / "runtime"
DRAFTER, GGUF, TARGET = RUNTIME / "drafter", RUNTIME / "drafter.gguf", RUNTIME / "target.gguf"


def _gate(*ggufs, target=TARGET, **kw):
    return run_gate(GateInputs(DRAFTER, tuple(ggufs), target, **kw))


def _stage(report, name):
    return next(s for s in report.stages if s.name == name)


def _blocking(report):
    return [(f.stage, f.rule_id) for f in report.findings if f.blocking]


def test_the_good_candidate_passes_every_stage_that_runs():
    r = _gate(GGUF)
    assert r.passed and _blocking(r) == []
    assert [s.status for s in r.stages] == ["passed", "passed", "passed", "passed", "skipped"]
    assert _stage(r, "parity").summary.startswith(("no prompts", "torch is not installed"))
    assert r.summary == "gate: PASS: 4 stages ran, 0 errors, 0 warnings (skipped: parity)"


def test_a_truncated_candidate_fails_check_once_and_the_rest_still_runs(tmp_path):
    bad = tmp_path / "trunc.gguf"
    bad.write_bytes(GGUF.read_bytes()[:200_000])
    r = _gate(bad)
    assert not r.passed
    assert _blocking(r) == [("check", "check-TruncatedError")]  # reported once, where it was found
    assert _stage(r, "compare-weights").status == "skipped" and _stage(r, "parity").status == "skipped"
    assert _stage(r, "check-instruct").status == "passed"  # the target's stages ran regardless
    both = _gate(bad, GGUF)  # a readable candidate beside it is still judged by every stage
    assert _stage(both, "compare-weights").status == "passed" and len(_stage(both, "compare-weights").coverage) == 1


def test_a_constant_edited_in_the_header_fails_compare_naming_the_key(tmp_path):
    bad = rewrite_gguf(GGUF, tmp_path / "theta.gguf", values={"dflash.rope.freq_base": 10000.0})
    r = _gate(bad)
    assert _blocking(r) == [("compare-weights", "constant-differs")]
    f = next(f for f in r.findings if f.blocking)
    assert f.where == "key dflash.rope.freq_base" and "from config.rope_theta" in f.message
    assert ("pairing", "pair-rope-theta") in [(x.stage, x.rule_id) for x in r.findings]  # a warning there


def test_a_base_target_fails_check_instruct_unless_allowed(tmp_path):
    base = rewrite_gguf(TARGET, tmp_path / "base.gguf", values={"general.name": "Target-Base"},
                        drop=("tokenizer.chat_template",))
    r = _gate(GGUF, target=base)
    assert _blocking(r) == [("check-instruct", "instruct-verdict-base"), ("pairing", "pair-target-base")]
    allowed = _gate(GGUF, target=base, allow_base_target=True)
    assert allowed.passed and {f.severity for f in allowed.findings if "base" in f.rule_id} == {"info"}


def test_a_hugging_face_target_dir_is_judged_by_its_chat_template(tmp_path):
    assert _stage(_gate(GGUF, target=RUNTIME / "target"), "check-instruct").findings == []
    d = tmp_path / "target"
    shutil.copytree(RUNTIME / "target", d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    for f in ("chat_template.jinja", "chat_template.json"):
        (d / f).unlink(missing_ok=True)
    r = _gate(GGUF, target=d)
    assert _blocking(r) == [("check-instruct", "instruct-no-chat-template")]
    assert _stage(r, "pairing").status == "skipped"  # pairing reads GGUF headers


def test_a_waiver_with_its_justification_lets_a_finding_through(tmp_path):
    bad = rewrite_gguf(GGUF, tmp_path / "theta.gguf", values={"dflash.rope.freq_base": 10000.0})
    fp = next(f.fingerprint for f in _gate(bad).findings if f.blocking)
    pol = tmp_path / "policy.toml"
    pol.write_text(f'[[waiver]]\nfingerprint = "{fp}"\njustification = "planted for the test"\n'
                   '[severity]\npair-rope-theta = "off"\n')
    r = run_gate(GateInputs(DRAFTER, (bad,), TARGET), load_policy(pol))
    assert r.passed and [f.waived for f in r.findings] == ["planted for the test"]
    assert r.summary.endswith("0 errors, 0 warnings, 1 waived (skipped: parity)")


def test_require_parity_fails_a_gate_that_cannot_run_it():
    r = _gate(GGUF, require_parity=True)
    assert _blocking(r) == [("parity", "parity-required")]


def test_no_candidate_is_a_usage_error():
    with pytest.raises(UsageError, match="--drafter-gguf"):
        _gate()


def test_parity_gates_refuse_a_wrong_theta_conversion(tmp_path):
    pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")
    from dflash_gguf.convert import convert

    d = tmp_path / "drafter"
    shutil.copytree(DRAFTER, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["rope_theta"] = 10000.0
    (d / "config.json").write_text(json.dumps(cfg))
    wrong = tmp_path / "wrong-theta.gguf"
    with optional_packages():
        convert(d, wrong, target_gguf=TARGET)
    prompts = ((1, 5, 9, 33, 71, 100, 7, 250),)
    r = _gate(wrong, prompts=prompts, max_new_tokens=24, device="cpu")
    rules = {rule for stage, rule in _blocking(r) if stage == "parity"}
    assert "parity-max_acceptance_drop" in rules or "parity-min_top1" in rules
    assert ("compare-weights", "constant-differs") in _blocking(r)  # its config is not the reference's


def test_a_missing_reference_or_target_is_an_input_error_not_a_finding(tmp_path):
    from dflash_gguf.errors import InputError

    with pytest.raises(InputError, match="--drafter is the checkpoint"):
        run_gate(GateInputs(tmp_path / "nope", (GGUF,), TARGET))
    with pytest.raises(InputError, match="--target"):
        _gate(GGUF, target=tmp_path / "nope.gguf")
