"""formats/hparams.py: the one (config field, GGUF key, type) table, read both ways.

Forward it must write what llama.cpp's converter writes (checked byte for byte by the convert
ground-truth tests); here: every published drafter config goes through the table forward and
back and comes out with the same constants, and a bad key is one GGUFFormatError."""
from __future__ import annotations

import math

import pytest

from dflash_gguf.config import parse_config
from dflash_gguf.errors import ConfigError, GGUFFormatError
from dflash_gguf.fileio.gguf_constants import GGUFValueType as T
from dflash_gguf.fileio.types import KV
from dflash_gguf.formats.hparams import HPARAMS, Key, KeyReader, decode_hparams, encode_hparams

from tests.convert.published import drafter_config, load_index, slug_dir

SLUGS = [e["slug"] for e in load_index()]
# Constants the table carries; identity facts (taps, mask id, block size) travel in the format's own keys.
CONSTANTS = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
             "head_dim", "rms_norm_eps", "rope_theta", "max_position_embeddings", "rope_dim", "sliding_window",
             "swa_pattern", "is_causal", "final_logit_softcapping", "output_multiplier", "input_embedding_scale",
             "attention_value_scale")


def _reader(hparams, arch="dflash") -> KeyReader:
    kvs = {f"{arch}.{s}": KV(f"{arch}.{s}", v, t, sub) for s, v, t, sub in hparams}
    return KeyReader(kvs, arch, "x.gguf", "cannot rebuild the config")


def _f32(v):
    import numpy as np

    return float(np.float32(v)) if isinstance(v, float) else v


def _round_trip(cfg):
    raw = {"architectures": [cfg.architecture], "model_type": cfg.model_type, "head_dim": cfg.head_dim,
           "vocab_size": cfg.vocab_size, "block_size": cfg.block_size,
           "dflash_config": {"mask_token_id": cfg.mask_token_id, "target_layer_ids": list(cfg.target_layer_ids)}}
    if cfg.is_dflash2:
        raw["dflash_config"].update({k: getattr(cfg, k) for k in ("conv_kernel_size", "conv_group_size",
                                                                   "selector_rank", "selector_top_k")})
    decode_hparams(_reader(encode_hparams(cfg)), raw)
    return parse_config(raw, cfg.path)


@pytest.mark.parametrize("slug", SLUGS)
def test_every_published_config_survives_the_table_both_ways(slug):
    try:
        cfg = parse_config(drafter_config(slug), slug_dir(slug) / "config.json")
    except ConfigError as exc:  # the corpus keeps configs we refuse, with their reasons
        pytest.skip(f"refused: {exc}")
    if cfg.dspark is not None and cfg.dspark.gemma4:
        pytest.skip("Gemma4 DSpark overrides head sizes through its family keys, not this table")
    if cfg.mask_token_id is None or not cfg.rope_theta_in_config:
        pytest.skip("the file carries no mask id / theta: the reference cannot rebuild it (documented refusal)")
    back = _round_trip(cfg)
    for name in CONSTANTS:
        want, got = getattr(cfg, name), getattr(back, name)
        if name == "is_causal" and want is None:
            continue  # unwritten: a runtime reads it as non-causal (the reference's rules decide)
        if name == "max_position_embeddings" and want is None:
            continue
        assert _f32(got) == _f32(want), (slug, name, got, want)
    if cfg.rope_scaling is not None and cfg.rope_scaling.type in ("linear", "yarn"):
        assert back.rope_scaling.type == cfg.rope_scaling.type
        assert math.isclose(back.rope_scaling.factor, cfg.rope_scaling.factor, rel_tol=1e-7)


def test_keys_are_written_in_the_converters_order():
    cfg = parse_config(drafter_config(SLUGS[0]), slug_dir(SLUGS[0]) / "config.json")
    suffixes = [s for s, *_ in encode_hparams(cfg)]
    order = [r.suffix for r in HPARAMS if isinstance(r, Key)]
    known = [s for s in suffixes if s in order]
    assert known == sorted(known, key=order.index)
    assert suffixes[:3] == ["block_count", "context_length", "embedding_length"]


def test_a_key_of_the_wrong_type_is_one_error():
    reader = _reader([("block_count", "four", T.STRING, None)])
    with pytest.raises(GGUFFormatError, match="dflash.block_count"):
        decode_hparams(reader, {"head_dim": 64})


def test_a_required_key_missing_names_it():
    with pytest.raises(GGUFFormatError, match="dflash.block_count is missing; cannot rebuild the config"):
        decode_hparams(_reader([]), {"head_dim": 64})


def test_a_pattern_of_the_wrong_length_is_refused():
    hp = [("block_count", 2, T.UINT32, None), ("embedding_length", 64, T.UINT32, None),
          ("feed_forward_length", 128, T.UINT32, None), ("attention.head_count", 1, T.UINT32, None),
          ("rope.freq_base", 1e6, T.FLOAT32, None), ("attention.layer_norm_rms_epsilon", 1e-6, T.FLOAT32, None),
          ("attention.sliding_window", 8, T.UINT32, None),
          ("attention.sliding_window_pattern", [True, False, True], T.ARRAY, T.BOOL)]
    with pytest.raises(GGUFFormatError, match="3 entries for 2 layers"):
        decode_hparams(_reader(hp), {"head_dim": 64})
