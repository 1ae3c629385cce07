"""The check lists (guards/run.py): the report order, whichever guards module is imported first."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

ORDER = ("['check_layout', 'check_trailing', 'check_names'] "
         "['check_keys', 'check_tokenizer', 'check_tensors', 'check_drafter', 'check_dspark'] "
         "['pair_roles', 'pair_vocab', 'pair_drafter']")


def test_check_order_does_not_depend_on_the_first_import():
    # Findings come out in list order (integrity before drafter checks). The lists are also
    # reachable at their old place, guards.findings: the same tuples, even when a check module
    # is the first import of a fresh interpreter.
    code = ("import dflash_gguf.guards.pairing, dflash_gguf.guards.findings as f, dflash_gguf.guards.run as r; "
            "assert (f.FILE_CHECKS, f.MODEL_CHECKS, f.PAIR_CHECKS) == (r.FILE_CHECKS, r.MODEL_CHECKS, r.PAIR_CHECKS); "
            "print(*([c.__name__ for c in checks] for checks in (r.FILE_CHECKS, r.MODEL_CHECKS, r.PAIR_CHECKS)))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == ORDER
