"""check-instruct: the classifier (rules, precedence, real metadata) and the command (exit codes, JSON)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import gguf
import numpy as np
import pytest

from dflash_gguf.fileio.gguf_header import read_header
from dflash_gguf.guards.instruct import RULES, Verdict, classify
from tests.conftest import ROOT
from tests.guards.conftest import GUARDS, QWEN


@pytest.mark.parametrize("name, verdict, decided_by", [
    ("qwen3-8b.gguf", "instruct", {"family-qwen3", "eos-turn-end"}),
    ("qwen3-8b-base.gguf", "base", {"label-base"}),
    ("gemma-3-1b-it.gguf", "instruct", {"label-instruct"}),
    ("gemma-3-1b-pt.gguf", "base", {"label-base"}),
    ("gemma-4-e2b-it.gguf", "instruct", {"label-instruct"}),
    ("llama-3.1-8b-instruct.gguf", "instruct", {"label-instruct"}),
    ("llama-3.1-8b.gguf", "base", {"family-llama", "template-absent"}),
    ("frankenmerge-7b.gguf", "unknown", set()),
    ("qwen3-8b-dflash.gguf", "instruct", {"family-qwen3", "eos-turn-end"}),
])
def test_fixtures(name, verdict, decided_by):
    v = classify(read_header(GUARDS / name))
    assert v.verdict.value == verdict, v.reason
    tier = min((e.tier for e in v.evidence if e.leans and e.tier in (1, 2)), default=None)
    assert {e.rule for e in v.evidence if e.tier == tier} == decided_by


def _write(path: Path, meta: dict, *, template: str | None = None, tokens=None, eos: int | None = None,
           arch: str = "llama") -> Path:
    w = gguf.GGUFWriter(path, arch)
    for key, value in meta.items():
        if isinstance(value, list):
            w.add_array(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        else:
            w.add_string(key, value)
    if tokens is not None:
        w.add_tokenizer_model("gpt2")
        w.add_token_list(tokens)
        if eos is not None:
            w.add_eos_token_id(eos)
    if template is not None:
        w.add_chat_template(template)
    w.add_tensor("t", np.zeros(4, np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return path


TOKS = ["a", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = "{{'<|im_start|>' + m['role'] }}"


def _classify(tmp_path, meta, name="model.gguf", **kw):
    return classify(read_header(_write(tmp_path / name, meta, **kw)))


def test_conflicting_labels_are_unknown(tmp_path):
    v = _classify(tmp_path, {"general.name": "Qwen3 8B Base", "general.finetune": "Instruct"})
    assert v.verdict == Verdict.UNKNOWN and "tier 1 (labels) evidence conflicts" in v.reason


def test_label_beats_conventions(tmp_path):
    # Qwen3 naming says instruct, EOS says instruct: the explicit Base label still wins.
    v = _classify(tmp_path, {"general.name": "Qwen3 8B Base", "general.basename": "Qwen3"},
                  tokens=TOKS, eos=3, template=CHATML)
    assert v.verdict == Verdict.BASE
    assert "family-qwen3" not in {e.rule for e in v.evidence}  # family rules only see unlabelled names


@pytest.mark.parametrize("basename, verdict", [
    ("Qwen3", "instruct"), ("Qwen3.5", "instruct"), ("Qwen3.6", "instruct"), ("Qwen2.5", "base"),
    ("Qwen2", "base"), ("Meta-Llama-3.1", "base"), ("Mistral", "base"), ("gemma-2", "base"),
    ("DeepSeek-V3", "instruct"), ("gpt-oss", "instruct"),
])
def test_family_conventions_for_unlabelled_names(tmp_path, basename, verdict):
    v = _classify(tmp_path, {"general.name": f"{basename} 7B", "general.basename": basename},
                  tokens=TOKS, template=CHATML)
    assert v.verdict.value == verdict, v.reason


def test_qwen3_base_with_template_but_no_name_is_unknown(tmp_path):
    # A Qwen3 base GGUF stripped of its name: template + chat tokens are only hints.
    v = _classify(tmp_path, {}, tokens=TOKS, eos=1, template=CHATML)
    assert v.verdict == Verdict.UNKNOWN and v.reason.startswith("only hints")


def test_eos_turn_end_decides_without_a_name(tmp_path):
    assert _classify(tmp_path, {}, tokens=TOKS, eos=3, template=CHATML).verdict == Verdict.INSTRUCT


def test_missing_template_with_tokenizer_means_base(tmp_path):
    v = _classify(tmp_path, {}, tokens=TOKS, eos=1)
    assert v.verdict == Verdict.BASE and {e.rule for e in v.evidence if e.tier == 2} == {"template-absent"}


def test_no_tokenizer_is_unknown_and_says_why(tmp_path):
    v = _classify(tmp_path, {}, arch="qwen35-dflash-draft")
    assert v.verdict == Verdict.UNKNOWN and [e.rule for e in v.evidence] == ["no-tokenizer"]


def test_file_name_is_a_weaker_label(tmp_path):
    assert _classify(tmp_path, {}, name="Foo-7B-Instruct-Q4_K_M.gguf").verdict == Verdict.INSTRUCT
    # ... and metadata labels outrank it
    v = _classify(tmp_path, {"general.finetune": "Base"}, name="Foo-7B-Instruct.gguf")
    assert v.verdict == Verdict.BASE


def test_label_words_are_whole_tokens(tmp_path):
    # "it" inside a word, "pt" inside "gpt": no label; gpt-oss convention decides instead.
    v = _classify(tmp_path, {"general.name": "gpt-oss 20b", "general.basename": "gpt-oss"})
    assert v.verdict == Verdict.INSTRUCT and {e.rule for e in v.evidence if e.tier == 2} == {"family-gpt-oss"}
    assert _classify(tmp_path, {"general.name": "Bitnet Kit"}).verdict == Verdict.UNKNOWN


def test_named_template_counts_as_present(tmp_path):
    v = _classify(tmp_path, {"tokenizer.chat_template.tool_use": CHATML}, tokens=TOKS, eos=1)
    assert "template-absent" not in {e.rule for e in v.evidence}
    assert "template-present" in {e.rule for e in v.evidence}


def test_self_named_base_model_is_not_lineage(tmp_path):
    meta = {"general.name": "Qwen3 8B Base", "general.base_model.count": 1, "general.base_model.0.name": "Qwen3 8B Base"}
    assert "base-model-lineage" not in {e.rule for e in _classify(tmp_path, meta).evidence}


def test_rules_table_is_well_formed():
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    for r in RULES:
        re.compile(r.pattern)
        assert r.tier in (0, 1, 2, 3) and (r.leans is None) == (r.tier == 0), r.id
        assert r.description and r.fields


def test_every_rule_is_documented():
    doc = (ROOT / "docs" / "check-instruct.md").read_text()
    missing = [r.id for r in RULES if f"`{r.id}`" not in doc]
    assert not missing, f"docs/check-instruct.md lacks rules {missing}"


# --- the check-instruct command ------------------------------------------------------------

@pytest.mark.parametrize("name, code", [
    ("qwen3-8b.gguf", 0), ("qwen3-8b-base.gguf", 10), ("gemma-3-1b-it.gguf", 0), ("gemma-3-1b-pt.gguf", 10),
    ("gemma-4-e2b-it.gguf", 0), ("llama-3.1-8b-instruct.gguf", 0), ("llama-3.1-8b.gguf", 10),
    ("frankenmerge-7b.gguf", 11), ("qwen3-8b-dflash.gguf", 0),
    # shard 2 has no metadata of its own: the verdict comes from shard 1
    ("qwen3-8b-sharded-00002-of-00002.gguf", 0),
])
def test_check_instruct_exit_codes(cli, name, code):
    rc, out, err = cli("check-instruct", GUARDS / name)
    assert rc == code
    *report, verdict = out.splitlines()
    assert verdict.startswith("check-instruct: PASS: 1 file" if code == 0 else f"check-instruct: FAIL (exit {code}): 1 file")
    if name == "qwen3-8b-dflash.gguf":  # a drafter is not a target: skipped, not classified
        assert report == [] and err.strip() == f"{GUARDS / name}: a drafter (dflash), not a target: no instruct verdict"
    else:
        assert report[0].startswith(f"{GUARDS / name}: ")


def test_allow_unknown(cli):
    assert cli("check-instruct", GUARDS / "frankenmerge-7b.gguf", "--allow-unknown")[0] == 0
    assert cli("check-instruct", GUARDS / "qwen3-8b-base.gguf", "--allow-unknown")[0] == 10


def test_check_instruct_json(cli):
    rc, out, _ = cli("check-instruct", QWEN, "--json")
    env = json.loads(out)
    assert set(env) == {"schema_version", "tool", "tool_version", "command", "exit_code", "verdict", "summary",
                        "files", "findings", "error", "payload"}
    assert env["command"] == "check-instruct" and env["verdict"] == "pass" and env["error"] is None
    (doc,) = env["payload"]["files"]
    assert rc == 0 and set(doc) == {"file", "shards", "verdict", "reason", "exit_code", "evidence"}
    assert doc["verdict"] == "instruct" and doc["exit_code"] == env["exit_code"] == 0
    ev = doc["evidence"][0]
    assert set(ev) == {"rule", "tier", "leans", "field", "value", "matched", "description"}
    assert {e["rule"] for e in doc["evidence"]} >= {"eos-turn-end", "family-qwen3", "template-chatml"}


def test_truncated_file_is_6_before_any_verdict(cli, tmp_path):
    cut = tmp_path / "qwen3-8b.gguf"
    cut.write_bytes(QWEN.read_bytes()[:3000])
    rc, out, err = cli("check-instruct", cut)
    (verdict,) = out.splitlines()  # no verdict on the file: only the verdict line, which names the error
    assert rc == 6 and verdict.startswith(
        "check-instruct: ERROR (exit 6): 1 file, 1 error, 0 warnings; first: check-instruct-TruncatedError in "
        f"qwen3-8b.gguf: {cut}: tensor token_embd.weight needs bytes up to")
    assert err.startswith(f"error: {cut}: tensor token_embd.weight needs bytes up to")
    rc, out, err = cli("check-instruct", cut, "--json")
    env = json.loads(out)
    (doc,) = env["payload"]["files"]
    assert rc == 6 and env["exit_code"] == doc["exit_code"] == 6 and doc["error"]["type"] == "TruncatedError"
    assert env["verdict"] == "error" and env["error"] == doc["error"]
    assert "verdict" not in doc


def test_missing_file_is_5(cli, tmp_path):
    rc, _, err = cli("check-instruct", tmp_path / "nope.gguf")
    assert rc == 5 and "no such file" in err
