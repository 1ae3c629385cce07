"""The check lists (guards/run.py): integrity findings first, then the drafter's, then pairing's."""
from __future__ import annotations

from dflash_gguf.guards import run


def test_the_report_order_is_the_listed_order():
    names = [[c.__name__ for c in checks] for checks in (run.FILE_CHECKS, run.MODEL_CHECKS, run.PAIR_CHECKS)]
    assert names == [["check_layout", "check_trailing", "check_names"],
                     ["check_keys", "check_tokenizer", "check_tensors", "check_drafter", "check_dspark",
                      "check_legacy_dspark"],
                     ["pair_roles", "pair_vocab", "pair_drafter"]]
