"""lazy_exports: a package's names imported from their submodule on first lookup, and only then;
require: an optional package, or the one line naming the extra that installs it."""
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def test_a_name_imports_its_submodule_on_first_lookup_only():
    probe = ("import sys, dflash_gguf.config as c\n"
             "before = 'dflash_gguf.config.target' in sys.modules\n"
             "from dflash_gguf.config.target import TargetConfig\n"
             "print(before, c.TargetConfig is TargetConfig, 'dflash_gguf.config.target' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "True"]


def test_an_unknown_name_is_an_attribute_error():
    import dflash_gguf.convert as convert

    with pytest.raises(AttributeError, match="dflash_gguf.convert.*no_such_name"):
        convert.no_such_name  # noqa: B018
    assert convert.retarget.__module__ == "dflash_gguf.convert.retargeting"  # a function, not its module


def test_require_returns_the_package_or_names_its_extra(monkeypatch):
    from dflash_gguf._lazy import require
    from dflash_gguf.errors import UsageError

    assert require("json", "parsing", "any") is sys.modules["json"]
    monkeypatch.setitem(sys.modules, "torch", None)  # what `import torch` does without it installed
    with pytest.raises(UsageError) as e:
        require("torch", "parity", "torch")
    assert str(e.value) == "parity needs the 'torch' package: pip install 'dflash-gguf[torch]'"
    with pytest.raises(UsageError, match=r"\[plots\]' \(or drop --plots\)$"):
        monkeypatch.setitem(sys.modules, "matplotlib", None)
        require("matplotlib", "--plots", "plots", alternative="or drop --plots")
