"""retarget: a drafter GGUF rewritten into another format, tensor bytes untouched."""
from __future__ import annotations

import pytest

from dflash_gguf.formats import FORMATS
from tests.conftest import rewrite_gguf
from tests.convert.conftest import LLAMA_GGUF, do_convert, kvs, tensors

FORMAT_NAMES = list(FORMATS)


@pytest.mark.parametrize("a", FORMAT_NAMES)
@pytest.mark.parametrize("b", FORMAT_NAMES)
def test_retarget_round_trip(cli, tmp_path, a, b):
    code, src, _, se = do_convert(cli, tmp_path, "qwen3-nested", a, name="a.gguf", with_target=True)
    assert code == 0, se
    mid, back = tmp_path / "b.gguf", tmp_path / "a2.gguf"
    code, _, se = cli("retarget", src, "--format", b, "-o", mid)
    assert code == 0, se
    assert kvs(mid)["general.architecture"][0] == FORMATS[b].archs[0]
    code, _, se = cli("retarget", mid, "--format", a, "-o", back)
    assert code == 0, se
    assert kvs(back) == kvs(src)
    assert tensors(back) == tensors(src)


def test_retarget_tokenizerless_lucebox_needs_a_target(cli, tmp_path):
    code, src, _, se = do_convert(cli, tmp_path, "gemma-style", "lucebox")
    assert code == 0, se
    out = tmp_path / "main.gguf"
    code, _, se = cli("retarget", src, "--format", "llama.cpp", "-o", out)
    assert code == 2 and "--target-gguf" in se and not out.exists()
    code, _, se = cli("retarget", src, "--format", "llama.cpp", "-o", out, "--target-gguf", LLAMA_GGUF)
    assert code == 0, se
    kv = kvs(out)
    assert kv["dflash.target_layers"][0] == [1, 2] and kv["tokenizer.ggml.mask_token_id"][0] == 4
    code, _, se = cli("retarget", src, "--format", "llama.cpp", "-o", tmp_path / "x.gguf",
                      "--target-gguf", do_convert(cli, tmp_path, "qwen3-flat", "llama.cpp", name="q.gguf")[1])
    assert code == 7 and "takes the target model's GGUF" in se


def test_retarget_fixes_taps_between_conventions(cli, tmp_path):
    code, src, _, se = do_convert(cli, tmp_path, "qwen3-flat", "dflash-draft")
    assert code == 0, se
    out = tmp_path / "main.gguf"
    assert cli("retarget", src, "--format", "llama.cpp", "-o", out)[0] == 0
    assert kvs(out)["dflash.target_layers"][0] == [1, 2, 3, 4]
    assert kvs(src)["dflash-draft.dflash.target_layer_ids"][0] == [0, 1, 2, 3]


def test_retarget_refuses_two_tensors_with_one_name(cli, tmp_path):
    """A tensor that already carries the target format's name for another tensor (found by the fuzz
    campaign): one GGUFFormatError naming both, not gguf-py's duplicate-name ValueError."""
    code, src, _, se = do_convert(cli, tmp_path, "qwen3-flat", "llama.cpp", with_target=True)
    assert code == 0, se
    bad = rewrite_gguf(src, tmp_path / "bad.gguf", rename={"blk.0.attn_v.weight": "dflash_fc.weight"})
    out = tmp_path / "r.gguf"
    code, _, se = cli("retarget", bad, "--format", "dflash-draft", "-o", out)
    assert code == 6 and not out.exists()
    assert "fc.weight and dflash_fc.weight would both be named dflash_fc.weight" in se
    assert len(se.strip().splitlines()) == 1


def test_dspark_round_trips_in_mainline_and_refuses_fork_formats(cli, dspark, tmp_path):
    for case in ("qwen3-reduced", "gemma4"):
        src = dspark["gguf"][case]
        back = tmp_path / f"{case}.gguf"
        code, _, se = cli("retarget", src, "--format", "llama.cpp", "-o", back)
        assert code == 0, se
        assert back.read_bytes() == src.read_bytes()  # keys, tensors (d2t, Gemma4 names) and bytes kept
        for fmt in ("llama.cpp-pr22105", "dflash-draft", "lucebox"):
            out = tmp_path / f"{case}-{fmt}.gguf"
            code, _, se = cli("retarget", src, "--format", fmt, "-o", out)
            assert code == 2 and f"use --format llama.cpp instead of --format {fmt}" in se, se
            assert not out.exists()
