"""The header-only commands import only what they need: no numpy, gguf-py, torch, numba,
transformers, safetensors or yaml (those are ~0.5 s of the old start-up; benchmarks/bench_checks.py
times it), nor pydantic (typer 0.29 validates every parameter with it: pyproject pins below). Each command runs in a fresh interpreter, as a shell would run it. This asserts what
is imported, never how long it takes."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES, ROOT

HEAVY = {"numpy", "gguf", "torch", "numba", "transformers", "safetensors", "yaml", "tokenizers", "sentencepiece",
         "pydantic"}
DRAFTER = FIXTURES / "guards" / "qwen3-8b-dflash.gguf"
TARGET = FIXTURES / "guards" / "qwen3-8b.gguf"
SHARD = FIXTURES / "guards" / "qwen3-8b-sharded-00001-of-00002.gguf"
NOT_GGUF = ROOT / "README.md"

# Run the CLI as `python -m dflash_gguf ARGS`, then report the exit code and the modules that
# ended up imported.
_RUNNER = """
import json, runpy, sys
sys.argv = ["dflash-gguf", *sys.argv[1:]]
try:
    runpy.run_module("dflash_gguf", run_name="__main__", alter_sys=True)
    code = 0
except SystemExit as exc:
    code = exc.code
sys.stdout.flush()
sys.stderr.write("\\n" + json.dumps({"code": code, "modules": sorted(sys.modules)}) + "\\n")
"""

CASES = [
    (["version"], 0),
    (["--version"], 0),
    (["--help"], 0),
    (["check", "--help"], 0),
    (["check-instruct", "--help"], 0),
    (["inspect", "--help"], 0),
    (["bench", "--help"], 0),
    (["check", DRAFTER], 0),
    (["check", "--json", DRAFTER], 0),
    (["check", DRAFTER, "--target", TARGET], 0),
    (["check", SHARD], 0),
    (["check", NOT_GGUF], 6),
    (["check", "--json", NOT_GGUF], 6),
    (["check-instruct", TARGET], 0),
    (["check-instruct", "--json", FIXTURES / "guards" / "qwen3-8b-base.gguf"], 10),
    (["inspect", DRAFTER], 0),
    (["inspect", "--json", DRAFTER], 0),
    (["inspect", TARGET], 0),
]


def run_fresh(args: list, env: dict[str, str] | None = None, *, full: bool = False) -> tuple[int, set[str]]:
    """Exit code and imported top-level packages (``full``: every module) of ``dflash-gguf
    ARGS`` in a new interpreter (stdout and stderr are pipes, and nothing in the environment
    forces a terminal unless ``env``, added to it, does)."""
    env = {**{k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")},
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), **(env or {})}
    proc = subprocess.run([sys.executable, "-c", _RUNNER, *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    modules = set(report["modules"])
    return report["code"], modules if full else {m.split(".")[0] for m in modules}


@pytest.mark.parametrize("args,code", CASES, ids=[" ".join(str(a).rsplit("/", 1)[-1] for a in c[0]) for c in CASES])
def test_header_only_commands_skip_heavy_imports(args, code):
    got, modules = run_fresh(args)
    assert got == code
    assert "dflash_gguf" in modules
    assert not modules & HEAVY, f"imported {sorted(modules & HEAVY)}"


def test_the_runner_sees_heavy_imports():
    # The same probe on a command that needs numpy reports it: the assertion above is not vacuous.
    got, modules = run_fresh(["check", "--deep", DRAFTER])
    assert got == 0
    assert "numpy" in modules


# Output that is plain lines on a pipe is written without rich (~25 ms to import): a convert's
# summary, and the --json documents.
PLAIN = [
    (["check", "--json", DRAFTER], 0),
    (["inspect", "--json", DRAFTER], 0),
    (["convert", FIXTURES / "drafters" / "gemma-style", "--target-gguf", FIXTURES / "targets" / "llama-tiny.gguf",
      "-o", "{out}"], 0),
]


@pytest.mark.parametrize("args,code", PLAIN, ids=[" ".join(str(a).rsplit("/", 1)[-1] for a in c[0][:2]) for c in PLAIN])
def test_plain_output_on_a_pipe_skips_rich(tmp_path, args, code):
    args = [str(a).format(out=tmp_path / "out.gguf") for a in args]
    got, modules = run_fresh(args)
    assert got == code
    assert "rich" not in modules
    # the same output for people, where the environment forces a terminal: rendered by rich
    # (the probe is not vacuous)
    (tmp_path / "out.gguf").unlink(missing_ok=True)
    got, modules = run_fresh([a for a in args if a != "--json"], env={"FORCE_COLOR": "1"})
    assert got == code and "rich" in modules


# What a bf16 drafter converted against a target GGUF (the data path: stored bytes copied) does
# not need; each was ~1-6 ms of its start-up (docs/performance.md, "convert").
NOT_FOR_A_COPY = {"numpy", "gguf", "safetensors", "rich", "concurrent.futures", "dflash_gguf.config.target",
                  "dflash_gguf.convert.mask_embedding", "dflash_gguf.convert.retargeting", "dflash_gguf.cli.retarget"}


def test_a_plain_convert_from_a_target_gguf_imports_only_the_copy_path(tmp_path):
    drafter, target = FIXTURES / "drafters" / "gemma-style", FIXTURES / "targets" / "llama-tiny.gguf"
    out = tmp_path / "out.gguf"
    got, modules = run_fresh(["convert", drafter, "--target-gguf", target, "-o", out], full=True)
    assert got == 0 and out.is_file()
    assert "dflash_gguf.convert.checkpoint" in modules and "dflash_gguf.fileio.ahead" in modules
    assert not modules & NOT_FOR_A_COPY, f"imported {sorted(modules & NOT_FOR_A_COPY)}"
    # a MiMo-style drafter (mask_embedding.pt) and retarget do import theirs (the probe is not vacuous)
    got, modules = run_fresh(["retarget", out, "--format", "dflash-draft", "--dry-run"], full=True)
    assert got == 0 and {"dflash_gguf.convert.retargeting", "dflash_gguf.cli.retarget"} <= modules
