"""The header-only, cached llama.cpp reference (tests/convert/llamacpp_reference.py): it must
write exactly the header a full run writes, hit its cache, and its comparison must catch each
kind of difference. Plus the multi-GB case it exists for: a sparse 5 GB drafter."""
import json
import logging
import math
import os
import shutil
import struct
from pathlib import Path

import pytest
from gguf import GGUFValueType

from dflash_gguf.fileio.gguf_header import read_header
from tests.conftest import DRAFTERS, TARGETS, rewrite_gguf
from tests.convert import llamacpp_reference as ref
from tests.convert.llamacpp_reference import (Job, assert_same_summary, cache_key, general_diff, gguf_summary, llama_load,
                                              model_card_keys, reference_header, reference_headers,
                                              run_converter, summary_diff)

FIXTURE_DRAFTERS = ["qwen3-flat", "qwen3-nested", "gemma-style", "qwen3-dflash2"]
# qwen3-flat as published: a descriptive directory name and a model card, from which the
# reference derives authorship keys
CARD = "Qwen3-8B-DFlash-b16"
README = """---
license: mit
base_model: Qwen/Qwen3-8B
tags:
- dflash
---
# Qwen3-8B-DFlash-b16
"""


def need_src() -> Path:
    src = ref.llama_src()
    if src is None:
        pytest.skip("llama.cpp sources not found: set DFLASH_LLAMA_CPP_SRC (make test downloads them)")
    for mod in ("torch", "sentencepiece", "transformers"):
        pytest.importorskip(mod)
    return src


def spm_target(d: Path, layers: int, hidden: int | None = None) -> Path:
    """The SentencePiece fixture target with ``layers`` (and ``hidden``) in config.json only:
    converters read the target's config and tokenizer, never its weights (left out)."""
    shutil.copytree(TARGETS / "llama-tiny", d, ignore=shutil.ignore_patterns("*.safetensors"))
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_hidden_layers"] = layers
    if hidden:
        cfg["hidden_size"] = hidden
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def fixture_job(tmp: Path, name: str) -> Job:
    drafter = DRAFTERS / name
    if name == CARD:
        drafter = tmp / CARD
        shutil.copytree(DRAFTERS / "qwen3-flat", drafter)
        (drafter / "README.md").write_text(README)
    depth = json.loads((drafter / "config.json").read_text())["num_target_layers"]
    return Job(drafter, spm_target(tmp / f"target-{name}", depth))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every fixture drafter converted twice by the vendored converter, header-only and normally
    (one process: the imports dominate)."""
    src = need_src()
    tmp = tmp_path_factory.mktemp("llamacpp-ref")
    names = [*FIXTURE_DRAFTERS, CARD]
    jobs = [fixture_job(tmp, n) for n in names]
    header_only = [tmp / f"header-only-{n}.gguf" for n in names]
    full = [tmp / f"full-{n}.gguf" for n in names]
    run_converter(jobs + jobs, header_only + full, header_only=[True] * len(jobs) + [False] * len(jobs), src=src)
    return {"jobs": jobs, "header_only": header_only, "full": full}


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(FIXTURE_DRAFTERS) + 1), ids=[*FIXTURE_DRAFTERS, CARD])
def test_header_only_run_writes_the_full_runs_header(runs, i):
    ho, full = runs["header_only"][i], runs["full"][i]
    h = read_header(full)
    assert h.tensors, "the full run wrote no tensors"
    ho_bytes, full_bytes = ho.read_bytes(), full.read_bytes()
    # Every byte before the data (KVs, tensor infos, padding) and the size are the same ...
    first = next((i for i, (a, b) in enumerate(zip(ho_bytes[:h.data_offset], full_bytes)) if a != b), None)
    assert first is None, f"the header-only run's header differs from byte {first}"
    assert len(ho_bytes) == len(full_bytes), "file sizes differ"
    # ... and the header-only run wrote no tensor data (the full run did).
    assert not any(ho_bytes[h.data_offset:])
    assert any(full_bytes[h.data_offset:])
    assert gguf_summary(ho) == gguf_summary(full)


@pytest.mark.slow
def test_a_published_name_and_card_give_mainlines_general_keys(runs, cli, tmp_path):
    """A Hub-style directory name and model card: every key, general.* in mainline's order."""
    job, ref_path = runs["jobs"][-1], runs["header_only"][-1]
    ours = tmp_path / "ours.gguf"
    assert cli("convert", job.drafter, "--target-dir", job.target, "-o", ours)[0] == 0
    ref_summary = gguf_summary(ref_path)
    assert {"general.basename", "general.finetune", "general.license", "general.tags", "general.base_model.count",
            "general.base_model.0.name"} <= model_card_keys(ref_summary)
    assert_same_summary(gguf_summary(ours), ref_summary)
    assert general_diff(gguf_summary(ours), ref_summary) == []


def fake_src(tmp_path: Path) -> Path:
    """Enough of a llama.cpp tree for cache keys (the converter's code is hashed, not run)."""
    src = tmp_path / "llama.cpp"
    (src / "conversion").mkdir(parents=True)
    (src / "convert_hf_to_gguf.py").write_text("# stand-in\n")
    return src


def test_misses_run_once_then_hit(ours, tmp_path, monkeypatch, caplog):
    """A miss runs the converter (a stand-in here, writing our GGUF) once for all missing jobs
    and caches the summaries; the second call runs nothing and returns the same summaries."""
    src, calls = fake_src(tmp_path), []

    def stand_in(jobs, outs, *, header_only, src):
        assert header_only is True
        calls.append([j.drafter.name for j in jobs])
        for out in outs:
            shutil.copyfile(ours, out)
    monkeypatch.setattr(ref, "run_converter", stand_in)
    jobs = [Job(DRAFTERS / n, TARGETS / "llama-tiny") for n in ("qwen3-flat", "gemma-style", "qwen3-flat")]
    cache = tmp_path / "cache"
    with caplog.at_level(logging.INFO, logger=ref.__name__):
        first = reference_headers(jobs, src=src, cache_dir=cache)
        assert calls == [["qwen3-flat", "gemma-style"]]  # a job listed twice runs once
        assert first == [gguf_summary(ours)] * 3
        assert len(list(cache.glob("*.json"))) == 2
        caplog.clear()
        again = reference_headers(jobs, src=src, cache_dir=cache)
    assert calls == [["qwen3-flat", "gemma-style"]] and again == first
    assert [r.message.split(":")[0] for r in caplog.records] == ["reference cache hit"] * 2
    # A changed input misses again (and only that job runs).
    reference_headers([Job(DRAFTERS / "qwen3-flat", TARGETS / "llama-tiny", "f16")], src=src, cache_dir=cache)
    assert calls[-1] == ["qwen3-flat"] and len(calls) == 2


def test_cache_key_follows_what_the_converter_reads(tmp_path):
    src = fake_src(tmp_path)
    drafter = tmp_path / "drafter"
    shutil.copytree(DRAFTERS / "qwen3-flat", drafter)
    job = Job(drafter, spm_target(tmp_path / "target", 5))
    keys = {"start": cache_key(job, src)}
    assert cache_key(Job(drafter, job.target, "f16"), src) != keys["start"]
    st = drafter / "model.safetensors"
    blob = bytearray(st.read_bytes())
    blob[-1] ^= 0xFF
    st.write_bytes(blob)
    assert cache_key(job, src) == keys["start"]  # tensor bytes are not in the key: none is read

    def rename_a_tensor():
        st.write_bytes(bytes(blob).replace(b'"fc.weight"', b'"fc.weighs"', 1))
    edits = {
        "safetensors header": rename_a_tensor,
        "drafter config": lambda: (drafter / "config.json").write_text(
            (drafter / "config.json").read_text().replace('"block_size": 16', '"block_size": 8')),
        "side file": lambda: (drafter / "mask_embedding.pt").write_bytes(b"x"),
        "model card": lambda: (drafter / "README.md").write_text(README),
        "target file": lambda: (job.target / "tokenizer_config.json").write_text("{}"),
    }
    for what, edit in edits.items():
        edit()
        keys[what] = cache_key(job, src)
    assert len(set(keys.values())) == len(keys), keys
    # Dot-files are not read by the converter (a Hub download's .cache/): no new key.
    (drafter / ".cache").mkdir()
    (drafter / ".cache" / "x").write_text("y")
    assert cache_key(job, src) == keys["target file"]
    # The directory's name is read (mainline names the model after it): a new key.
    moved = drafter.rename(tmp_path / "Qwen3-8B-DFlash-b16")
    assert cache_key(Job(moved, job.target), src) != keys["target file"]


# --- comparing: each kind of difference is caught and named --------------------------

@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    from dflash_gguf.cli import main

    pytest.importorskip("tokenizers", reason="the target's tokenizer.json needs the [tokenizers] extra")
    out = tmp_path_factory.mktemp("ours") / "d.gguf"
    assert main(["convert", str(DRAFTERS / "qwen3-flat"), "--target-dir", str(TARGETS / "qwen3-tiny"), "-o", str(out)]) == 0
    return out


def diff_after(ours: Path, tmp_path: Path, **change) -> str:
    changed = rewrite_gguf(ours, tmp_path / "changed.gguf", **change)
    base = gguf_summary(rewrite_gguf(ours, tmp_path / "control.gguf"))
    assert_same_summary(gguf_summary(ours), base)  # the rewrite alone changes nothing
    with pytest.raises(AssertionError) as e:
        assert_same_summary(gguf_summary(changed), base)
    return str(e.value)


def test_catches_a_changed_kv_value(ours, tmp_path):
    msg = diff_after(ours, tmp_path, values={"dflash.block_size": 8})
    assert "dflash.block_size: 8 vs 16" in msg


def test_catches_a_changed_array_element(ours, tmp_path):
    tokens = list(gguf_summary(ours).kvs)
    vocab = next(v for k, _, v in tokens if k == "tokenizer.ggml.tokens")
    msg = diff_after(ours, tmp_path, values={"tokenizer.ggml.tokens": [*vocab[:7], "CHANGED", *vocab[8:]]})
    assert "tokenizer.ggml.tokens: element 7: 'CHANGED' vs" in msg


def test_catches_a_changed_kv_type(ours, tmp_path):
    msg = diff_after(ours, tmp_path, retype={"dflash.block_size": GGUFValueType.INT32})
    assert "dflash.block_size: type INT32 vs UINT32" in msg


def test_catches_a_missing_key_and_a_missing_tensor(ours, tmp_path):
    msg = diff_after(ours, tmp_path, drop=("dflash.target_layers",), drop_tensors=("blk.1.ffn_down.weight",))
    assert "KVs missing from ours: dflash.target_layers" in msg
    assert "tensors missing from ours: blk.1.ffn_down.weight" in msg


def test_catches_a_changed_shape(ours, tmp_path):
    msg = diff_after(ours, tmp_path, data={"blk.0.attn_q.weight": lambda a: a[: a.shape[0] // 2].copy()})
    assert "tensor blk.0.attn_q.weight: shape [64, 32] vs [64, 64]" in msg


def test_ignores_only_what_it_is_told(ours, tmp_path):
    renamed = gguf_summary(rewrite_gguf(ours, tmp_path / "n.gguf", values={"general.name": "other"}))
    assert summary_diff(renamed, gguf_summary(ours)) == ["general.name: 'other' vs 'Qwen3 Flat'"]
    assert general_diff(renamed, gguf_summary(ours))
    assert_same_summary(renamed, gguf_summary(ours), ignore={"general.name"})


# --- loading with real llama.cpp, cheaply -------------------------------------------------

@pytest.mark.slow
def test_cheap_load_keeps_the_loaders_checks(ours, tmp_path):
    """``llama_load`` (no_alloc, no mmap) says what the default load says, file by file."""
    pytest.importorskip("llama_cpp")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(ours.read_bytes()[:-1000])
    cases = {
        ours: "LOADED",
        rewrite_gguf(ours, tmp_path / "renamed.gguf", rename={"blk.0.attn_q.weight": "blk.0.attn_qq.weight"}): "FAILED",
        rewrite_gguf(ours, tmp_path / "missing.gguf", drop_tensors=("blk.1.ffn_down.weight",)): "FAILED",
        rewrite_gguf(ours, tmp_path / "shape.gguf", data={"blk.0.attn_q.weight": lambda a: a[:32].copy()}): "FAILED",
        truncated: "FAILED",
    }
    got = {p.name: (llama_load(p), llama_load(p, cheap=False)) for p in cases}
    assert got == {p.name: (want, want) for p, want in cases.items()}


def sparse_drafter(d: Path, layers: int = 5, hidden: int = 5120, inter: int = 25600, heads: int = 64, kv: int = 8,
                   hd: int = 128) -> int:
    """A DFlash drafter with Qwen3-32B-DFlash-like shapes (bf16, ~5.1 GB) whose safetensors is a
    header and a hole: real shapes, no bytes on disk. Vocabulary and mask id fit the 512-token
    SentencePiece fixture target. Returns the file size."""
    d.mkdir()
    t = {"fc.weight": (hidden, 5 * hidden), "hidden_norm.weight": (hidden,), "norm.weight": (hidden,)}
    for i in range(layers):
        p = f"layers.{i}."
        t.update({p + "input_layernorm.weight": (hidden,), p + "post_attention_layernorm.weight": (hidden,),
                  p + "self_attn.q_proj.weight": (heads * hd, hidden), p + "self_attn.k_proj.weight": (kv * hd, hidden),
                  p + "self_attn.v_proj.weight": (kv * hd, hidden), p + "self_attn.o_proj.weight": (hidden, heads * hd),
                  p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
                  p + "mlp.gate_proj.weight": (inter, hidden), p + "mlp.up_proj.weight": (inter, hidden),
                  p + "mlp.down_proj.weight": (hidden, inter)})
    header, offset = {}, 0
    for name, shape in sorted(t.items()):
        n = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(d / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        f.truncate(8 + len(blob) + offset)
    cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": hidden,
           "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
           "num_key_value_heads": kv, "head_dim": hd, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
           "max_position_embeddings": 40960, "vocab_size": 512, "block_size": 16, "num_target_layers": 36,
           "dflash_config": {"mask_token_id": 500, "target_layer_ids": [1, 9, 17, 25, 33]}}
    (d / "config.json").write_text(json.dumps(cfg))
    return 8 + len(blob) + offset


def holes_supported(d: Path) -> bool:
    probe = d / "probe"
    with open(probe, "wb") as f:
        f.truncate(64 << 20)
    ok = os.stat(probe).st_blocks * 512 < 1 << 20
    probe.unlink()
    return ok


@pytest.mark.slow
def test_sparse_5gb_drafter_matches_reference_and_loads(cli, tmp_path):
    """The case the reference exists for: a multi-GB drafter converts in seconds into a sparse
    file, its header equals the vendored converter's (cached after the first run), and real
    llama.cpp loads it."""
    src = need_src()
    pytest.importorskip("llama_cpp")
    if not holes_supported(tmp_path):
        pytest.skip("this filesystem stores holes as data: a 5 GB drafter would be 5 GB on disk")
    drafter = tmp_path / "drafter"
    assert sparse_drafter(drafter) > 5_000_000_000
    target = spm_target(tmp_path / "target", 36, hidden=5120)
    out = tmp_path / "d.gguf"
    code, _, err = cli("convert", drafter, "--target-dir", target, "-o", out)
    assert code == 0, err
    assert out.stat().st_size > 5_000_000_000
    assert os.stat(out).st_blocks * 512 < 1 << 20  # zeros went out as holes
    assert_same_summary(gguf_summary(out), reference_header(drafter, target, src=src))
    assert llama_load(out) == "LOADED"
