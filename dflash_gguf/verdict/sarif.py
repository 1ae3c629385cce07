"""SARIF 2.1.0 (OASIS), as code-scanning services read it: one run, the rules that fired with their
metadata, one result per finding located at the file (``physicalLocation``) and the key or tensor
(``logicalLocations``), the finding's fingerprint as ``partialFingerprints``, a gate's waivers as
``suppressions``. Deterministic: no timestamps; rules sorted by id; results in finding order."""
from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from .envelope import TOOL, Envelope, display_path
from .findings import ERROR, INFO, WARNING, Finding
from .rules import describe

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
FINGERPRINT_KEY = "dflashGgufFinding/v1"
_LEVEL = {ERROR: "error", WARNING: "warning", INFO: "note"}


def to_sarif(env: Envelope) -> dict:
    ids = sorted({f.rule_id for f in env.findings})
    index = {rule_id: i for i, rule_id in enumerate(ids)}
    driver = {"name": TOOL, "rules": [_rule(rule_id) for rule_id in ids]}
    if env.tool_version:
        driver["version"] = env.tool_version
        driver["semanticVersion"] = env.tool_version
    run = {
        "tool": {"driver": driver},
        "automationDetails": {"id": f"{TOOL}/{env.command}/"},
        "invocations": [{"executionSuccessful": env.error is None, "exitCode": env.exit_code}],
        "results": [_result(f, index[f.rule_id]) for f in env.findings],
    }
    if env.error is not None:
        run["invocations"][0]["toolExecutionNotifications"] = [
            {"level": "error", "message": {"text": f"{env.error['type']}: {env.error['message']}"}}]
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def render(env: Envelope) -> str:
    return json.dumps(to_sarif(env), indent=2, ensure_ascii=False) + "\n"


def _rule(rule_id: str) -> dict:
    r = describe(rule_id)
    return {"id": rule_id, "name": "".join(w.capitalize() for w in rule_id.replace("_", "-").split("-")),
            "shortDescription": {"text": r.summary},
            "help": {"text": f"{r.summary}. Reference: {r.doc}"},
            "defaultConfiguration": {"level": _LEVEL[r.level]},
            "properties": {"tags": [r.stage]}}


def _result(f: Finding, rule_index: int) -> dict:
    loc: dict = {"physicalLocation": {"artifactLocation": {"uri": _uri(f.file)}}}
    if f.where:
        loc["logicalLocations"] = [{"fullyQualifiedName": f.where}]
    res = {"ruleId": f.rule_id, "ruleIndex": rule_index, "level": _LEVEL[f.severity],
           "message": {"text": f.message}, "locations": [loc],
           "partialFingerprints": {FINGERPRINT_KEY: f.fingerprint}, "properties": {"stage": f.stage}}
    if f.waived is not None:
        res["suppressions"] = [{"kind": "external", "status": "accepted", "justification": f.waived}]
    return res


def _uri(path: str) -> str:
    shown = display_path(path)
    return quote(shown) if not Path(shown).is_absolute() else Path(shown).as_uri()
