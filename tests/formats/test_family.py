"""formats/family.py: the one seam a drafter family changes how a GGUF is read and checked. The
default adds nothing; DSpark's family claims its own tensors only in formats that load DSpark."""
from __future__ import annotations

from dflash_gguf.formats import FORMATS, file_family
from dflash_gguf.formats.dspark import DSPARK, MARKOV_W1
from dflash_gguf.formats.family import DFLASH

NAMES = ["fc.weight", "blk.0.attn_q.weight"]


def test_a_plain_drafter_file_gets_the_default_which_adds_nothing():
    fam = file_family({"dflash.block_count": 1}, NAMES, "dflash")
    assert fam is DFLASH
    for fmt in FORMATS.values():
        assert not fam.claims_tensor(fmt, MARKOV_W1) and not fam.optional_tensor(fmt, "blk.0.attn_v.weight", NAMES)
    assert fam.summary({}, {}, "dflash") is None


def test_dspark_is_chosen_by_a_head_tensor_or_a_key():
    assert file_family({}, [*NAMES, MARKOV_W1], "dflash") is DSPARK
    assert file_family({"dflash.sample_from_anchor": True}, NAMES, "dflash") is DSPARK


def test_dspark_claims_its_tensors_only_where_a_runtime_loads_them():
    supports = {name: fmt.supports_dspark for name, fmt in FORMATS.items()}
    assert any(supports.values()) and not all(supports.values())
    for name, fmt in FORMATS.items():
        assert DSPARK.claims_tensor(fmt, MARKOV_W1) == supports[name]
        assert DSPARK.claims_tensor(fmt, "blk.0.post_ffw_norm.weight") == supports[name]
        assert not DSPARK.claims_tensor(fmt, "blk.0.mystery.weight")
    gemma4 = [*NAMES, "blk.0.post_ffw_norm.weight"]
    mainline = FORMATS["llama.cpp"]
    assert DSPARK.optional_tensor(mainline, "blk.0.attn_v.weight", gemma4)
    assert not DSPARK.optional_tensor(mainline, "blk.0.attn_v.weight", NAMES)
