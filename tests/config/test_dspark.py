"""config/dspark.py: the DSpark schemas read as mainline's DSparkModel / Gemma4DSparkModel read
them (their defaults, their normalisation, their refusals), without llama.cpp."""
from __future__ import annotations

import pytest

from dflash_gguf.config import load_config
from dflash_gguf.errors import ConfigError
from tests.config.helpers import write_cfg
from tests.convert.dspark_ckpt import dspark_config, gemma4_config


def test_dflash_lineage_samples_the_anchor_and_keeps_its_taps(tmp_path):
    cfg = load_config(write_cfg(tmp_path, dspark_config("DSparkDraftModel")))
    assert cfg.family == "dspark" and cfg.dspark.sample_from_anchor and not cfg.dspark.eagle3_style
    assert cfg.target_layer_ids == (0, 1, 3) and cfg.mask_token_id == 500
    assert cfg.dspark.markov_rank == 32 and cfg.dspark.draft_vocab_size == 512 and not cfg.dspark.reduced_vocab


def test_speculators_export_is_flattened_with_layer_input_taps(tmp_path):
    cfg = load_config(write_cfg(tmp_path, dspark_config("DSparkSpeculator", speculators=True, draft_vocab=128)))
    assert cfg.hidden_size == 64 and cfg.num_hidden_layers == 2  # from transformer_layer_config
    assert cfg.target_layer_ids == (0, 1, 3)  # aux ids 1, 2, 4 are layer inputs: z-lab id = aux - 1
    assert cfg.dspark.eagle3_style and not cfg.dspark.sample_from_anchor  # slot 0 is a bonus anchor
    assert cfg.dspark.reduced_vocab and cfg.dspark.draft_vocab_size == 128


@pytest.mark.parametrize("value, expected", [(True, True), (False, False), (None, False)])
def test_explicit_sample_from_anchor_wins(tmp_path, value, expected):
    # mainline passes the value through; an explicit null packs as false
    cfg = load_config(write_cfg(tmp_path, dspark_config("DSparkSpeculator", speculators=True,
                                                        sample_from_anchor=value)))
    assert cfg.dspark.sample_from_anchor is expected


def test_markov_head_type_under_dflash_config_is_not_read_for_dspark(tmp_path):
    # DSparkModel reads markov_head_type from the (merged) top level only; Gemma4 reads both
    raw = {**dspark_config(), "dflash_config": {"target_layer_ids": [0, 1, 3], "mask_token_id": 500,
                                                "markov_head_type": "gated"}}
    assert load_config(write_cfg(tmp_path, raw)).dspark.markov_head_type == "vanilla"


def test_markov_head_type_from_the_speculators_backbone_is_refused(tmp_path):
    raw = dspark_config("DSparkSpeculator", speculators=True)
    raw["transformer_layer_config"]["markov_head_type"] = "gated"
    with pytest.raises(ConfigError, match="unsupported markov_head_type 'gated'"):
        load_config(write_cfg(tmp_path, raw))


def test_missing_mask_id_is_a_warning_for_dspark_only(tmp_path):
    raw = dspark_config("DSparkSpeculator", speculators=True)
    del raw["mask_token_id"]
    (tmp_path / "a").mkdir()
    cfg = load_config(write_cfg(tmp_path / "a", raw))
    assert cfg.mask_token_id is None and any("mask_token_id is missing" in w for w in cfg.warnings)
    plain = {**dspark_config(), "architectures": ["DFlashDraftModel"]}
    del plain["mask_token_id"]
    (tmp_path / "b").mkdir()
    with pytest.raises(ConfigError, match="mask_token_id"):
        load_config(write_cfg(tmp_path / "b", plain))


def test_gemma4_layout_and_default_rope(tmp_path):
    raw = gemma4_config()
    del raw["rope_parameters"]
    cfg = load_config(write_cfg(tmp_path, raw))
    g = cfg.dspark.gemma4_layout
    assert cfg.family == "gemma4-dspark" and cfg.dspark.sample_from_anchor
    assert (g.global_head_dim, g.num_global_key_value_heads, g.rope_type, g.rotary_fraction) == (32, 1, "proportional",
                                                                                                0.25)
    assert cfg.rope_theta == 1e6  # Gemma 4's default, not a top-level rope_theta


def test_gemma4_flat_rope_takes_the_top_level_type_and_fraction(tmp_path):
    raw = gemma4_config(rope_parameters={"type": "proportional", "rope_theta": 5e5}, partial_rotary_factor=0.5)
    g = load_config(write_cfg(tmp_path, raw)).dspark.gemma4_layout
    assert (g.rope_type, g.rotary_fraction) == ("proportional", 0.5)


@pytest.mark.parametrize("over, says", [
    ({"global_head_dim": None}, "required key global_head_dim is missing"),
    ({"dflash_config": {"mask_token_id": 500, "target_layer_ids": [0, 1, 3], "use_swa": True}},
     "dflash_config.use_swa is true but dflash_config.swa_window_size is missing"),
    ({"rope_parameters": {"full_attention": {"rope_type": "proportional", "rope_theta": 1e6,
                                             "partial_rotary_factor": "x"}}},
     "Gemma4 DSpark partial_rotary_factor must be numeric"),
])
def test_gemma4_refusals_mainline_crashes_on(tmp_path, over, says):
    # mainline raises KeyError / TypeError here; we say what is missing or wrong
    with pytest.raises(ConfigError, match=says):
        load_config(write_cfg(tmp_path, gemma4_config(**over)))


def test_speculators_layer_without_rope_theta_runs_with_its_class_default(tmp_path):
    # transformers' Qwen3Config default (10000); mainline writes no rope.freq_base for it and its
    # runtime's default is the same, so we write none either (the published RedHat export is such a file)
    raw = dspark_config("DSparkSpeculator", speculators=True)
    del raw["transformer_layer_config"]["rope_theta"]
    cfg = load_config(write_cfg(tmp_path, raw))
    assert cfg.rope_theta == 10000.0 and not cfg.rope_theta_in_config
    assert any("rope_theta is not in config.json" in w for w in cfg.warnings)
    from dflash_gguf.formats import meta_from_config
    hp = {s for s, *_ in meta_from_config(cfg, n_target_features=3 * cfg.hidden_size).hparams}
    assert "rope.freq_base" not in hp and "attention.layer_norm_rms_epsilon" in hp


def test_speculators_layer_of_unknown_type_without_rope_theta_is_refused(tmp_path):
    raw = dspark_config("DSparkSpeculator", speculators=True)
    del raw["transformer_layer_config"]["rope_theta"]
    raw["transformer_layer_config"]["model_type"] = "llama"
    with pytest.raises(ConfigError, match="names no rope_theta and its model_type 'llama'"):
        load_config(write_cfg(tmp_path, raw))


def test_mlx_knobs_default_to_mlx_dspark(tmp_path):
    raw = dspark_config()
    del raw["markov_rank"]
    m = load_config(write_cfg(tmp_path, raw)).dspark.mlx
    assert m.markov_rank is None and m.built_markov_rank == 256
    assert (m.confidence_head, m.confidence_head_with_markov, m.has_lm_head) == (True, True, True)
    assert not (m.query_causal or m.sliding_window_non_causal or m.attention_sink_bias or m.qwen35_gated_q_proj
                or m.log_snr_conditioning)


def test_mlx_head_knobs_top_level_then_dflash_config(tmp_path):
    # top level wins; dflash_config fills in what the top level leaves out (or sets null)
    raw = dspark_config(markov_rank=None, enable_confidence_head=False, has_lm_head=None)
    raw["dflash_config"] = {"target_layer_ids": [0, 1, 3], "mask_token_id": 500, "markov_rank": 16,
                            "enable_confidence_head": True, "has_lm_head": False,
                            "confidence_head_with_markov": False}
    c = load_config(write_cfg(tmp_path, raw))
    m = c.dspark.mlx
    assert m.markov_rank == 16 and m.built_markov_rank == 16
    assert c.dspark.markov_rank is None  # mainline reads the top level only: the tensors decide
    assert (m.confidence_head, m.has_lm_head, m.confidence_head_with_markov) == (False, False, False)


def test_mlx_attention_and_backbone_knobs_are_top_level_only(tmp_path):
    raw = dspark_config(dflash_query_causal=True, sliding_window_non_causal=True, attention_sink_bias=True,
                        enable_qwen35_gated_q_proj=True, log_snr_conditioning=True)
    m = load_config(write_cfg(tmp_path, raw)).dspark.mlx
    assert m.query_causal and m.sliding_window_non_causal and m.attention_sink_bias
    assert m.qwen35_gated_q_proj and m.log_snr_conditioning
    nested = dspark_config()
    nested["dflash_config"] = {"target_layer_ids": [0, 1, 3], "mask_token_id": 500, "dflash_query_causal": True,
                               "log_snr_conditioning": True}
    m = load_config(write_cfg(tmp_path, nested)).dspark.mlx
    assert not m.query_causal and not m.log_snr_conditioning


@pytest.mark.parametrize("over,needle", [
    ({"enable_confidence_head": 1}, "enable_confidence_head must be true or false, got 1"),
    ({"dflash_query_causal": "yes"}, "dflash_query_causal must be true or false"),
    ({"log_snr_conditioning": 0}, "log_snr_conditioning must be true or false"),
    ({"dflash_config": {"target_layer_ids": [0, 1, 3], "mask_token_id": 500, "has_lm_head": "no"}},
     "dflash_config.has_lm_head must be true or false"),
    ({"markov_rank": None, "dflash_config": {"target_layer_ids": [0, 1, 3], "mask_token_id": 500,
                                             "markov_rank": "8"}}, "dflash_config.markov_rank must be an integer"),
    ({"markov_rank": None, "dflash_config": {"target_layer_ids": [0, 1, 3], "mask_token_id": 500,
                                             "markov_rank": -1}}, r"dflash_config.markov_rank = -1 is out of range"),
])
def test_mlx_knobs_wrong_types(tmp_path, over, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(write_cfg(tmp_path, dspark_config(**over)))
