"""Shared helpers for the target tests: tiny target dirs built from the committed tokenizer
fixtures, GGUF tokenizer-field readers, and the llama.cpp converter golden run.

The golden fixture runs llama.cpp's ``convert_hf_to_gguf.py`` in DFlash mode (a drafter config
+ ``--target-model-dir``, ``--vocab-only``: no weights needed) — the exact code path whose
output the drafter GGUF must reproduce. Point ``DFLASH_LLAMA_CPP_SRC`` at a llama.cpp source
tree (CI: ``vendor/llama.cpp`` of the llama-cpp-python 0.3.36 sdist); tests using it skip without it.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType as T

from dflash_gguf.fileio.gguf_writer import TensorOut
from dflash_gguf.fileio.types import KV
from dflash_gguf.target.info import drafter_tokenizer_kvs, target_from_hf_dir
from dflash_gguf.target.pretokenizer import _FAMILIES
from tests.conftest import TARGETS, llama_cpp_src
from tests.llamacpp_converter import ConverterRun, log_tail, run_jobs

QWEN_TOK = TARGETS / "qwen3-tiny"
LLAMA_TOK = TARGETS / "llama-tiny"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
VOCAB = 512


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# The GGUF-copy tests need only gguf; rebuilding from a HF dir needs the [tokenizers] extra.
needs_libs = pytest.mark.skipif(not (_have("tokenizers") and _have("sentencepiece")),
                                reason="needs the [tokenizers] extra (tokenizers, sentencepiece)")


def qwen_config(**over) -> dict:
    cfg = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": VOCAB, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "bos_token_id": 400, "eos_token_id": 402,
        "tie_word_embeddings": False,
    }
    cfg.update(over)
    return cfg


def llama_config(**over) -> dict:
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": VOCAB, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "bos_token_id": 1, "eos_token_id": 2,
        "tie_word_embeddings": False,
    }
    cfg.update(over)
    return cfg


def drafter_raw(mask: int, **over) -> dict:
    raw = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": VOCAB, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "block_size": 16, "num_target_layers": 4,
        "dflash_config": {"mask_token_id": mask, "target_layer_ids": [1, 2]},
        "tie_word_embeddings": False,
    }
    raw.update(over)
    return raw


def make_target(dst: Path, src: Path, config: dict) -> Path:
    dst.mkdir(parents=True)
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy(src / name, dst / name)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False), encoding="utf-8")


def read_tokenizer_kvs(path: Path) -> list[tuple]:
    """Every tokenizer.* field of a GGUF as (key, type, sub_type, value), in file order."""
    out = []
    for name, f in GGUFReader(path).fields.items():
        if not name.startswith("tokenizer."):
            continue
        if f.types[0] == T.ARRAY:
            sub = f.types[-1]
            if sub == T.STRING:
                value = [bytes(f.parts[i].tobytes()) for i in f.data]
            else:
                value = [f.parts[i].tolist()[0] for i in f.data]
            out.append((name, T.ARRAY, sub, value))
        elif f.types[0] == T.STRING:
            out.append((name, T.STRING, None, bytes(f.parts[-1].tobytes())))
        else:
            out.append((name, f.types[0], None, f.parts[-1].tolist()[0]))
    return out


def as_file_values(kvs: list[KV]) -> list[tuple]:
    """Our KVs the way they land in a GGUF (strings as UTF-8 bytes, floats as float32)."""
    def b(x):
        return x if isinstance(x, bytes) else str(x).encode("utf-8")

    out = []
    for kv in kvs:
        v = kv.value
        if kv.type == T.ARRAY and kv.sub_type == T.STRING:
            v = [b(x) for x in v]
        elif kv.type == T.ARRAY and kv.sub_type == T.FLOAT32:
            v = [float(np.float32(x)) for x in v]
        elif kv.type == T.ARRAY and kv.sub_type == T.BOOL:
            v = [bool(x) for x in v]
        elif kv.type == T.STRING:
            v = b(v)
        elif kv.type == T.FLOAT32:
            v = float(np.float32(v))
        elif kv.type == T.BOOL:
            v = bool(v)
        out.append((kv.key, kv.type, kv.sub_type, v))
    return out


def tiny_tensor() -> list[TensorOut]:
    return [TensorOut("output_norm.weight", (4,), GGMLQuantizationType.F32, 16, lambda: np.ones(4, np.float32))]


def to_llama3_style(d: Path) -> None:
    """Turn the Qwen fixture into a Llama-3-shaped tokenizer: Llama-3 regex, ignore_merges,
    no normalizer, TemplateProcessing that prepends the bos, PreTrainedTokenizerFast config."""
    tj = json.loads((d / "tokenizer.json").read_text(encoding="utf-8"))
    regex = next(f.split_regex for f in _FAMILIES if f.name == "llama-bpe")
    tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = regex
    tj["model"]["ignore_merges"] = True
    tj["normalizer"] = None
    bos = {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}
    tj["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<|endoftext|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [400], "tokens": ["<|endoftext|>"]}},
    }
    write_json(d / "tokenizer.json", tj)
    tc = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    for k in ("add_bos_token", "add_prefix_space", "pad_token", "errors", "split_special_tokens"):
        tc.pop(k, None)
    tc.update(bos_token="<|endoftext|>", clean_up_tokenization_spaces=True, tokenizer_class="PreTrainedTokenizerFast")
    write_json(d / "tokenizer_config.json", tc)


# --- llama.cpp: its converter and its ggml-vocab-*.gguf test files --------------------------

def _spm_json_variant(d: Path) -> None:
    """Llama-2-like extras llama.cpp reads next to tokenizer.model: a tokenizer.json with
    added_tokens and a TemplateProcessing post-processor (add_bos/add_sep come from it),
    add_prefix_space in tokenizer_config.json, an added_tokens.json entry."""
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, c in ((0, "<unk>"), (1, "<s>"), (2, "</s>"))]
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    write_json(d / "tokenizer.json", {
        "version": "1.0", "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                          {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "model": {"type": "BPE", "byte_fallback": True, "vocab": {}, "merges": []},
    })
    tc = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    tc["add_prefix_space"] = True
    # A user-defined token spelled with U+2581: llama.cpp stores it with a plain space.
    tc["added_tokens_decoder"]["387"] = {"content": "<user\u2581tok>", "lstrip": False, "normalized": False,
                                         "rstrip": False, "single_word": False, "special": False}
    write_json(d / "tokenizer_config.json", tc)
    write_json(d / "added_tokens.json", {"<extra_\u2581tok>": 386})


@pytest.fixture(scope="session")
def golden(tmp_path_factory):
    """{case: (our KVs, llama.cpp's tokenizer KVs, ids transformers gave for CHKTXT or None, target dir)}.
    Session-scoped: the converter run takes a while and two test modules compare against it."""
    src = llama_cpp_src()
    if src is None:
        pytest.skip("llama.cpp source not found: set DFLASH_LLAMA_CPP_SRC to vendor/llama.cpp of the llama-cpp-python 0.3.36 sdist")
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    pytest.importorskip("sentencepiece")
    tmp = tmp_path_factory.mktemp("golden")
    mask = 407
    cases = {
        "spm": (make_target(tmp / "spm", LLAMA_TOK, llama_config()), None),
        "spm-json": (make_target(tmp / "spm-json", LLAMA_TOK, llama_config(pad_token_id=0)), None),
        "bpe-qwen3": (make_target(tmp / "bpe-qwen3", QWEN_TOK, qwen_config()), "qwen2"),
        "bpe-llama3": (make_target(tmp / "bpe-llama3", QWEN_TOK, llama_config(bos_token_id=400, eos_token_id=402)), "llama-bpe"),
    }
    _spm_json_variant(cases["spm-json"][0])
    to_llama3_style(cases["bpe-llama3"][0])
    drafter = tmp / "drafter"
    drafter.mkdir()
    (drafter / "config.json").write_text(json.dumps(drafter_raw(mask)))
    runs = [ConverterRun((str(drafter), "--target-model-dir", str(tdir), "--outfile", str(tmp / f"{name}.gguf"),
                          "--outtype", "f32", "--vocab-only"), tmp / f"{name}.log", pre=pre, chk_ids=tmp / f"{name}.ids.json")
            for name, (tdir, pre) in cases.items()]
    for run, code in zip(runs, run_jobs(runs, src)):
        assert code == 0, log_tail(run, 4000)
    out = {}
    for name, (tdir, _) in cases.items():
        ours = drafter_tokenizer_kvs(target_from_hf_dir(tdir), mask)
        ids_path = tmp / f"{name}.ids.json"
        ids = json.loads(ids_path.read_text()) if ids_path.is_file() else None
        out[name] = (ours, read_tokenizer_kvs(tmp / f"{name}.gguf"), ids, tdir)
    return out


def llama_cpp_vocab_file(name: str) -> Path:
    src = llama_cpp_src()
    path = None if src is None else src / "models" / f"ggml-vocab-{name}.gguf"
    if path is None or not path.is_file():
        pytest.skip("llama.cpp's models/ggml-vocab-*.gguf not found (set DFLASH_LLAMA_CPP_SRC)")
    return path
