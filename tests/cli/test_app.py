"""The CLI entry point (cli/__init__.py, cli/_app.py): it imports only the invoked command's module
(its table must match what the modules register), --version, and a stdout closed by its reader."""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

import pytest

from tests.conftest import FIXTURES, ROOT

# In a fresh interpreter: which command modules a command line imports, and what the app has registered.
_PROBE = """
import json, sys
from dflash_gguf import cli
from dflash_gguf.cli._app import app
code = cli.main(sys.argv[1:])
mods = sorted(m.rsplit(".", 1)[1] for m in sys.modules if m.startswith("dflash_gguf.cli.") and m.rsplit(".", 1)[1] in cli.COMMANDS)
print(json.dumps({"code": code, "modules": mods, "commands": [c.name for c in app.registered_commands]}))
"""


def _probe(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_table_names_every_command_each_module_registers():
    from dflash_gguf.cli import COMMANDS
    from dflash_gguf.cli._app import app

    for name in COMMANDS:
        importlib.import_module(f"dflash_gguf.cli.{name}")
    by_module: dict[str, set[str]] = {}
    for c in app.registered_commands:
        by_module.setdefault(c.callback.__module__.rsplit(".", 1)[1], set()).add(c.name)
    assert by_module.pop("_app") == {"version"}
    assert by_module == {m: set(cmds) for m, cmds in COMMANDS.items()}
    pkg = ROOT / "dflash_gguf" / "cli"
    modules = {p.stem for p in pkg.glob("*.py") if not p.stem.startswith("_")}
    assert modules == set(COMMANDS)  # a new command module must be added to the table


def test_a_command_imports_its_module_only():
    r = _probe("check", "--help")
    assert r["code"] == 0 and r["modules"] == ["checks"]
    r = _probe("compare-weights", "--help")
    assert r["code"] == 0 and r["modules"] == ["compare"]
    r = _probe("version")
    assert r["code"] == 0 and r["modules"] == []


def test_help_and_unknown_commands_see_every_command():
    r = _probe("--help")
    assert r["code"] == 0 and sorted(r["modules"]) == sorted(__import__("dflash_gguf.cli").cli.COMMANDS)
    assert {"convert", "check", "compare-weights", "parity", "version"} <= set(r["commands"])
    r = _probe("comvert")  # click lists the real commands for a typo
    assert r["code"] == 2 and sorted(r["modules"]) == sorted(__import__("dflash_gguf.cli").cli.COMMANDS)


def test_the_console_script_freezes_the_heap_before_exit_and_in_process_calls_do_not():
    # The console script's exit skips shutdown's garbage collections over what the run built
    # (gc.freeze); a caller of main(argv) keeps a normal heap.
    probe = ("import atexit, gc, sys\n"
             "from dflash_gguf import cli\n"
             "assert cli.main(['version']) == 0 and gc.get_freeze_count() == 0\n"
             "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0))\n"
             "sys.argv = ['dflash-gguf', 'version']\n"
             "cli.main()\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "frozen True"


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")},
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "dflash_gguf", *map(str, args)]


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_flag(flag):
    try:
        expected = version("dflash-gguf")
    except PackageNotFoundError:  # a checkout that was never installed
        from dflash_gguf import __version__ as expected
    r = subprocess.run(_cli(flag), capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=120)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"dflash-gguf {expected}\n", "")
    assert _probe(flag)["modules"] == []  # like `version`: no command module imported


@pytest.fixture(scope="module")
def long_gguf(tmp_path_factory):
    """A GGUF whose inspect output (~0.25 MB of text, ~0.6 MB of JSON) is far past a pipe's buffer."""
    import numpy as np
    from gguf import GGUFWriter

    path = tmp_path_factory.mktemp("pipe") / "many-tensors.gguf"
    w = GGUFWriter(path, "llama")
    for i in range(4000):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("args,env", [
    (["inspect", "--json"], {}),                  # print_json
    (["inspect"], {}),                            # plain lines, then rich's tables
    (["inspect"], {"FORCE_COLOR": "1"}),          # rich for every line
], ids=["json", "text", "rich"])
def test_a_reader_that_stops_early_is_not_an_error(long_gguf, args, env):
    """`dflash-gguf inspect X | head -1`: exit 0, nothing on stderr (was exit 1, and tracebacks
    at the interpreter's exit)."""
    proc = subprocess.Popen(_cli(*args, long_gguf), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**_env(), **env}, cwd=ROOT)
    first = proc.stdout.readline()
    proc.stdout.close()  # what `head -1` does
    code = proc.wait(timeout=120)
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    assert first.strip() and code == 0 and stderr == ""


@pytest.mark.parametrize("args,code", [
    (["check", FIXTURES / "guards" / "qwen3-8b-dflash.gguf", "--target", FIXTURES / "guards" / "llama-3.1-8b.gguf"], 13),
    (["check", "--json", FIXTURES / "guards" / "qwen3-8b-dflash.gguf", "--target", FIXTURES / "guards" / "llama-3.1-8b.gguf"], 13),
    (["check", ROOT / "README.md"], 6),
    (["--version"], 0),
    (["--help"], 0),
], ids=["check-text", "check-json", "not-a-gguf", "version", "help"])
def test_a_closed_stdout_keeps_the_commands_own_exit_code(args, code):
    """A command that runs to its end despite the closed pipe exits with its own code: a `check`
    verdict still fails a CI pipeline that pipes it into `head`."""
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first byte
    try:
        done = subprocess.run(_cli(*args), stdout=w, stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT,
                              timeout=120)
    finally:
        os.close(w)
    assert done.returncode == code
    assert (done.stderr == "") if code in (0, 13) else (len(done.stderr.splitlines()) == 1)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
