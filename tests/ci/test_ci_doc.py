"""docs/ci.md: the complete workflow's `run:` steps, run as a script on fixtures/runtime/, pass the
trained pair and write reports that validate; the gate is one line."""
from __future__ import annotations

from tests.ci.conftest import doc_workflow_text, github_env, run_step, workdir, yaml
from tests.verdict.conftest import junit_suites, sarif_validator


def test_the_documented_workflow_runs_and_passes_the_trained_pair(tmp_path):
    steps = yaml().safe_load(doc_workflow_text())["jobs"]["gate"]["steps"]
    runs = [s for s in steps if "run" in s and s.get("name") != "Install"]  # installed already: the suite runs here
    assert [s["name"] for s in runs] == ["Gate"]
    assert runs[0]["run"].count("dflash-gguf ") == 1 and "\n" not in runs[0]["run"].strip()  # one gate line
    cwd, env = workdir(tmp_path), github_env(tmp_path)
    for s in runs:
        p = run_step(s["run"], cwd, env)
        assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines()[-1].startswith("gate: PASS: ")  # parity too where torch is installed
    summary = (tmp_path / "summary.md").read_text()
    assert summary.startswith("### ✅ dflash-gguf gate: PASS (exit 0)")
    import json

    sarif_validator().validate(json.loads((cwd / "gate.sarif").read_text()))
    suites = list(junit_suites((cwd / "gate.xml").read_text(), tmp_path))
    assert {s.name for s in suites} >= {"dflash-gguf check", "dflash-gguf compare-weights"}
    assert sum(s.failures for s in suites) == 0 and sum(s.tests for s in suites) > 50
