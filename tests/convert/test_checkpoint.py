"""convert / retarget / inspect end to end on the fixtures, through the CLI."""
import json
import subprocess
import sys

import numpy as np
import pytest
from gguf import GGUFReader

from dflash_gguf.formats import FORMATS
from tests.conftest import BROKEN, DRAFTERS, rewrite_gguf
from tests.convert.conftest import PAIRS, QWEN_DIR, do_convert, kvs, tensors


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("drafter", list(PAIRS))
def test_every_format_and_schema(cli, tmp_path, drafter, fmt):
    code, out, so, se = do_convert(cli, tmp_path, drafter, fmt)
    if drafter == "qwen3-dflash2" and fmt != "llama.cpp":
        assert code == 2 and "load only in mainline" in se and not out.exists()
        return
    assert code == 0, se
    kv = kvs(out)
    arch = kv["general.architecture"][0]
    cfg = json.loads((DRAFTERS / drafter / "config.json").read_text())
    dc = cfg.get("dflash_config", {})
    taps = dc["target_layer_ids"]
    mask = dc["mask_token_id"]
    theta = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta"))
    block = dc.get("block_size", cfg.get("block_size", 16))
    n = cfg["num_hidden_layers"]
    assert kv[f"{arch}.rope.freq_base"] == (pytest.approx(theta), ["FLOAT32"])
    assert kv[f"{arch}.block_count"] == (n, ["UINT32"])
    assert kv[f"{arch}.embedding_length"] == (cfg["hidden_size"], ["UINT32"])
    assert kv[f"{arch}.attention.head_count_kv"] == (cfg["num_key_value_heads"], ["UINT32"])
    names = set(tensors(out))
    if fmt == "llama.cpp":
        assert arch == "dflash"
        assert kv["dflash.target_layers"] == ([i + 1 for i in taps], ["ARRAY", "INT32"])
        assert kv["tokenizer.ggml.mask_token_id"] == (mask, ["UINT32"])
        assert kv["dflash.block_size"] == (block, ["UINT32"])
        assert {"fc.weight", "enc.output_norm.weight", "blk.0.ffn_norm.weight"} <= names
    elif fmt == "llama.cpp-pr22105":
        assert kv["dflash.target_layer_ids"] == ([i + 1 for i in taps], ["ARRAY", "INT32"])
        assert kv["dflash.mask_token_id"] == (mask, ["UINT32"])
        assert {"fc.weight", "hidden_norm.weight"} <= names
    elif fmt == "dflash-draft":
        assert arch == "dflash-draft"
        assert kv["dflash-draft.dflash.target_layer_ids"] == (taps, ["ARRAY", "INT32"])
        assert kv["dflash-draft.dflash.n_target_features"] == (len(taps) * 64, ["UINT32"])
        assert kv["dflash-draft.dflash.mask_token_id"] == (mask, ["UINT32"])
        assert {"dflash_fc.weight", "dflash_hidden_norm.weight", "blk.0.post_attention_norm.weight"} <= names
    else:
        assert arch == ("gemma4-dflash-draft" if drafter == "gemma-style" else "qwen35-dflash-draft")
        assert kv[f"{arch}.dflash.n_target_layers"] == (len(taps), ["UINT32"])
        assert kv[f"{arch}.dflash.target_layer_ids"] == (taps, ["ARRAY", "INT32"])
        assert {"dflash.fc.weight", "dflash.hidden_norm.weight"} <= names
        assert not any(k.startswith("tokenizer.") for k in kv)
    if cfg.get("layer_types") and cfg.get("use_sliding_window"):
        assert kv[f"{arch}.attention.sliding_window"] == (cfg["sliding_window"], ["UINT32"])
        pattern = [t == "sliding_attention" for t in cfg["layer_types"]]
        assert kv[f"{arch}.attention.sliding_window_pattern"] == (pattern, ["ARRAY", "BOOL"])
    if "final_logit_softcapping" in cfg or "final_logit_softcapping" in dc:
        cap = dc.get("final_logit_softcapping", cfg.get("final_logit_softcapping"))
        assert kv[f"{arch}.final_logit_softcapping"][0] == pytest.approx(cap)
    expected = 11 * n + 3 + (4 * n + 3 if drafter == "qwen3-dflash2" else 0)
    assert len(names) == expected
    # norms and 1-D tensors are F32; the rest keep the source BF16 under --outtype auto
    for name, (typ, _) in tensors(out).items():
        f32 = name.endswith("norm.weight") or not name.endswith(".weight")
        assert typ == ("F32" if f32 else "BF16"), name


def test_nested_theta_1e7_lands_exactly(cli, tmp_path):
    code, out, _, se = do_convert(cli, tmp_path, "qwen3-nested", "lucebox")
    assert code == 0, se
    assert kvs(out)["qwen35-dflash-draft.rope.freq_base"][0] == 1e7


def test_dflash2_mainline_keys_and_tensor_names(cli, tmp_path):
    code, out, _, se = do_convert(cli, tmp_path, "qwen3-dflash2", "llama.cpp")
    assert code == 0, se
    kv = kvs(out)
    assert kv["dflash.conv_kernel_size"][0] == 2 and kv["dflash.selector_top_k"][0] == 4
    assert kv["dflash.attention.causal"] == (False, ["BOOL"])
    assert kv["dflash.logit_scale"][0] == 0.5
    t = GGUFReader(out)
    shapes = {x.name: [int(d) for d in x.shape] for x in t.tensors}
    assert shapes["blk.0.attn_conv_base"] == [64, 2, 2]  # ne = reversed torch [2, k, H]; no .weight, F32
    assert shapes["selector_predecessor.weight"] == [32, 512]


@pytest.mark.parametrize("name,code,needle", [
    ("no-theta", 3, "no RoPE theta"),
    ("nan-theta", 3, "rope_theta"),
    ("no-mask", 3, "mask_token_id"),
    ("truncated", 4, "truncated"),
    ("fc-width", 4, "fc.weight has shape [32, 96]"),
    ("taps-beyond-target", 3, "num_target_layers=5"),
])
def test_broken_fixture_exits_with_its_code_and_no_file(cli, tmp_path, name, code, needle):
    out = tmp_path / "x.gguf"
    got, so, se = cli("convert", BROKEN / name, "-o", out, "--format", "lucebox")
    assert got == code
    assert needle in se and "Traceback" not in se
    assert len(se.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_reruns_are_byte_identical(cli, tmp_path):
    a = do_convert(cli, tmp_path, "qwen3-flat", "llama.cpp", name="a.gguf")
    b = do_convert(cli, tmp_path, "qwen3-flat", "llama.cpp", name="b.gguf")
    assert a[0] == b[0] == 0
    assert a[1].read_bytes() == b[1].read_bytes()


def test_existing_output_is_kept_without_force(cli, tmp_path):
    out = tmp_path / "out.gguf"
    out.write_bytes(b"precious")
    code, _, se = cli("convert", DRAFTERS / "qwen3-flat", "-o", out, "--format", "lucebox")
    assert code == 5 and "--force" in se and out.read_bytes() == b"precious"
    code, _, se = cli("convert", DRAFTERS / "qwen3-flat", "-o", out, "--format", "lucebox", "--force")
    assert code == 0 and out.read_bytes()[:4] == b"GGUF"


def test_interrupt_leaves_nothing_and_keeps_existing(tmp_path, monkeypatch):
    import dflash_gguf.convert.checkpoint as conv

    out = tmp_path / "out.gguf"
    out.write_bytes(b"old")
    calls = {"n": 0}
    real = conv.encode

    def flaky(src, qtype, chunks=None):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real(src, qtype, chunks)

    monkeypatch.setattr(conv, "encode", flaky)
    with pytest.raises(KeyboardInterrupt):
        conv.convert(DRAFTERS / "qwen3-flat", out, format="lucebox", force=True)
    assert out.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.gguf"]


def test_missing_context_length_fails_for_llama_cpp(cli, tmp_path):
    import shutil

    d = tmp_path / "d"
    shutil.copytree(DRAFTERS / "qwen3-flat", d)
    cfg = json.loads((d / "config.json").read_text())
    del cfg["max_position_embeddings"]
    (d / "config.json").write_text(json.dumps(cfg))
    code, _, se = cli("convert", d, "-o", tmp_path / "x.gguf", "--target-dir", QWEN_DIR)
    assert code == 3 and "max_position_embeddings" in se and not (tmp_path / "x.gguf").exists()
    assert cli("convert", d, "-o", tmp_path / "x.gguf", "--format", "lucebox")[0] == 0


def test_missing_tokenizer_names_both_options(cli, tmp_path):
    code, _, se = cli("convert", DRAFTERS / "qwen3-flat", "-o", tmp_path / "x.gguf")
    assert code == 7 and "--target-gguf" in se and "--target-dir" in se


def test_dry_run_json_plan_writes_nothing(cli, tmp_path):
    code, so, se = cli("convert", DRAFTERS / "qwen3-nested", "--format", "dflash-draft", "--target-dir", QWEN_DIR,
                       "--dry-run", "--json")
    assert code == 0, se
    plan = json.loads(so)
    assert plan["architecture"] == "dflash-draft"
    assert plan["target_layers"] == {"zlab_output_of_layer": [1, 2, 3, 4], "stored": [1, 2, 3, 4]}
    keys = {k["key"]: k for k in plan["kv"]}
    assert keys["dflash-draft.rope.freq_base"]["value"] == 1e7
    assert keys["dflash-draft.attention.sliding_window_pattern"]["type"] == "ARRAY[BOOL]"
    t = {x["source"]: x for x in plan["tensors"]}
    assert t["fc.weight"]["name"] == "dflash_fc.weight" and t["fc.weight"]["ne"] == [256, 64]
    assert plan["config_sources"]["rope_theta"] == "rope_parameters.rope_theta"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("outtype,expect", [("f32", "F32"), ("f16", "F16"), ("bf16", "BF16")])
def test_float_outtypes(cli, tmp_path, outtype, expect):
    pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")  # reads the checkpoint's bf16
    code, out, _, se = do_convert(cli, tmp_path, "qwen3-flat", "lucebox", outtype=outtype)
    assert code == 0, se
    from safetensors.torch import load_file

    src = load_file(DRAFTERS / "qwen3-flat" / "model.safetensors")
    r = GGUFReader(out)
    for t in r.tensors:
        want = "F32" if t.name.endswith("norm.weight") else expect
        assert t.tensor_type.name == want
    q = next(t for t in r.tensors if t.name == "blk.0.attn_q.weight")
    ref = src["layers.0.self_attn.q_proj.weight"].float().numpy()
    if expect == "F32":
        assert np.array_equal(np.asarray(q.data).reshape(ref.shape), ref)
    elif expect == "F16":
        assert np.array_equal(np.asarray(q.data).reshape(ref.shape), ref.astype(np.float16))
    ft = kvs(out)["general.file_type"][0]
    assert ft == {"f32": 0, "f16": 1, "bf16": 32}[outtype]


def test_peak_memory_tracks_largest_tensor(tmp_path):
    """Convert a generated drafter of ~200 MB in a subprocess; peak RSS must stay far below it."""
    script = r'''
import json, resource, sys
from pathlib import Path
import numpy as np
from safetensors.numpy import save_file
d = Path(sys.argv[1]); H, I, L = 1024, 4096, 3
rng = np.random.default_rng(0)
def m(*s): return (rng.standard_normal(s, dtype=np.float32) * 0.02)
t = {"fc.weight": m(H, 4 * H), "hidden_norm.weight": np.ones(H, np.float32), "norm.weight": np.ones(H, np.float32)}
for i in range(L):
    p = f"layers.{i}."
    t.update({p+"input_layernorm.weight": np.ones(H, np.float32), p+"post_attention_layernorm.weight": np.ones(H, np.float32),
              p+"self_attn.q_proj.weight": m(H, H), p+"self_attn.k_proj.weight": m(256, H), p+"self_attn.v_proj.weight": m(256, H),
              p+"self_attn.o_proj.weight": m(H, H), p+"self_attn.q_norm.weight": np.ones(64, np.float32),
              p+"self_attn.k_norm.weight": np.ones(64, np.float32), p+"mlp.gate_proj.weight": m(I, H),
              p+"mlp.up_proj.weight": m(I, H), p+"mlp.down_proj.weight": m(H, I)})
save_file(t, d / "model.safetensors"); del t
cfg = {"architectures": ["DFlashDraftModel"], "hidden_size": H, "intermediate_size": I, "num_hidden_layers": L,
       "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64, "rms_norm_eps": 1e-6, "vocab_size": 1000,
       "rope_theta": 1e6, "block_size": 16, "num_target_layers": 8,
       "dflash_config": {"mask_token_id": 5, "target_layer_ids": [1, 2, 3, 4]}}
(d / "config.json").write_text(json.dumps(cfg))
'''
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True)
    total = (tmp_path / "model.safetensors").stat().st_size
    largest = 4096 * 1024 * 4
    measure = r'''
import sys
from dflash_gguf.convert import convert
def hwm():  # VmHWM: ru_maxrss would include the parent's peak (inherited across exec)
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1])
before = hwm()
convert(sys.argv[1], sys.argv[2], format="lucebox", outtype="f32")
print(before, hwm())
'''
    r = subprocess.run([sys.executable, "-c", measure, str(tmp_path), str(tmp_path / "o.gguf")],
                       check=True, capture_output=True, text=True)
    before_kb, after_kb = map(int, r.stdout.split())
    grown = (after_kb - before_kb) * 1024
    assert total > 180e6
    assert grown < 3 * largest + 20e6, (grown, largest, total)
    assert (tmp_path / "o.gguf").stat().st_size > total * 0.99


def test_hostile_key_types_are_a_clean_error(cli, tmp_path):
    """target_layers stored as strings: inspect and retarget say so in one line (exit 6)."""
    from gguf import GGUFWriter

    code, src, _, _ = do_convert(cli, tmp_path, "qwen3-flat", "llama.cpp")
    bad = tmp_path / "bad.gguf"
    rewrite_gguf(src, bad, drop=("dflash.target_layers",))
    with_strings = tmp_path / "bad2.gguf"
    w_src = GGUFReader(bad)

    w = GGUFWriter(with_strings, "dflash")
    for k, f in w_src.fields.items():
        if not k.startswith("GGUF.") and k != "general.architecture":
            w.add_key_value(k, f.contents(), f.types[0], sub_type=f.types[1] if len(f.types) > 1 else None)
    w.add_array("dflash.target_layers", ["a", "b"])
    for t in w_src.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    bad = with_strings
    code, _, se = cli("retarget", bad, "--format", "dflash-draft", "-o", tmp_path / "o.gguf")
    assert code == 6 and "unexpected types" in se and "Traceback" not in se


def _variant(tmp_path, cfg_update=None, extra_tensors=None):
    """A copy of qwen3-flat with config changes and extra tensors (written with safetensors)."""
    import shutil

    pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")
    import torch
    from safetensors.torch import load_file, save_file

    d = tmp_path / "variant"
    shutil.copytree(DRAFTERS / "qwen3-flat", d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(cfg_update or {})
    (d / "config.json").write_text(json.dumps(cfg))
    if extra_tensors:
        t = load_file(d / "model.safetensors")
        t.update({k: torch.as_tensor(v) for k, v in extra_tensors.items()})
        save_file(t, d / "model.safetensors")
    return d


def test_yarn_scaling_lands_in_the_keys_the_runtime_reads(cli, tmp_path):
    d = _variant(tmp_path, {"rope_scaling": {"rope_type": "yarn", "factor": 64.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                              "original_max_position_embeddings": 4096}})
    out = tmp_path / "y.gguf"
    assert cli("convert", d, "--format", "lucebox", "-o", out)[0] == 0
    kv = kvs(out)
    a = "qwen35-dflash-draft"
    assert kv[f"{a}.rope.scaling.type"] == ("yarn", ["STRING"])
    assert kv[f"{a}.rope.scaling.factor"] == (64.0, ["FLOAT32"])
    assert kv[f"{a}.rope.scaling.original_context_length"] == (4096, ["UINT32"])
    assert kv[f"{a}.rope.scaling.yarn_beta_fast"][0] == 32.0 and kv[f"{a}.rope.scaling.yarn_beta_slow"][0] == 1.0


def test_llama3_scaling_writes_rope_freqs(cli, tmp_path):
    d = _variant(tmp_path, {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})
    out = tmp_path / "l3.gguf"
    assert cli("convert", d, "--format", "lucebox", "-o", out)[0] == 0
    t = {x.name: x for x in GGUFReader(out).tensors}
    f = np.array(t["rope_freqs.weight"].data)
    assert f.shape == (8,) and f[0] == 1.0 and f[-1] == 8.0  # high frequencies unscaled, low ones ×factor


def test_extra_tensors_follow_explicit_rules(cli, tmp_path):
    d = _variant(tmp_path, extra_tensors={"embed_tokens.weight": np.zeros((512, 64), np.float32),
                                          "d2t": np.zeros(512, np.int64)})
    out = tmp_path / "x.gguf"
    code, so, se = cli("convert", d, "--target-dir", QWEN_DIR, "-o", out)
    assert code == 0, se
    assert "token_embd.weight" in tensors(out) and "d2t" not in tensors(out)
    assert "dropped d2t" in se
    code, _, se = cli("convert", d, "--format", "lucebox", "-o", tmp_path / "l.gguf")
    assert code == 0 and "dropped embed_tokens.weight" in se and "token_embd.weight" not in tensors(tmp_path / "l.gguf")
    d2 = tmp_path / "v2"
    d.rename(d2)
    d3 = _variant(tmp_path, extra_tensors={"layers.0.mystery.weight": np.zeros((4, 4), np.float32)})
    code, _, se = cli("convert", d3, "--format", "lucebox", "-o", tmp_path / "m.gguf")
    assert code == 4 and "layers.0.mystery.weight" in se and "refusing to guess" in se


SECTIONS = "dflash.rope.dimension_sections"


def test_mrope_target_gguf_gives_degenerate_sections(cli, tmp_path):
    """A target GGUF with <arch>.rope.dimension_sections (Qwen3.5/3.6) makes the drafter rope on
    the temporal section only: [head_dim/2, 0, 0, 0] as INT32, as mainline's converter writes."""
    from gguf import GGUFValueType as T

    from tests.convert.conftest import LLAMA_GGUF

    mrope = rewrite_gguf(LLAMA_GGUF, tmp_path / "mrope-target.gguf",
                         add={"llama.rope.dimension_sections": ([11, 11, 10, 0], T.ARRAY, T.INT32)})
    head_dim = json.loads((DRAFTERS / "gemma-style" / "config.json").read_text())["head_dim"]
    for target, want in ((mrope, [head_dim // 2, 0, 0, 0]), (LLAMA_GGUF, None)):
        out = tmp_path / f"drafter-for-{target.stem}.gguf"
        code, _, se = cli("convert", DRAFTERS / "gemma-style", "--target-gguf", target, "-o", out)
        assert code == 0, se
        got = kvs(out).get(SECTIONS)
        assert (got and (list(got[0]), got[1])) == (want and (want, ["ARRAY", "INT32"]))


def test_mrope_target_dir_reads_text_config(cli, tmp_path):
    """--target-dir: mrope_section under text_config.rope_parameters (not merged with the top
    level, as mainline reads it) decides the sections; the same section at the top level of a
    config that has a text_config does not."""
    import shutil

    d = tmp_path / "t"
    shutil.copytree(QWEN_DIR, d)
    cfg = json.loads((d / "config.json").read_text())
    rope = {"rope_type": "default", "rope_theta": 1e7, "mrope_section": [11, 11, 10]}
    cases = {"text_config": ({**cfg, "text_config": {**cfg, "rope_parameters": rope}}, True),
             "top_level_shadowed": ({**cfg, "rope_parameters": rope, "text_config": dict(cfg)}, False)}
    for name, (body, want) in cases.items():
        (d / "config.json").write_text(json.dumps(body))
        out = tmp_path / f"{name}.gguf"
        code, _, se = cli("convert", DRAFTERS / "qwen3-flat", "--target-dir", d, "-o", out)
        assert code == 0, se
        assert (SECTIONS in kvs(out)) is want, name


@pytest.mark.parametrize("dry_run", [False, True])
def test_target_vocab_is_built_once_per_conversion(cli, tmp_path, monkeypatch, dry_run):
    """--target-dir: the vocabulary is built in one place (plan_conversion's load_target) and
    passed along as a value; tokenizer.json is loaded by the tokenizers library once and parsed
    by Python once."""
    from dflash_gguf.target import hf_files, hf_vocab, special_vocab

    calls = {"vocab": 0, "from_file": 0, "tokenizer.json": 0}
    real_vocab, real_import, real_read = hf_vocab.vocab_from_hf_dir, hf_vocab._import_tokenizers, hf_files.read_json

    def vocab(*a, **k):
        calls["vocab"] += 1
        return real_vocab(*a, **k)

    def importer(d):
        Tokenizer = real_import(d)

        class Counting:
            @staticmethod
            def from_file(path):
                calls["from_file"] += 1
                return Tokenizer.from_file(path)
        return Counting

    def read_json(path):
        calls[path.name] = calls.get(path.name, 0) + 1
        return real_read(path)

    monkeypatch.setattr(hf_vocab, "vocab_from_hf_dir", vocab)
    monkeypatch.setattr(hf_vocab, "_import_tokenizers", importer)
    for mod in (hf_vocab, special_vocab):
        monkeypatch.setattr(mod, "read_json", read_json)
    out = tmp_path / "o.gguf"
    args = ["--dry-run"] if dry_run else ["-o", out]
    code, _, se = cli("convert", DRAFTERS / "qwen3-flat", "--target-dir", QWEN_DIR, *args)
    assert code == 0, se
    assert calls["vocab"] == calls["from_file"] == calls["tokenizer.json"] == 1, calls
    assert out.exists() is not dry_run


def test_kept_types_are_copied_as_stored_bytes(monkeypatch):
    """A tensor kept in its own type is one FileSpan of its stored bytes (the writer copies it
    file to file); a converted one is encoded in row chunks, and a small BF16 one made F32
    without numpy: the same bytes."""
    from gguf import GGMLQuantizationType as Q

    from dflash_gguf.convert import checkpoint
    from dflash_gguf.convert.checkpoint import encode
    from dflash_gguf.fileio.gguf_writer import FileSpan
    from dflash_gguf.fileio.safetensors import read_inventory, read_raw, to_f32

    src = next(t for t in read_inventory(DRAFTERS / "qwen3-flat") if len(t.shape) == 2)
    kept = {"BF16": Q.BF16, "F16": Q.F16, "F32": Q.F32}[src.dtype]
    assert list(encode(src, kept)) == [FileSpan(src.file, src.offset, src.nbytes, src.name)]
    other = Q.F32 if kept != Q.F32 else Q.F16
    small = list(encode(src, other))
    want = to_f32(src).tobytes() if other == Q.F32 else None
    if src.dtype == "BF16" and src.nbytes <= checkpoint.SMALL_BYTES:
        assert len(small) == 1 and isinstance(small[0], bytearray) and bytes(small[0]) == want
    monkeypatch.setattr(checkpoint, "SMALL_BYTES", 0)
    chunks = list(encode(src, other))
    assert chunks and all(isinstance(c, np.ndarray) for c in chunks)
    assert want is None or b"".join(c.tobytes() for c in chunks) == want
    # given row chunks (a transform), the kept type passes them through unchanged
    raw = read_raw(src)
    assert [c.tobytes() for c in encode(src, kept, [raw])] == [raw.tobytes()]
