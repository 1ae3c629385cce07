"""Ground truth from real llama.cpp (llama-cpp-python 0.3.36, which vendors mainline llama.cpp):
its own converter must write what we write, and its loader must accept what we write."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gguf import GGUFReader

from tests.conftest import DRAFTERS, TARGETS, llama_cpp_src, rewrite_gguf
from tests.convert.llamacpp_reference import IGNORED as REFERENCE_IGNORED
from tests.convert.llamacpp_reference import llama_load

pytestmark = pytest.mark.slow
# Only our writer's version key (llamacpp_reference.IGNORED); general.* too: name, size label and
# type are mainline's (convert.metadata)
IGNORED: frozenset[str] = REFERENCE_IGNORED


def llama_src() -> Path:
    """The vendored sources, or skip (they, torch, sentencepiece or transformers are missing)."""
    src = llama_cpp_src()
    if src is None:
        pytest.skip("llama.cpp sources not found: set DFLASH_LLAMA_CPP_SRC (make test downloads them)")
    pytest.importorskip("torch")
    pytest.importorskip("sentencepiece")
    pytest.importorskip("transformers")
    return src


def spm_target(tmp_path: Path, layers: int = 5, mrope: bool = False) -> Path:
    """The SentencePiece fixture target, deepened to `layers` in config.json only (converters
    read the target's config and tokenizer, not its weights); ``mrope`` gives it Qwen3.5-style
    multimodal RoPE sections under ``text_config.rope_parameters``."""
    d = tmp_path / "target"
    shutil.copytree(TARGETS / "llama-tiny", d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_hidden_layers"] = layers
    if mrope:
        cfg["text_config"] = {**cfg, "rope_parameters": {"rope_type": "default", "rope_theta": 1e7,
                                                         "mrope_section": [11, 11, 10], "mrope_interleaved": True}}
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def fields(path):
    r = GGUFReader(path)
    kv = {k: ([t.name for t in f.types], f.contents()) for k, f in r.fields.items()
          if not k.startswith("GGUF.") and k not in IGNORED}
    ts = {t.name: (t.tensor_type.name, [int(d) for d in t.shape], bytes(t.data.tobytes())) for t in r.tensors}
    return kv, ts


@pytest.mark.parametrize("drafter,mrope", [("qwen3-flat", False), ("qwen3-nested", False), ("gemma-style", False),
                                           ("qwen3-dflash2", False), ("qwen3-flat", True), ("qwen3-dflash2", True)])
def test_matches_llama_cpp_converter(cli, tmp_path, drafter, mrope):
    src = llama_src()
    depth = json.loads((DRAFTERS / drafter / "config.json").read_text())["num_target_layers"]
    target = spm_target(tmp_path, depth, mrope)
    ref = tmp_path / "ref.gguf"
    env = {**os.environ, "PYTHONPATH": str(src / "gguf-py")}
    r = subprocess.run([sys.executable, str(src / "convert_hf_to_gguf.py"), str(DRAFTERS / drafter),
                        "--target-model-dir", str(target), "--outfile", str(ref), "--outtype", "auto"],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    ours = tmp_path / "ours.gguf"
    code, _, se = cli("convert", DRAFTERS / drafter, "--target-dir", target, "-o", ours)
    assert code == 0, se
    ref_kv, ref_t = fields(ref)
    our_kv, our_t = fields(ours)
    assert our_kv.keys() == ref_kv.keys(), (sorted(our_kv.keys() - ref_kv.keys()), sorted(ref_kv.keys() - our_kv.keys()))
    for k in ref_kv:
        assert our_kv[k] == ref_kv[k], k
    assert our_t.keys() == ref_t.keys(), (sorted(our_t.keys() - ref_t.keys()), sorted(ref_t.keys() - our_t.keys()))
    for name in ref_t:
        assert our_t[name] == ref_t[name], name
    assert ("dflash.rope.dimension_sections" in ref_kv) is mrope  # the case this parameter is about


def load(path) -> str:
    """A default (full, mmap) load by real llama.cpp: "LOADED", "FAILED" or "CRASHED ..."."""
    pytest.importorskip("llama_cpp")
    return llama_load(path, cheap=False)


@pytest.mark.parametrize("drafter", ["qwen3-flat", "qwen3-nested", "qwen3-dflash2"])
def test_real_llama_cpp_loads_mainline_output(cli, tmp_path, drafter):
    out = tmp_path / "d.gguf"
    code, _, se = cli("convert", DRAFTERS / drafter, "--target-dir", TARGETS / "qwen3-tiny", "-o", out)
    assert code == 0, se
    assert load(out) == "LOADED"


def test_real_llama_cpp_rejects_wrong_names_keys_and_fork_formats(cli, tmp_path):
    """The loader is a real check: the same file rewritten untouched loads; a fork-format file,
    a missing required key or a renamed tensor each fail."""
    good = tmp_path / "d.gguf"
    assert cli("convert", DRAFTERS / "qwen3-flat", "--target-dir", TARGETS / "qwen3-tiny", "-o", good)[0] == 0
    assert load(rewrite_gguf(good, tmp_path / "control.gguf")) == "LOADED"
    fork = tmp_path / "fork.gguf"
    assert cli("retarget", good, "--format", "dflash-draft", "-o", fork)[0] == 0
    assert load(fork) == "FAILED"
    assert load(rewrite_gguf(good, tmp_path / "nokey.gguf", drop=("dflash.target_layers",))) == "FAILED"
    renamed = rewrite_gguf(good, tmp_path / "renamed.gguf", rename={"blk.0.attn_q.weight": "blk.0.attn_qq.weight"})
    assert load(renamed) == "FAILED"
