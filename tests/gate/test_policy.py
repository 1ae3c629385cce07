"""gate/policy.py: a TOML policy is read strictly (a typo must not widen the gate), severities
override and "off" drops, a waiver needs its justification."""
from __future__ import annotations

import pytest

from dflash_gguf.errors import UsageError
from dflash_gguf.verdict.findings import Finding as GateFinding
from dflash_gguf.gate.policy import DEFAULT_THRESHOLDS, load_policy


def _policy(tmp_path, text):
    p = tmp_path / "policy.toml"
    p.write_text(text)
    return load_policy(p)


F = GateFinding("check", "drafter-swa-pattern", "error", "/x/d.gguf", "m", "key dflash.attention.sliding_window")


def test_no_file_is_the_default_policy():
    pol = load_policy(None)
    assert pol.thresholds == DEFAULT_THRESHOLDS and pol.apply([F]) == [F]


def test_thresholds_severities_and_waivers_are_read(tmp_path):
    pol = _policy(tmp_path, '[thresholds]\nmin_top1 = 0.95\nmin_acceptance_length = 3\n'
                            '[severity]\ndrafter-swa-pattern = "warning"\nother = "off"\n'
                            f'[[waiver]]\nfingerprint = "{F.fingerprint}"\njustification = "known"\n')
    assert pol.thresholds == {"max_acceptance_drop": 0.1, "min_top1": 0.95, "min_acceptance_length": 3.0}
    [f] = pol.apply([F, GateFinding("check", "other", "error", "d.gguf", "dropped")])
    assert (f.severity, f.waived, f.blocking) == ("warning", "known", False)


@pytest.mark.parametrize("text,says", [
    ("[tresholds]\nmin_top1 = 1\n", "unknown section(s) tresholds"),
    ("[thresholds]\nmin_top = 0.9\n", "unknown threshold 'min_top'"),
    ("[thresholds]\nmin_top1 = -1\n", "expected a non-negative number"),
    ("[thresholds]\nmin_top1 = true\n", "expected a non-negative number"),
    ('[severity]\nx = "fatal"\n', "expected one of error, warning, info, off"),
    ('[[waiver]]\nfingerprint = "abc"\n', "waiver 1 (abc) has no justification"),
    ('[[waiver]]\nfingerprint = "abc"\njustification = "  "\n', "has no justification"),
    ('[[waiver]]\njustification = "why"\n', "waiver 1 has no fingerprint"),
    ("not = [toml", "not a readable TOML file"),
])
def test_bad_policies_are_one_usage_error(tmp_path, text, says):
    with pytest.raises(UsageError, match=r"--policy .*policy.toml: " + ".*" + says.replace("(", r"\(").replace(")", r"\)")):
        _policy(tmp_path, text)


def test_a_missing_policy_file_is_named(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        load_policy(tmp_path / "nope.toml")


def test_a_huge_policy_file_is_refused_unread(tmp_path):
    p = tmp_path / "policy.toml"
    with open(p, "wb") as f:
        f.truncate(64 << 20)  # sparse: costs nothing on disk
    with pytest.raises(UsageError, match="a policy file is at most 1,048,576 bytes"):
        load_policy(p)
