"""general.* keys and output names as mainline's converter decides them (convert.metadata): model
card, directory name, --metadata, --model-name, the size label, {Name}-{Size}-{Type}.gguf."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dflash_gguf.convert.metadata import MetadataInputs, general_kvs, output_path, parameter_counts
from dflash_gguf.fileio.gguf_constants import GGUFValueType as T
from dflash_gguf.fileio.types import KV
from tests.conftest import DRAFTERS, FIXTURES, ROOT, RUNTIME
from tests.convert.published import load_index
from tests.convert.llamacpp_reference import assert_same_summary, general_diff, gguf_summary
from tests.llamacpp_converter import ConverterRun, log_tail, run_jobs

CARD = """---
license: mit
base_model:
- Qwen/Qwen3-8B
tags:
- dflash
- speculative-decoding
language:
- en
datasets:
- HuggingFaceH4/ultrachat_200k
pipeline_tag: text-generation
library_name: transformers
---
# D
"""
DRAFTER = RUNTIME / "drafter"


def general(path) -> list[tuple]:
    return [kv for kv in gguf_summary(path).kvs if kv[0].startswith("general.")]


def with_card(tmp_path: Path, name: str = "d", card: str | None = CARD, src: Path = DRAFTER) -> Path:
    d = tmp_path / name
    shutil.copytree(src, d)
    if card is not None:
        (d / "README.md").write_text(card, encoding="utf-8")
    return d


def convert(cli, drafter: Path, out: Path, *args) -> Path:
    code, _, err = cli("convert", drafter, "--target-gguf", RUNTIME / "target.gguf", "-o", out, *args)
    assert code == 0, err
    return out


# --- fast: gguf-py's Metadata on our tensors ------------------------------------------------------

def test_card_keys_in_set_gguf_meta_model_order(cli, tmp_path):
    out = convert(cli, with_card(tmp_path), tmp_path / "o.gguf")
    keys = [k for k, _, _ in general(out)]
    assert keys == ["general.architecture", "general.type", "general.name", "general.size_label", "general.license",
                    "general.base_model.count", "general.base_model.0.name", "general.base_model.0.organization",
                    "general.base_model.0.repo_url", "general.dataset.count", "general.dataset.0.name",
                    "general.dataset.0.organization", "general.dataset.0.repo_url", "general.tags",
                    "general.languages", "general.file_type", "general.quantization_version"]
    g = {k: (t, v) for k, t, v in general(out)}
    assert g["general.name"] == ("STRING", "D") and g["general.size_label"] == ("STRING", "140K")
    assert g["general.tags"] == ("ARRAY[STRING]", ["dflash", "speculative-decoding", "text-generation"])
    assert g["general.base_model.0.repo_url"] == ("STRING", "https://huggingface.co/Qwen/Qwen3-8B")
    # every key after general.* is untouched by the card
    plain = convert(cli, with_card(tmp_path, "e", card=None), tmp_path / "p.gguf")
    assert [kv for kv in gguf_summary(out).kvs if not kv[0].startswith("general.")] == \
           [kv for kv in gguf_summary(plain).kvs if not kv[0].startswith("general.")]


def test_no_card_writes_what_mainline_adds_from_the_directory(cli, tmp_path):
    """Without a card only the name (prettified directory name) and the size label are added."""
    out = convert(cli, with_card(tmp_path, "drafter", card=None), tmp_path / "o.gguf")
    assert general(out) == [("general.architecture", "STRING", "dflash"), ("general.type", "STRING", "model"),
                            ("general.name", "STRING", "Drafter"), ("general.size_label", "STRING", "140K"),
                            ("general.file_type", "UINT32", 32), ("general.quantization_version", "UINT32", 2)]


def test_metadata_override_and_model_name(cli, tmp_path):
    d = with_card(tmp_path)
    override = tmp_path / "meta.json"
    # gguf-py's override keys (general.license is not one of them: the card's stays)
    override.write_text(json.dumps({"general.name": "From Override", "general.license": "apache-2.0",
                                    "general.tags": ["a"], "general.size_label": "1x64", "general.author": "someone"}))
    g = {k: v for k, _, v in general(convert(cli, d, tmp_path / "o.gguf", "--metadata", override))}
    assert (g["general.name"], g["general.license"], g["general.tags"], g["general.size_label"], g["general.author"]) \
           == ("From Override", "mit", ["a"], "1x64", "someone")
    g = {k: v for k, _, v in general(convert(cli, d, tmp_path / "n.gguf", "--model-name", "My Drafter"))}
    assert g["general.name"] == "My Drafter" and g["general.license"] == "mit"
    code, _, err = cli("convert", d, "--target-gguf", RUNTIME / "target.gguf", "-o", tmp_path / "x.gguf",
                       "--metadata", tmp_path / "missing.json")
    assert code == 2 and "missing.json" in err


def test_a_bad_card_or_override_is_one_error(cli, tmp_path):
    d = with_card(tmp_path, card="---\nlicense: [mit\n---\n")
    code, _, err = cli("convert", d, "--target-gguf", RUNTIME / "target.gguf", "-o", tmp_path / "o.gguf")
    assert code == 3 and "README.md" in err and "YAML" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = cli("convert", with_card(tmp_path, "e"), "--target-gguf", RUNTIME / "target.gguf",
                       "-o", tmp_path / "o.gguf", "--metadata", bad)
    assert code == 2 and "--metadata" in err


def test_values_of_the_wrong_kind_are_one_line(cli, tmp_path):
    """gguf-py writes whatever a card or --metadata holds; a GGUF value has one type, so a list
    where a string goes (or a JSON list as the whole file) is refused in one line, not a traceback."""
    d = with_card(tmp_path, card="---\nlicense: mit\nbase_model:\n- Qwen/Qwen3-8B\n---\n")
    bad = tmp_path / "bad.json"
    for text, code, says in (("[1, 2]", 2, f"--metadata {bad}: a JSON object of keys is expected, not a list"),
                             ('{"general.tags": "x"}', 3, "general.tags = 'x': a list of strings is expected"),
                             ('{"general.base_models": [{"name": 5}]}', 3,
                              "general.base_model.0.name = 5: a string is expected"),
                             ('{"general.sampling.top_k": "40"}', 3,
                              "general.sampling.top_k = '40': an integer is expected")):
        bad.write_text(text)
        rc, _, err = cli("convert", d, "--target-gguf", RUNTIME / "target.gguf", "-o", tmp_path / "o.gguf",
                         "--metadata", bad)
        assert rc == code and len(err.strip().splitlines()) == 1 and says in err, (text, err)
        assert not (tmp_path / "o.gguf").exists()
    (d / "generation_config.json").write_text("[]")
    rc, _, err = cli("convert", d, "--target-gguf", RUNTIME / "target.gguf", "-o", tmp_path / "o.gguf")
    assert rc == 3 and "generation_config.json: a JSON object of keys is expected, not a list" in err


def test_size_label_counts_experts_as_gguf_py_does():
    counts = parameter_counts([("blk.0.ffn_up_exps.weight", (8, 32, 16)), ("token_embd.weight", (100, 16))])
    assert counts == (8 * 32 * 16 + 1600, 1600, 32 * 16, 8)
    kvs = general_kvs(MetadataInputs(Path("/nonexistent/Some-Model")), [("token_embd.weight", (100, 16))])
    assert kvs == [KV("general.name", "Some Model", T.STRING), KV("general.size_label", "1.6K", T.STRING)]


def test_the_restated_rules_equal_gguf_pys():
    """size_label, parameter_counts and the recorder restate gguf-py code whose module imports
    numpy: held here to gguf-py's own functions, writer included, on every corpus card and on a
    metadata object with every field set."""
    gguf = pytest.importorskip("gguf")
    from dflash_gguf.convert.metadata import _Recorder, size_label

    for n in (0, 1, 999, 1000, 1001, 9_999, 99_950, 140_032, 999_999, 10**6, 10**6 + 1, 7_615_616_512, 10**9,
              10**9 + 1, 123_456_789_012, 10**12 + 1, 4_000_000_000_000):
        assert size_label(n, n, 0, 0) == gguf.size_label(n, n, 0, 0), n
    assert size_label(5, 10**6, 3 * 10**8, 128) == gguf.size_label(5, 10**6, 3 * 10**8, 128)
    tensors = [("token_embd.weight", (100, 16)), ("blk.0.ffn_up_exps.weight", (8, 32, 16)),
               ("blk.0.ffn_gate_exps.bias", (8, 32)), ("blk.0.ffn_down_exps.weight", (32, 16)), ("x", ())]
    w = gguf.GGUFWriter(None, "dflash")
    for name, shape in tensors:
        w.add_tensor_info(name, shape, np.dtype(np.float32), 0)
    assert parameter_counts(tensors) == w.get_total_parameter_count()

    full = gguf.Metadata(
        name="N", author="A", version="v1", organization="O", finetune="F", basename="B", description="D",
        quantized_by="Q", size_label="8B", url="u", doi="d", uuid="id", repo_url="r", source_url="su",
        source_doi="sd", source_uuid="si", source_repo_url="sr", license="mit", license_name="ln",
        license_link="ll", tags=["t1", "t2"], languages=["en"], sampling_sequence="s", sampling_top_k=40,
        sampling_top_p=0.9, sampling_min_p=0.05, sampling_xtc_probability=0.1, sampling_xtc_threshold=0.2,
        sampling_temp=0.7, sampling_penalty_last_n=64, sampling_penalty_repeat=1.1, sampling_mirostat=2,
        sampling_mirostat_tau=5.0, sampling_mirostat_eta=0.1,
        base_models=[{"name": "b", "author": "a", "version": "1", "organization": "o", "description": "d",
                      "url": "u", "doi": "x", "uuid": "y", "repo_url": "r"}, {"name": "c"}],
        datasets=[{"name": "ds", "author": "a", "version": "2", "organization": "o", "description": "d",
                   "url": "u", "doi": "x", "uuid": "y", "repo_url": "r"}])
    cards = [gguf.Metadata.load(None, FIXTURES / "published" / e["slug"], None, 10**9) for e in load_index()]
    for md in [full, gguf.Metadata(name="", tags=[]), *cards]:
        w = gguf.GGUFWriter(None, "dflash")
        rec = _Recorder(gguf.Keys.General)
        md.set_gguf_meta_model(w)
        md.set_gguf_meta_model(rec)
        theirs = [KV(k, list(v.value) if v.type == gguf.GGUFValueType.ARRAY else v.value, T(int(v.type)),
                     None if v.sub_type is None else T(int(v.sub_type)))
                  for k, v in w.kv_data[0].items() if k != "general.architecture"]  # the writer's own
        ours = list(rec.kvs.values())
        # gguf-py picks an array's item type from its first item: STRING for every list here
        theirs = [kv if kv.type != T.ARRAY or kv.sub_type else KV(kv.key, kv.value, T.ARRAY, T.STRING) for kv in theirs]
        assert ours == theirs


def test_a_metadata_only_import_loads_neither_numpy_nor_gguf_package(tmp_path):
    """gguf.metadata is loaded without gguf's __init__ (numpy), and a later `import gguf` still
    gets the whole package."""
    code = (
        "import sys; from pathlib import Path\n"
        "from dflash_gguf.convert.metadata import MetadataInputs, general_kvs\n"
        f"kvs = general_kvs(MetadataInputs(Path({str(DRAFTERS / 'qwen3-flat')!r})), [('a', (10, 10))])\n"
        "assert 'numpy' not in sys.modules and 'gguf' not in sys.modules, sorted(sys.modules)\n"
        "import gguf; assert gguf.GGUFWriter and gguf.Metadata and gguf.metadata.Metadata.load\n"
        "print([kv.key for kv in kvs])\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "['general.name', 'general.size_label']"


def test_repetition_penalty_as_llama_cpps_gguf_py(tmp_path):
    """transformers' repetition_penalty becomes general.sampling.penalty_repeat as llama.cpp's own
    gguf-py reads it; gguf-py's own penalty_repeat and then --metadata take precedence."""
    d = with_card(tmp_path, card=None)
    (d / "generation_config.json").write_text(json.dumps({"repetition_penalty": 1.05, "temperature": 0.6}))
    keyed = lambda src: {kv.key: kv.value for kv in general_kvs(src, [("a", (4, 4))])}  # noqa: E731
    g = keyed(MetadataInputs(d))
    assert g["general.sampling.penalty_repeat"] == 1.05 and g["general.sampling.temp"] == 0.6
    (d / "generation_config.json").write_text(json.dumps({"repetition_penalty": 1.05, "penalty_repeat": 1.2}))
    assert keyed(MetadataInputs(d))["general.sampling.penalty_repeat"] == 1.2
    override = tmp_path / "m.json"
    override.write_text(json.dumps({"general.sampling.penalty_repeat": 1.3}))
    (d / "generation_config.json").write_text(json.dumps({"repetition_penalty": 1.05}))
    assert keyed(MetadataInputs(d, override))["general.sampling.penalty_repeat"] == 1.3


def test_retarget_and_quantize_keep_the_cards_keys(cli, tmp_path):
    """retarget carries every general.* key over (the writer's version is its own); quantize keeps
    them byte for byte as real llama-quantize does."""
    src = convert(cli, with_card(tmp_path), tmp_path / "o.gguf")
    keys = general(src)
    for fmt in ("dflash-draft", "lucebox", "llama.cpp"):
        out = tmp_path / f"{fmt}.gguf"
        code, _, err = cli("retarget", src, "-f", fmt, "-o", out)
        assert code == 0, err
        assert [kv for kv in general(out) if kv[0] != "general.architecture"] == keys[1:], fmt
    llama_cpp = pytest.importorskip("llama_cpp")
    from tests.quants.test_gguf_file import LQ

    ours, ref = tmp_path / "q.gguf", tmp_path / "ref.gguf"
    assert cli("quantize", src, ours, "q8_0")[0] == 0
    r = subprocess.run([sys.executable, "-c", LQ, str(src), str(ref), str(int(llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0))],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-1000:]
    assert ours.read_bytes() == ref.read_bytes()
    assert [kv for kv in general(ours) if kv[0] != "general.file_type"] == \
           [kv for kv in keys if kv[0] != "general.file_type"]


# --- output names -------------------------------------------------------------------------------

def test_default_name_and_ftype_template(cli, tmp_path):
    d = with_card(tmp_path, "Qwen3-8B-DFlash-b16", card=None)
    code, _, err = cli("convert", d, "--target-gguf", RUNTIME / "target.gguf")
    assert code == 0, err
    assert [p.name for p in d.glob("*.gguf")] == ["Qwen3-140K-8b-DFlash-b16-BF16.gguf"]  # gguf-py: the counted size wins
    outdir = tmp_path / "out"
    outdir.mkdir()
    assert cli("convert", d, "--target-gguf", RUNTIME / "target.gguf", "-o", outdir, "-t", "q8_0")[0] == 0
    assert [p.name for p in outdir.iterdir()] == ["Qwen3-140K-8b-DFlash-b16-Q8_0.gguf"]
    code, _, err = cli("convert", d, "--target-gguf", RUNTIME / "target.gguf", "-o", tmp_path / "x-{ftype}.{FTYPE}.gguf")
    assert code == 0, err
    assert (tmp_path / "x-bf16.BF16.gguf").is_file()
    # the default name is now a file in the drafter dir: not an input (convert reads no GGUF), so
    # it is refused as any existing output is, and replaced with --force
    code, _, err = cli("convert", d, "--target-gguf", RUNTIME / "target.gguf")
    assert code == 5 and "already exists" in err
    assert cli("convert", d, "--target-gguf", RUNTIME / "target.gguf", "--force")[0] == 0
    # the drafter's own files still are inputs
    code, _, err = cli("convert", d, "--target-gguf", RUNTIME / "target.gguf", "-o", d / "config.json", "--force")
    assert code == 2 and "inputs" in err and json.loads((d / "config.json").read_text())


def test_output_path_follows_gguf_py():
    kvs = [KV("general.name", "D", T.STRING), KV("general.size_label", "140K", T.STRING),
           KV("general.file_type", 1, T.UINT32)]
    assert output_path(None, DRAFTER, kvs) == DRAFTER / "D-140K-F16.gguf"
    assert output_path(Path("/x/m.{outtype}.gguf"), DRAFTER, kvs) == Path("/x/m.f16.gguf")
    assert output_path(Path("/x/plain.gguf"), DRAFTER, kvs) == Path("/x/plain.gguf")


# --- slow: against mainline's converter -----------------------------------------------------------

@pytest.mark.slow
def test_card_keys_equal_mainlines(cli, tmp_path):
    """A small real drafter with a card (and a generation_config.json), a card plus
    --metadata/--model-name, and no card: every KV equal to the vendored converter's, general.* in
    its order."""
    from tests.convert.test_llamacpp_ground_truth import llama_src, spm_target

    src = llama_src()
    depth = json.loads((DRAFTERS / "qwen3-flat" / "config.json").read_text())["num_target_layers"]
    target = spm_target(tmp_path, depth)
    override = tmp_path / "meta.json"
    override.write_text(json.dumps({"general.version": "v2", "general.tags": ["x"], "general.author": "A"}))
    cases = {"card": (with_card(tmp_path, "d", src=DRAFTERS / "qwen3-flat"), ()),
             "plain": (with_card(tmp_path, "qwen3-flat", card=None, src=DRAFTERS / "qwen3-flat"), ()),
             "override": (with_card(tmp_path, "Qwen3-8B-DFlash-b16", src=DRAFTERS / "qwen3-flat"),
                          ("--metadata", str(override), "--model-name", "Named")),
             }

    # transformers' sampling names: llama.cpp's gguf-py reads repetition_penalty too
    (cases["card"][0] / "generation_config.json").write_text(json.dumps({"repetition_penalty": 1.05, "top_k": 20}))
    runs = [ConverterRun((str(d), "--target-model-dir", str(target), "--outfile", str(tmp_path / f"ref-{n}.gguf"),
                          "--outtype", "auto", *extra), tmp_path / f"ref-{n}.log", header_only=True)
            for n, (d, extra) in cases.items()]
    for run, code in zip(runs, run_jobs(runs, src)):
        assert code == 0, log_tail(run, 2000)
    for n, (d, extra) in cases.items():
        ours = tmp_path / f"ours-{n}.gguf"
        code, _, err = cli("convert", d, "--target-dir", target, "-o", ours, *extra)
        assert code == 0, err
        ref = gguf_summary(tmp_path / f"ref-{n}.gguf")
        assert_same_summary(gguf_summary(ours), ref)
        assert general_diff(gguf_summary(ours), ref) == [], n
