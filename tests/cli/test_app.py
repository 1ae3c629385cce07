"""The CLI imports only the invoked command's module: its table must match what the modules register."""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

from tests.conftest import ROOT

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
