"""meta_from_gguf and the typed KV accessors on hostile metadata: a key of the wrong type is
one GGUFFormatError naming the key, its byte, its type and value — never a TypeError,
OverflowError or a silently coerced value (found by tests/fuzz/test_fuzz_gguf_doors.py)."""
from __future__ import annotations

import math

import pytest
from gguf import GGUFValueType as V

from dflash_gguf.errors import GGUFFormatError
from dflash_gguf.fileio.types import KV
from dflash_gguf.formats import DFLASH_DRAFT, LUCEBOX, MAINLINE, meta_from_gguf
from dflash_gguf.formats.meta import CONVERTER_KEY, without_mask

SHAPES = {"fc.weight": (64, 256), "enc.output_norm.weight": (64,), "blk.0.attn_norm.weight": (64,)}


def mainline(**override: KV | None) -> dict[str, KV]:
    """The DFlash keys of a converted qwen3-flat drafter (mainline), with ``override`` applied
    (None drops a key); offsets are made up so the messages can name a byte."""
    kvs = [
        KV("general.architecture", "dflash", V.STRING),
        KV("dflash.block_count", 2, V.UINT32),
        KV("dflash.embedding_length", 64, V.UINT32),
        KV("general.file_type", 32, V.UINT32),
        KV("dflash.block_size", 16, V.UINT32),
        KV("dflash.target_layers", (1, 2, 3, 4), V.ARRAY, V.INT32),
        KV("general.quantization_version", 2, V.UINT32),
        KV("tokenizer.ggml.mask_token_id", 500, V.UINT32),
    ]
    out = {kv.key: KV(kv.key, kv.value, kv.type, kv.sub_type, 100 + 10 * i) for i, kv in enumerate(kvs)}
    for key, kv in override.items():
        key = key.replace("__", ".")
        if kv is None:
            out.pop(key, None)
        else:
            out[key] = KV(key, kv.value, kv.type, kv.sub_type, 1234)
    return out


def test_pristine_keys_parse():
    fmt, meta = meta_from_gguf(mainline(), SHAPES, "d.gguf")
    assert fmt is MAINLINE and meta.taps == (0, 1, 2, 3) and meta.block_size == 16 and meta.mask_token_id == 500
    assert meta.file_type == 32 and meta.quantization_version == 2 and meta.n_target_features == 256


@pytest.mark.parametrize("key,kv,expected", [
    # fuzz: `parity` / from_gguf on general.file_type = b'ab\xffcd' (STRING): ValueError from int()
    ("general.file_type", KV("", "ab\ufffdcd", V.STRING), "an integer"),
    ("general.quantization_version", KV("", math.inf, V.FLOAT32), "an integer"),  # was OverflowError
    ("general.file_type", KV("", -1, V.INT32), "an integer in [0, 4,294,967,295]"),
    # floats / bools / numeric strings were coerced silently (int(3.5) == 3, int("16") == 16, int(True) == 1)
    ("dflash.block_size", KV("", 3.5, V.FLOAT32), "an integer"),
    ("dflash.block_size", KV("", "16", V.STRING), "an integer"),
    ("dflash.block_size", KV("", True, V.BOOL), "an integer"),
    ("dflash.block_size", KV("", 2**40, V.UINT64), "an integer in [0, 4,294,967,295]"),  # retarget: struct.error
    ("tokenizer.ggml.mask_token_id", KV("", float("nan"), V.FLOAT64), "an integer"),
    # taps: floats were accepted and crashed the writer (struct.error packing INT32) on retarget
    ("dflash.target_layers", KV("", (1.5, 2.5), V.ARRAY, V.FLOAT32), "an array of integers"),
    ("dflash.target_layers", KV("", "1234", V.STRING), "an array of integers"),  # list("1234") was 4 strings
    ("dflash.target_layers", KV("", ((1, 2), (3, 4)), V.ARRAY, V.ARRAY), "an array of integers"),
    ("dflash.target_layers", KV("", (), V.ARRAY, V.INT32), "a non-empty array of integers"),
    ("dflash.target_layers", KV("", (1, 2**63), V.ARRAY, V.UINT64), "an array of integers in [0, 2,147,483,646]"),
    ("dflash.target_layers", KV("", (-5, 1), V.ARRAY, V.INT32), "an array of integers in [0, 2,147,483,646]"),
    ("dflash.target_layers", KV("", (True, False), V.ARRAY, V.BOOL), "an array of integers"),
    ("dflash.conv_kernel_size", KV("", "abc", V.STRING), "an integer"),
    ("dflash.block_count", KV("", "2", V.STRING), "an integer"),
    ("dflash.embedding_length", KV("", 0, V.UINT32), "an integer in [1, 4,294,967,295]"),
])
def test_wrong_type_is_one_format_error(key, kv, expected):
    with pytest.raises(GGUFFormatError) as e:
        meta_from_gguf(mainline(**{key.replace(".", "__"): kv}), SHAPES, "d.gguf")
    msg = str(e.value)
    assert msg.startswith(f"d.gguf: key {key} (at byte 1,234) has unexpected types: it is {kv.type.name}")
    assert f"loaders read {expected}" in msg and msg.isprintable() and "\n" not in msg


def test_architecture_must_be_a_string():
    with pytest.raises(GGUFFormatError, match=r"key general.architecture .* is UINT32 5, but loaders read a string"):
        meta_from_gguf(mainline(general__architecture=KV("", 5, V.UINT32)), SHAPES, "d.gguf")


def test_non_printable_architecture_is_shown_escaped():
    with pytest.raises(GGUFFormatError) as e:
        meta_from_gguf(mainline(general__architecture=KV("", "df\nla\x1bsh", V.STRING)), SHAPES, "d.gguf")
    assert "not a DFlash drafter" in str(e.value) and str(e.value).isprintable()


def test_scalar_fc_is_a_format_error_not_an_index_error():
    with pytest.raises(GGUFFormatError, match="fc.weight has shape .* must be 2-D"):
        meta_from_gguf(mainline(), {**SHAPES, "fc.weight": ()}, "d.gguf")


def test_missing_block_count_still_says_missing():
    with pytest.raises(GGUFFormatError, match="dflash.block_count is missing; not a usable drafter"):
        meta_from_gguf(mainline(dflash__block_count=None), SHAPES, "d.gguf")


def test_vocab_only_from_a_string_array():
    tokens = KV("tokenizer.ggml.tokens", "abc", V.STRING)  # len("abc") must not become the vocab size
    _, meta = meta_from_gguf({**mainline(), "tokenizer.ggml.tokens": tokens}, SHAPES, "d.gguf")
    assert meta.vocab_size is None and tokens in meta.tokenizer


def test_mainline_tap_zero_is_still_read():
    """Stored 0 (the layer-0 input) parses: the checks report the offset, not the parser."""
    _, meta = meta_from_gguf(mainline(dflash__target_layers=KV("", (0, 1), V.ARRAY, V.INT32)), SHAPES, "d.gguf")
    assert meta.taps == (-1, 0)


@pytest.mark.parametrize("fmt,arch,prefix", [(DFLASH_DRAFT, "dflash-draft", "dflash-draft.dflash"),
                                             (LUCEBOX, "qwen35-dflash-draft", "qwen35-dflash-draft.dflash")])
def test_fork_formats_type_check_their_keys(fmt, arch, prefix):
    kvs = {k: v for k, v in mainline().items() if not k.startswith("dflash.")}
    kvs["general.architecture"] = KV("general.architecture", arch, V.STRING)
    kvs[f"{arch}.block_count"] = KV(f"{arch}.block_count", 2, V.UINT32)
    kvs[f"{arch}.embedding_length"] = KV(f"{arch}.embedding_length", 64, V.UINT32)
    kvs[f"{prefix}.target_layer_ids"] = KV(f"{prefix}.target_layer_ids", (0, 1, 2, 3), V.ARRAY, V.INT32)
    shapes = {fmt.fc_name: (64, 256)}
    assert meta_from_gguf(kvs, shapes, "d.gguf")[1].taps == (0, 1, 2, 3)
    for key, bad in ((f"{prefix}.n_target_features", KV("", -3.0, V.FLOAT32)),
                     (f"{prefix}.block_size", KV("", "x", V.STRING)),
                     (f"{prefix}.target_layer_ids", KV("", ("a", "b"), V.ARRAY, V.STRING))):
        with pytest.raises(GGUFFormatError, match=f"key {key} .*has unexpected types"):
            meta_from_gguf({**kvs, key: KV(key, bad.value, bad.type, bad.sub_type)}, shapes, "d.gguf")


def _keys(fmt, meta) -> list[str]:
    keys = [kv.key for kv in fmt.kvs(meta)[1]]
    assert keys[-1] == CONVERTER_KEY  # every format's last key: the writer's version
    return keys[:-1]


def test_the_writers_version_is_rewritten_not_kept():
    from dflash_gguf import __version__

    kvs = mainline()
    kvs[CONVERTER_KEY] = KV(CONVERTER_KEY, "0.0.1", V.STRING)
    fmt, meta = meta_from_gguf(kvs, SHAPES, "d.gguf")
    assert CONVERTER_KEY not in [kv.key for kv in meta.general]
    out = LUCEBOX.kvs(meta)[1]  # a format that needs no vocabulary
    assert [kv for kv in out if kv.key == CONVERTER_KEY] == [KV(CONVERTER_KEY, __version__, V.STRING)]


def test_mask_id_keeps_its_place_among_the_tokenizer_keys():
    # gguf-py's writer overwrites a key where it stands: mainline's converter writes the drafter's
    # mask id where the target's vocab had one (Gemma 4: after padding_token_id), else last.
    tok = [KV("tokenizer.ggml.model", "gemma4", V.STRING), KV("tokenizer.ggml.mask_token_id", 4, V.UINT32),
           KV("tokenizer.ggml.add_bos_token", True, V.BOOL)]
    kvs = mainline()
    del kvs["tokenizer.ggml.mask_token_id"]
    kvs.update({kv.key: kv for kv in tok})
    fmt, meta = meta_from_gguf(kvs, SHAPES, "d.gguf")
    assert meta.mask_token_id == 4 and meta.mask_at == 1
    keys = _keys(fmt, meta)
    assert keys[-3:] == ["tokenizer.ggml.model", "tokenizer.ggml.mask_token_id", "tokenizer.ggml.add_bos_token"]
    # a vocab without one: appended after the tokenizer keys
    meta.tokenizer, meta.mask_at = without_mask([tok[0], tok[2]])
    assert meta.mask_at is None and _keys(MAINLINE, meta)[-3:] == [tok[0].key, tok[2].key, tok[1].key]
    # a format that stores the mask id under its own key drops the target's
    meta.tokenizer, meta.mask_at = without_mask(tok)
    assert meta.mask_at == 1 and "tokenizer.ggml.mask_token_id" not in _keys(DFLASH_DRAFT, meta)
    assert _keys(MAINLINE, meta)[-2] == "tokenizer.ggml.mask_token_id"
