"""Every published drafter config in fixtures/published/ (real sizes, sparse weights, real target
vocabularies) converts to the same GGUF header as llama.cpp's own converter, through
--target-dir and --target-gguf alike, and real llama.cpp loads the result.

Costs: our side writes sparse files (holes), the reference is header-only and cached under
.cache/reference-conversions/, the real vocabularies under .cache/real-vocab/ (see their
modules). A cold run is dominated by the converter's vocab building (minutes on 2 cores).
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from tests.convert.llamacpp_reference import (IGNORED, Job, assert_same_summary, gguf_summary, llama_load, llama_src,
                                              model_card_keys, reference_headers)
from tests.convert.published import load_index, sparse_checkpoint

pytestmark = pytest.mark.slow

ENTRIES = load_index()
RUNNABLE = [e for e in ENTRIES if e["expected_by_mainline"] == "converts" or "mask_embedding" in e["expected_by_mainline"]]


def _vocab_module():
    try:
        from tests.target import real_vocab
    except ImportError:  # pragma: no cover - the helper module ships with the suite
        pytest.skip("tests.target.real_vocab is missing")
    return real_vocab


def _sparse_target_weights(d: Path, cfg: dict) -> None:
    """The target tables a mask_embedding.pt drafter borrows, as a sparse BF16 safetensors."""
    text = cfg.get("text_config", cfg)
    vocab, hidden = text["vocab_size"], text["hidden_size"]
    names = ["model.embed_tokens.weight"] + ([] if text.get("tie_word_embeddings", cfg.get("tie_word_embeddings"))
                                             else ["lm_head.weight"])
    n = vocab * hidden * 2
    header = {name: {"dtype": "BF16", "shape": [vocab, hidden], "data_offsets": [i * n, (i + 1) * n]}
              for i, name in enumerate(names)}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(d / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + n * len(names))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """slug -> (drafter dir, target dir, target GGUF, reference summary); built once, the
    reference conversions in one converter process."""
    src = llama_src()
    if src is None:
        pytest.skip("llama.cpp sources not found: set DFLASH_LLAMA_CPP_SRC (make test downloads them)")
    pytest.importorskip("transformers")
    rv = _vocab_module()
    root = tmp_path_factory.mktemp("published")
    built, skipped = {}, {}
    for e in RUNNABLE:
        if e["target_vocab"] not in rv.VOCABS:
            skipped[e["slug"]] = f"no real {e['target_vocab']} vocabulary ships in a registry package"
            continue
        d = root / e["slug"]
        sparse_checkpoint(e["slug"], d / "drafter")
        tcfg = json.loads((Path(__file__).parents[2] / "fixtures/published" / e["slug"] / "target_config.json").read_text())
        try:
            target = rv.real_target_dir(e["target_vocab"], tcfg, d / "target")
        except pytest.skip.Exception as exc:  # this vocabulary's source is absent here; the others still run
            skipped[e["slug"]] = str(exc)
            continue
        if "mask_embedding.pt" in e["side_files"]:
            _sparse_target_weights(target, tcfg)
        built[e["slug"]] = (d / "drafter", target)
    jobs = [Job(dr, t) for dr, t in built.values()]
    refs = reference_headers(jobs, src=src)
    ggufs = {slug: rv.real_target_gguf(t, root / slug / "target.gguf") for slug, (_, t) in built.items()}
    return {slug: (dr, t, ggufs[slug], ref) for (slug, (dr, t)), ref in zip(built.items(), refs)}, skipped


@pytest.mark.parametrize("path", ["target-dir", "target-gguf"])
@pytest.mark.parametrize("slug", [e["slug"] for e in RUNNABLE])
def test_published_drafter_converts_like_llama_cpp(cli, tmp_path, corpus, slug, path):
    built, skipped = corpus
    if slug in skipped:
        pytest.skip(skipped[slug])
    drafter, target_dir, target_gguf, ref = built[slug]
    out = tmp_path / "ours.gguf"
    opt = ["--target-dir", target_dir] if path == "target-dir" else ["--target-gguf", target_gguf]
    code, _, err = cli("convert", drafter, *opt, "-o", out)
    assert code == 0, err
    # model-card keys (basename, finetune, tags, ...) the reference derives from the directory name:
    # authorship metadata that no llama.cpp loader reads (see llamacpp_reference.model_card_keys)
    assert_same_summary(gguf_summary(out), ref, ignore=IGNORED | model_card_keys(ref))
    if path == "target-dir":
        assert llama_load(out) == "LOADED"


def test_corpus_covers_the_families():
    """The corpus is the claim's denominator: every family the issue names has an entry."""
    families = {e["family"] for e in ENTRIES}
    assert {"dflash1", "dflash2", "mimo", "dspark", "gemma4-dspark"} <= families
