"""Every published drafter config in fixtures/published/ (real sizes, sparse weights, real target
vocabularies) converts to the same GGUF header as llama.cpp's own converter, through
--target-dir and --target-gguf alike, and real llama.cpp loads the result.

Costs: our side writes sparse files (holes); the reference headers are committed, digested, beside
each entry (``reference_golden``; a stale one is converted live, header-only, and cached under
.cache/reference-conversions/); the real vocabularies and the target GGUFs llama.cpp's converter
writes for them are built under .cache/real-vocab/ (see ``tests.target.real_vocab``).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.convert.llamacpp_reference import (IGNORED, Job, Summary, assert_same_summary, general_diff, gguf_summary,
                                              llama_load, llama_src, reference_headers, summary_gguf)
from tests.convert.reference_golden import GOLDEN_NAME, digested, golden_headers
from tests.convert.published import load_index, sparse_checkpoint, sparse_float_target_gguf, sparse_target_weights

pytestmark = pytest.mark.slow

ENTRIES = load_index()
BY_SLUG = {e["slug"]: e for e in ENTRIES}
FIXTURES = Path(__file__).parents[2] / "fixtures" / "published"
RUNNABLE = [e for e in ENTRIES if e["expected_by_mainline"] == "converts" or "mask_embedding" in e["expected_by_mainline"]]
# mainline flags that pick a family's model class: a DeepSeek-V4 checkpoint is the whole model
# (DeepseekV4Model) unless --dspark asks for the draft its mtp.* stages carry
FAMILY_FLAGS = {"dsv4-dspark": ("--dspark",)}


def _vocab_module():
    try:
        from tests.target import real_vocab
    except ImportError:  # pragma: no cover - the helper module ships with the suite
        pytest.skip("tests.target.real_vocab is missing")
    return real_vocab


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
        # named as a Hub download is (huggingface-cli download REPO --local-dir NAME): mainline
        # reads the name for general.name, basename, finetune and size label
        drafter = d / e["drafter"].split("/")[-1]
        sparse_checkpoint(e["slug"], drafter)
        tcfg = json.loads((FIXTURES / e["slug"] / "target_config.json").read_text())
        try:
            target = rv.real_target_dir(e["target_vocab"], tcfg, d / "target")
        except pytest.skip.Exception as exc:  # this vocabulary's source is absent here; the others still run
            skipped[e["slug"]] = str(exc)
            continue
        sparse_target_weights(e["slug"], target)
        built[e["slug"]] = (drafter, target)
    jobs = [Job(dr, t, extra=FAMILY_FLAGS.get(BY_SLUG[slug]["family"], ())) for slug, (dr, t) in built.items()]
    refs = golden_headers(jobs, [FIXTURES / slug / GOLDEN_NAME for slug in built], src=src)
    ggufs = {}
    for slug, (_, t) in built.items():  # one target's failure is that entry's, not the corpus's
        try:
            ggufs[slug] = rv.real_target_gguf(t, root / slug / "target-vocab.gguf")
            if (t / "model.safetensors").is_file():  # the drafter borrows tables: a float target GGUF
                ggufs[slug] = sparse_float_target_gguf(slug, ggufs[slug], root / slug / "target.gguf")
        except RuntimeError as exc:
            ggufs[slug] = exc
    return {slug: (dr, t, ggufs[slug], ref) for (slug, (dr, t)), ref in zip(built.items(), refs)}, skipped


@pytest.mark.parametrize("path", ["target-dir", "target-gguf"])
@pytest.mark.parametrize("slug", [e["slug"] for e in RUNNABLE])
def test_published_drafter_converts_like_llama_cpp(cli, tmp_path, corpus, slug, path):
    built, skipped = corpus
    if slug in skipped:
        pytest.skip(skipped[slug])
    drafter, target_dir, target_gguf, ref = built[slug]
    if isinstance(target_gguf, Exception):
        raise target_gguf
    out = tmp_path / "ours.gguf"
    opt = ["--target-dir", target_dir] if path == "target-dir" else ["--target-gguf", target_gguf]
    code, _, err = cli("convert", drafter, *opt, "-o", out)
    refusal = BY_SLUG[slug].get("ours", {}).get("refuses")
    if refusal:
        # we refuse where mainline writes a file its own runtime cannot load: show both halves
        assert code != 0 and refusal in err and not out.exists(), err
        job = Job(drafter, target_dir, extra=FAMILY_FLAGS.get(BY_SLUG[slug]["family"], ()))
        full = reference_headers([job], src=llama_src())[0]  # live: the whole header
        assert digested(full) == ref
        assert llama_load(summary_gguf(full, tmp_path / "mainline.gguf")) == "FAILED"
        return
    assert code == 0, err
    ours = digested(gguf_summary(out))
    omits = BY_SLUG[slug].get("ours", {}).get("target_dir_omits", []) if path == "target-dir" else []
    if omits:
        # keys mainline takes from llama.cpp's own files, not from the target dir (a DeepSeek-V4
        # chat template from models/templates/): exactly these are absent from ours, nothing else differs
        assert [k for k, _, _ in ref.kvs if k in omits] == omits, omits
        assert not [k for k, _, _ in ours.kvs if k in omits]
        ref = Summary(tuple(kv for kv in ref.kvs if kv[0] not in omits), ref.tensors)
    # every key, the model card's general.* ones (README.md) too, and those in mainline's order
    assert_same_summary(ours, ref)
    assert general_diff(ours, ref) == []
    if BY_SLUG[slug]["family"] == "dsv4-dspark":  # and every KV and tensor in mainline's order
        assert [k for k, _, _ in ours.kvs if k not in IGNORED] == [k for k, _, _ in ref.kvs]
        assert ours.tensors == ref.tensors
    if path == "target-dir":
        assert llama_load(out) == "LOADED"


def test_every_entry_has_a_model_card():
    """Each entry ships its publisher's README.md front matter, copied into the sparse checkpoint."""
    for e in ENTRIES:
        card = (FIXTURES / e["slug"] / "README.md").read_text(encoding="utf-8")
        assert card.startswith("---\n") and "\nbase_model:\n" in card and "\nlicense: " in card, e["slug"]


def test_corpus_covers_the_families():
    """The corpus is the claim's denominator: every family in FAMILIES has an entry."""
    families = {e["family"] for e in ENTRIES}
    assert {"dflash1", "dflash2", "mimo", "dspark", "gemma4-dspark"} <= families
