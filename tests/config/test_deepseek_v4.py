"""config/deepseek_v4.py: a DeepSeek-V4 checkpoint's config.json read for its DSpark draft, every
value typed and range-checked, every bad one a one-line ConfigError; which Hub shards hold the draft."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from dflash_gguf.config.deepseek_v4 import hub_files, is_dsv4_dspark, parse_dsv4_dspark
from dflash_gguf.errors import ConfigError
from tests.conftest import FIXTURES

PUBLISHED = FIXTURES / "published" / "deepseek-v4-flash-dspark" / "config.json"


def _raw() -> dict:
    return json.loads(PUBLISHED.read_text())


def test_the_published_config_reads_as_mainline_reads_it():
    cfg = parse_dsv4_dspark(_raw(), PUBLISHED)
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim, cfg.qk_rope_head_dim) == (4096, 64, 512, 64)
    assert (cfg.q_lora_rank, cfg.o_lora_rank, cfg.o_groups, cfg.hc_mult) == (1024, 1024, 8, 4)
    assert cfg.target_layer_ids == (40, 41, 42) and cfg.block_size == 5 and cfg.noise_token_id == 128799
    assert cfg.rope_yarn is not None and (cfg.rope_yarn.factor, cfg.rope_yarn.original_context_length) == (16, 65536)
    assert cfg.scoring_func == "sqrtsoftplus" and cfg.norm_topk_prob is True
    assert cfg.sources["block_size"] == "config.dspark_block_size"


def test_only_a_checkpoint_with_dspark_keys_is_a_draft():
    raw = _raw()
    assert is_dsv4_dspark(raw)
    plain = {k: v for k, v in raw.items() if not k.startswith("dspark_")}  # DeepSeek-V4-Flash: mtp.0 is NextN
    assert not is_dsv4_dspark(plain)
    assert not is_dsv4_dspark({**raw, "architectures": ["Qwen3ForCausalLM"]})
    assert not is_dsv4_dspark({**raw, "architectures": "DeepseekV4ForCausalLM"})


@pytest.mark.parametrize("change, words", [
    ({"hidden_size": None}, "hidden_size is missing"),
    ({"hidden_size": "4096"}, "hidden_size"),
    ({"dspark_target_layer_ids": []}, "non-empty list"),
    ({"dspark_target_layer_ids": [40, 41, 43]}, "past num_hidden_layers"),
    ({"dspark_target_layer_ids": [40, -1]}, "dspark_target_layer_ids[1]"),
    ({"dspark_noise_token_id": -5}, "dspark_noise_token_id"),
    ({"scoring_func": "relu"}, "scoring_func 'relu'"),
    ({"norm_topk_prob": "true"}, "norm_topk_prob must be true or false"),
    ({"rope_scaling": {"type": "linear", "factor": 2}}, "only YaRN"),
    ({"rope_scaling": {"type": "yarn", "factor": 16}}, "original_max_position_embeddings"),
    ({"rope_scaling": [1, 2]}, "rope_scaling must be an object"),
    ({"hc_eps": float("nan")}, "hc_eps"),
])
def test_bad_values_are_one_line(change, words):
    raw = {**_raw(), **change}
    raw = {k: v for k, v in raw.items() if v is not None}
    with pytest.raises(ConfigError) as exc:
        parse_dsv4_dspark(raw, PUBLISHED)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def _snapshot(d: Path, config: dict, weight_map: dict | None) -> Path:
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    if weight_map is not None:
        (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return d


def test_hub_files_are_the_draft_shards_or_none(tmp_path):
    wm = {"embed.weight": "model-00001-of-00046.safetensors", "mtp.0.main_proj.weight": "model-00045-of-00046.safetensors",
          "mtp.2.norm.weight": "model-00046-of-00046.safetensors", "mtp.1.attn_norm.weight": "model-00046-of-00046.safetensors"}
    assert hub_files(_snapshot(tmp_path / "a", _raw(), wm)) == ["model-00045-of-00046.safetensors",
                                                              "model-00046-of-00046.safetensors"]
    # any other checkpoint, or one that does not read: every shard (the conversion says what is wrong)
    plain = {k: v for k, v in _raw().items() if not k.startswith("dspark_")}
    assert hub_files(_snapshot(tmp_path / "b", plain, wm)) is None
    assert hub_files(_snapshot(tmp_path / "c", _raw(), None)) is None
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "config.json").write_text("{not json")
    assert hub_files(tmp_path / "d") is None
