"""The check registry: every check module registers on import, always in the same order."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

ORDER = ("['check_layout', 'check_trailing', 'check_names'] "
         "['check_keys', 'check_tokenizer', 'check_tensors', 'check_drafter', 'check_dspark'] "
         "['pair_roles', 'pair_vocab', 'pair_drafter']")


def test_registry_order_does_not_depend_on_the_first_import():
    # Findings come out in registry order (integrity before drafter checks); a fresh
    # interpreter that imports the pairing module first must see the same order.
    code = ("import dflash_gguf.guards.pairing, dflash_gguf.guards.findings as f; "
            "print(*([c.__name__ for c in checks] for checks in (f.FILE_CHECKS, f.MODEL_CHECKS, f.PAIR_CHECKS)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == ORDER
