"""quantize (GGUF → GGUF) and convert --outtype q8_0/q4_k_m, end to end on real files."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q_
from gguf import GGUFReader, GGUFWriter

from dflash_gguf.formats import FORMATS

from tests.conftest import DRAFTERS, TARGETS, rewrite_gguf

QWEN_DIR = TARGETS / "qwen3-tiny"
FC = {"llama.cpp": "fc.weight", "llama.cpp-pr22105": "fc.weight", "dflash-draft": "dflash_fc.weight",
      "lucebox": "dflash.fc.weight"}
HN = {"llama.cpp": "enc.output_norm.weight", "llama.cpp-pr22105": "hidden_norm.weight",
      "dflash-draft": "dflash_hidden_norm.weight", "lucebox": "dflash.hidden_norm.weight"}


def convert(cli, tmp_path, drafter, fmt, outtype="auto", name="in.gguf"):
    out = tmp_path / name
    code, _, se = cli("convert", DRAFTERS / drafter, "--target-dir", QWEN_DIR, "--format", fmt,
                      "--outtype", outtype, "-o", out)
    assert code == 0, se
    return out


def types(path):
    return {t.name: t.tensor_type.name for t in GGUFReader(path).tensors}


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("ftype", ["q8_0", "Q4_K_M"])
def test_quantize_every_format_keeps_fc_and_hidden_norm(cli, tmp_path, fmt, ftype):
    src = convert(cli, tmp_path, "qwen3-flat", fmt)
    out = tmp_path / "q.gguf"
    code, so, se = cli("quantize", src, out, ftype)
    assert code == 0, se
    t = types(out)
    assert len(t) == len(types(src)) == 25
    assert t[HN[fmt]] == "F32"
    # fc: ne0 = 4 taps x 64 = 256 -> Q4_K under Q4_K_M, Q8_0 under Q8_0
    assert t[FC[fmt]] == ("Q8_0" if ftype == "q8_0" else "Q4_K")
    if ftype == "Q4_K_M":
        # 2 layers: use_more_bits(i, 2) is true for i = 1 only; ffn_down ne0 = 256 -> Q6_K
        assert t["blk.1.ffn_down.weight"] == "Q6_K" and t["blk.0.ffn_down.weight"] == "Q4_K"
        assert t["blk.0.attn_q.weight"] == "Q5_0"  # ne0 = 64: Q4_K falls back to Q5_0
        assert t["blk.1.attn_v.weight"] == "Q8_0"  # Q6_K falls back to Q8_0
    kv = {k: f.contents() for k, f in GGUFReader(out).fields.items()}
    assert kv["general.file_type"] == (7 if ftype == "q8_0" else 15)
    assert kv["general.quantization_version"] == 2
    keys = [k for k in kv if not k.startswith("GGUF.")]
    assert keys[-2:] == ["general.quantization_version", "general.file_type"]
    # every KV of the input survives
    src_kv = {k: f.contents() for k, f in GGUFReader(src).fields.items() if not k.startswith("GGUF.")}
    assert {k: v for k, v in kv.items() if k in src_kv and k != "general.file_type"} == \
           {k: v for k, v in src_kv.items() if k != "general.file_type"}


def test_quantized_values_are_ggml_blocks_of_the_source(cli, tmp_path):
    pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")  # reads the checkpoint's bf16
    from dflash_gguf.quants import quantize
    from safetensors.torch import load_file

    src = convert(cli, tmp_path, "qwen3-flat", "llama.cpp")
    out = tmp_path / "q.gguf"
    assert cli("quantize", src, out, "q4_k_m")[0] == 0
    w = load_file(DRAFTERS / "qwen3-flat" / "model.safetensors")
    r = {t.name: t for t in GGUFReader(out).tensors}
    for gguf_name, src_name, qt in [("fc.weight", "fc.weight", "q4_K"),
                                    ("blk.1.ffn_down.weight", "layers.1.mlp.down_proj.weight", "q6_K"),
                                    ("blk.0.attn_q.weight", "layers.0.self_attn.q_proj.weight", "q5_0")]:
        ref = quantize(w[src_name].float().numpy(), qt)
        assert bytes(r[gguf_name].data.tobytes()) == ref.tobytes(), gguf_name


@pytest.mark.parametrize("drafter", ["qwen3-flat", "qwen3-nested", "qwen3-dflash2"])
@pytest.mark.parametrize("ftype", ["q8_0", "q4_k_m"])
def test_convert_outtype_equals_convert_then_quantize(cli, tmp_path, drafter, ftype):
    bf16 = convert(cli, tmp_path, drafter, "llama.cpp", name="a.gguf")
    two = tmp_path / "two.gguf"
    assert cli("quantize", bf16, two, ftype)[0] == 0
    one = convert(cli, tmp_path, drafter, "llama.cpp", outtype=ftype, name="one.gguf")
    assert one.read_bytes() == two.read_bytes()


def test_rerun_is_byte_identical(cli, tmp_path):
    src = convert(cli, tmp_path, "qwen3-nested", "dflash-draft")
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    assert cli("quantize", src, a, "q4_k_m")[0] == 0
    assert cli("quantize", src, b, "q4_k_m")[0] == 0
    assert a.read_bytes() == b.read_bytes()


def test_requantize_refused_unless_allowed(cli, tmp_path):
    src = convert(cli, tmp_path, "qwen3-flat", "lucebox", outtype="q8_0")
    code, _, se = cli("quantize", src, tmp_path / "x.gguf", "q4_k_m")
    assert code == 8 and "already Q8_0" in se and "--allow-requantize" in se
    assert not (tmp_path / "x.gguf").exists()
    code, _, se = cli("quantize", src, tmp_path / "x.gguf", "q4_k_m", "--allow-requantize")
    assert code == 0, se


def test_unknown_type_and_nan_refused(cli, tmp_path):
    src = convert(cli, tmp_path, "qwen3-flat", "lucebox", outtype="f32")
    code, _, se = cli("quantize", src, tmp_path / "x.gguf", "q9_k")  # not a llama-quantize type: usage
    assert code == 2 and "unsupported file type 'q9_k'" in se and "Q4_K_M" in se
    code, _, se = cli("quantize", src, tmp_path / "x.gguf", "iq2_xxs")  # one it refuses without an imatrix
    assert code == 8 and "requires an importance matrix" in se and not (tmp_path / "x.gguf").exists()
    # plant a NaN in one F32 weight

    def plant_nan(a):
        a = a.copy()
        a.reshape(-1)[7] = np.nan
        return a

    bad = rewrite_gguf(src, tmp_path / "nan.gguf", data={"blk.0.ffn_up.weight": plant_nan})
    code, _, se = cli("quantize", bad, tmp_path / "y.gguf", "q8_0")
    assert code == 8 and "blk.0.ffn_up.weight" in se and "Traceback" not in se
    assert not (tmp_path / "y.gguf").exists()


def test_dry_run_json(cli, tmp_path):
    src = convert(cli, tmp_path, "qwen3-flat", "llama.cpp")
    code, so, se = cli("quantize", src, tmp_path / "n.gguf", "q4_k_m", "--dry-run", "--json")
    assert code == 0, se
    plan = json.loads(so)
    names = [t["name"] for t in plan["tensors"]]
    # llama-quantize's processing order: non-blk names first (bytewise), then by layer
    assert names[:3] == ["enc.output_norm.weight", "fc.weight", "output_norm.weight"]
    assert names[3].startswith("blk.0.") and names[-1].startswith("blk.1.")
    fc = next(t for t in plan["tensors"] if t["name"] == "fc.weight")
    assert fc["from"] == "BF16" and fc["to"] == "Q4_K"
    assert not (tmp_path / "n.gguf").exists()


# --- real llama-quantize (llama-cpp-python 0.3.36) --------------------------------------------
LQ = r'''
import sys, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = int(sys.argv[3]); p.nthread = 2
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))
'''


def make_wide_drafter(tmp_path):
    """A drafter whose rows are multiples of 256, so Q4_K/Q6_K are used without fallbacks."""
    from safetensors.numpy import save_file

    H, I, L, hd = 256, 512, 4, 64
    rng = np.random.default_rng(7)
    m = lambda *s: (rng.standard_normal(s, dtype=np.float32) * 0.02)  # noqa: E731
    one = lambda n: (1 + 0.05 * rng.standard_normal(n, dtype=np.float32))  # noqa: E731
    t = {"fc.weight": m(H, 2 * H), "hidden_norm.weight": one(H), "norm.weight": one(H)}
    for i in range(L):
        p = f"layers.{i}."
        t.update({p + "input_layernorm.weight": one(H), p + "post_attention_layernorm.weight": one(H),
                  p + "self_attn.q_proj.weight": m(4 * hd, H), p + "self_attn.k_proj.weight": m(2 * hd, H),
                  p + "self_attn.v_proj.weight": m(2 * hd, H), p + "self_attn.o_proj.weight": m(H, 4 * hd),
                  p + "self_attn.q_norm.weight": one(hd), p + "self_attn.k_norm.weight": one(hd),
                  p + "mlp.gate_proj.weight": m(I, H), p + "mlp.up_proj.weight": m(I, H),
                  p + "mlp.down_proj.weight": m(H, I)})
    d = tmp_path / "wide"
    d.mkdir()
    save_file(t, d / "model.safetensors")
    cfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": H, "intermediate_size": I,
           "num_hidden_layers": L, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": hd,
           "rms_norm_eps": 1e-6, "rope_theta": 1e6, "vocab_size": 512, "block_size": 16, "num_target_layers": 5,
           "max_position_embeddings": 2048,
           "dflash_config": {"mask_token_id": 500, "target_layer_ids": [1, 3]}}
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def wide_target(tmp_path, hidden):
    """A target GGUF with the fixture vocab but a wider hidden size (tokenizer keys copied from
    llama-tiny.gguf): what a hidden-256 drafter needs for its mainline tokenizer."""
    r = GGUFReader(TARGETS / "llama-tiny.gguf")
    out = tmp_path / "wide-target.gguf"
    w = GGUFWriter(out, "llama")
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        value = hidden if k == "llama.embedding_length" else (5 if k == "llama.block_count" else f.contents())
        w.add_key_value(k, value, f.types[0], sub_type=f.types[1] if len(f.types) > 1 else None)
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("ftype,ftype_id", [("q8_0", 7), ("q4_k_m", 15)])
def test_whole_file_equals_real_llama_quantize(cli, tmp_path, ftype, ftype_id):
    pytest.importorskip("llama_cpp")
    d = make_wide_drafter(tmp_path)
    src = tmp_path / "f32.gguf"
    code, _, se = cli("convert", d, "--outtype", "f32", "-o", src, "--target-gguf", wide_target(tmp_path, 256))
    assert code == 0, se
    ours, ref = tmp_path / "ours.gguf", tmp_path / "ref.gguf"
    assert cli("quantize", src, ours, ftype)[0] == 0
    r = subprocess.run([sys.executable, "-c", LQ, str(src), str(ref), str(ftype_id)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-1000:]
    assert ours.read_bytes() == ref.read_bytes()
    if ftype == "q4_k_m":
        t = types(ours)
        assert t["blk.0.attn_q.weight"] == "Q4_K" and t["blk.3.ffn_down.weight"] == "Q6_K"
        assert t["blk.1.ffn_down.weight"] == "Q4_K"


@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["qwen3-flat", "qwen3-dflash2"])
@pytest.mark.parametrize("ftype,ftype_id", [("q8_0", 7), ("q4_k_m", 15)])
def test_fixture_equals_real_llama_quantize_and_loads(cli, tmp_path, drafter, ftype, ftype_id):
    pytest.importorskip("llama_cpp")
    src = convert(cli, tmp_path, drafter, "llama.cpp")
    ours, ref = tmp_path / "ours.gguf", tmp_path / "ref.gguf"
    assert cli("quantize", src, ours, ftype)[0] == 0
    r = subprocess.run([sys.executable, "-c", LQ, str(src), str(ref), str(ftype_id)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-1000:]
    assert ours.read_bytes() == ref.read_bytes()
    from tests.convert.test_llamacpp_ground_truth import load

    assert load(ours) == "LOADED"


def test_custom_alignment_is_honoured(cli, tmp_path):
    """An input with general.alignment keeps it, and the data really is aligned to it."""
    from dflash_gguf.fileio.gguf_header import read_header

    src = convert(cli, tmp_path, "qwen3-flat", "lucebox", outtype="f32")
    aligned = rewrite_gguf(src, tmp_path / "a64.gguf", alignment=64)
    out = tmp_path / "q.gguf"
    code, _, se = cli("quantize", aligned, out, "q8_0")
    assert code == 0, se
    h = read_header(out)
    assert h.alignment == 64 and h.data_offset % 64 == 0
    assert all((t.offset_abs - h.data_offset) % 64 == 0 for t in h.tensors)
    assert cli("check", out)[0] == 0


# --- DSpark drafters: an I64 d2t copied, a [1, n] conf_proj written 1-D, as llama-quantize does ------
LQ_MANY = r'''
import sys, llama_cpp
for src, dst, ftype in zip(*[iter(sys.argv[1:])] * 3):
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = int(ftype); p.nthread = 2
    print(dst, llama_cpp.llama_model_quantize(src.encode(), dst.encode(), p), flush=True)
'''
DSPARK_QUANT = [(c, f, i) for c in ("qwen3-reduced", "speculator", "gemma4") for f, i in (("q8_0", 7), ("q4_k_m", 15))]


@pytest.mark.parametrize("case", ["qwen3-reduced", "gemma4"])
@pytest.mark.parametrize("ftype", ["q8_0", "q4_k_m"])
def test_dspark_convert_outtype_equals_convert_then_quantize(cli, dspark, tmp_path, case, ftype):
    direct, two_step = tmp_path / "direct.gguf", tmp_path / "two.gguf"
    code, _, se = cli("convert", dspark["dirs"][case], "--target-dir", dspark["target"], "--outtype", ftype,
                      "-o", direct)
    assert code == 0, se
    assert cli("quantize", dspark["gguf"][case], two_step, ftype)[0] == 0
    assert direct.read_bytes() == two_step.read_bytes()


@pytest.mark.slow
def test_dspark_whole_files_equal_real_llama_quantize_and_load(cli, dspark, tmp_path):
    pytest.importorskip("llama_cpp")
    from tests.convert.test_dspark import load_many

    args, pairs = [], []
    for case, ftype, ftype_id in DSPARK_QUANT:
        ours, ref = tmp_path / f"{case}-{ftype}-ours.gguf", tmp_path / f"{case}-{ftype}-ref.gguf"
        assert cli("quantize", dspark["gguf"][case], ours, ftype)[0] == 0
        args += [str(dspark["gguf"][case]), str(ref), str(ftype_id)]
        pairs.append((ours, ref))
    r = subprocess.run([sys.executable, "-c", LQ_MANY, *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.count(" 0\n") == len(pairs), r.stderr[-1000:]
    for ours, ref in pairs:
        assert ours.read_bytes() == ref.read_bytes(), ours.name
    assert set(load_many([o for o, _ in pairs]).values()) == {"LOADED"}


# --- streaming on a thread pool: the bytes do not depend on threads or task size ----------------
def odd_gguf(path, nan_at=None):
    """Rows that split unevenly into tasks, one tensor per source type and several target types:
    ffn_up BF16 -> Q4_K, ffn_down F16 -> Q6_K (use_more_bits), attn_q F32 ne0 = 96 -> Q5_0
    (Q4_K fallback), attn_v BF16 (37 rows) -> Q6_K, a norm copied as F32."""
    rng = np.random.default_rng(3)
    bf16 = lambda a: ((a.view(np.uint32) + 0x8000) >> 16).astype(np.uint16)  # noqa: E731
    m = lambda r, c: (rng.standard_normal((r, c), dtype=np.float32) * 0.02)  # noqa: E731
    up = m(37, 512)
    if nan_at is not None:
        up[nan_at] = np.nan
    w = GGUFWriter(path, "llama")
    w.add_uint32("llama.block_count", 1)
    w.add_tensor("blk.0.ffn_up.weight", bf16(up), raw_dtype=Q_.BF16)
    w.add_tensor("blk.0.ffn_down.weight", m(29, 768).astype(np.float16))
    w.add_tensor("blk.0.attn_q.weight", m(41, 96))
    w.add_tensor("blk.0.attn_v.weight", bf16(m(37, 256)), raw_dtype=Q_.BF16)
    w.add_tensor("blk.0.attn_norm.weight", 1 + m(1, 1000)[0])
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return path


def reference_bytes(src, ftype):
    """Each tensor quantized whole through the public array API (one call, its own threads)."""
    from dflash_gguf.quants import dequantize, quantize
    from dflash_gguf.quants.gguf_file import quantize_gguf

    plan = {e.name: e for e in quantize_gguf(src, None, ftype, dry_run=True).tensors}
    r = GGUFReader(src)
    out = {}
    for t in r.tensors:
        e = plan[t.name]
        raw = np.asarray(t.data).view(np.uint8).reshape(-1)
        x = dequantize(raw, e.src_type, e.shape)
        out[t.name] = quantize(x, e.ggml_type).reshape(-1).tobytes() if e.quantized else raw.tobytes()
    return out


@pytest.mark.parametrize("ftype", ["q4_k_m", "q8_0"])
@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_threads_and_task_size_do_not_change_bytes(tmp_path, monkeypatch, backend, ftype):
    from dflash_gguf.quants import _numba, gguf_file
    from dflash_gguf.quants.gguf_file import quantize_gguf

    if backend == "numba" and not _numba.AVAILABLE:
        pytest.skip("numba is not installed")
    prev = _numba.set_enabled(backend == "numba")
    try:
        src = odd_gguf(tmp_path / "odd.gguf")
        quantize_gguf(src, tmp_path / "one.gguf", ftype, threads=1)
        want = (tmp_path / "one.gguf").read_bytes()
        got = {t.name: bytes(t.data.tobytes()) for t in GGUFReader(tmp_path / "one.gguf").tensors}
        assert got == reference_bytes(src, ftype)
        # tasks of 3 rows (a remainder of 1 row in every tensor)
        monkeypatch.setattr(gguf_file, "TASK_VALUES", 3 * 512)
        for n in (1, 2, 3):
            quantize_gguf(src, tmp_path / f"t{n}.gguf", ftype, threads=n)
            assert (tmp_path / f"t{n}.gguf").read_bytes() == want, n
    finally:
        _numba.set_enabled(prev)


def test_tensors_stream_in_bounded_tasks(tmp_path, monkeypatch):
    """Each task reads at most TASK_VALUES values (whole rows; one row when a row is longer), big
    tensors take several tasks, and no more than the window of tasks is ever under way."""
    from dflash_gguf.fileio.gguf_reader import TensorReader
    from dflash_gguf.quants import gguf_file
    from dflash_gguf.quants.gguf_file import _Pipeline, quantize_gguf

    reads, most_running = [], [0]
    real_read, real_take = TensorReader.read, _Pipeline._take

    def read(self, t, start, size, into=None):
        reads.append((t.name, size))
        return real_read(self, t, start, size, into)

    def take(self, number, count):
        for chunk in real_take(self, number, count):
            most_running[0] = max(most_running[0], len(self.running) + 1)
            assert len(self.running) < self.window
            yield chunk

    monkeypatch.setattr(TensorReader, "read", read)
    monkeypatch.setattr(_Pipeline, "_take", take)
    monkeypatch.setattr(gguf_file, "TASK_VALUES", 1000)  # < one 768-value row x 2: one row per task there
    src = odd_gguf(tmp_path / "odd.gguf")
    quantize_gguf(src, tmp_path / "q.gguf", "q4_k_m", threads=2)
    by = {}
    for name, size in reads:
        by.setdefault(name, []).append(size)
    assert by["blk.0.ffn_up.weight"] == [512 * 2] * 37  # one BF16 row (2 bytes a value) per task
    assert by["blk.0.ffn_down.weight"] == [768 * 2] * 29  # a row longer than TASK_VALUES: one per task
    assert by["blk.0.attn_q.weight"] == [10 * 96 * 4] * 4 + [96 * 4]  # F32, 10 rows per task
    assert "blk.0.attn_norm.weight" not in by  # kept F32: copied file to file by the writer, never read here
    assert 2 < most_running[0] <= 5  # the window (2 * threads + 1) filled, never exceeded


def test_non_finite_index_is_in_the_whole_tensor(tmp_path, monkeypatch):
    from dflash_gguf.errors import QuantizationError
    from dflash_gguf.quants import _numba, gguf_file
    from dflash_gguf.quants.gguf_file import quantize_gguf

    src = odd_gguf(tmp_path / "nan.gguf", nan_at=(20, 7))
    monkeypatch.setattr(gguf_file, "TASK_VALUES", 3 * 512)  # row 20 is in the 7th task
    for use_numba in ([False, True] if _numba.AVAILABLE else [False]):
        prev = _numba.set_enabled(use_numba)
        try:
            with pytest.raises(QuantizationError, match=r"blk\.0\.ffn_up\.weight.*\(20, 7\)"):
                quantize_gguf(src, tmp_path / "x.gguf", "q4_k_m", threads=2)
        finally:
            _numba.set_enabled(prev)
        assert not (tmp_path / "x.gguf").exists()


@pytest.mark.parametrize("threads", [0, -2, True])
def test_threads_must_be_positive(tmp_path, threads):
    from dflash_gguf.errors import UsageError
    from dflash_gguf.quants.gguf_file import quantize_gguf

    src = odd_gguf(tmp_path / "odd.gguf")
    with pytest.raises(UsageError, match="--threads must be at least 1"):
        quantize_gguf(src, tmp_path / "x.gguf", "q8_0", threads=threads)


ENV_PROBE = r'''
import sys
from dflash_gguf.quants import _numba
from dflash_gguf.quants.gguf_file import quantize_gguf
quantize_gguf(sys.argv[1], sys.argv[2], "q4_k_m")
print(_numba.enabled(), "numba" in sys.modules)
'''


@pytest.mark.parametrize("value,want", [("0", "False False"), ("1", "True True")])
def test_numba_env_switch_in_a_fresh_process(tmp_path, value, want):
    """DFLASH_GGUF_NUMBA=0 runs the numpy path without even importing numba; the default runs
    the kernels. Same bytes either way."""
    from dflash_gguf.quants import _numba

    if value == "1" and not _numba.AVAILABLE:
        pytest.skip("numba is not installed")
    src = odd_gguf(tmp_path / "odd.gguf")
    env = dict(os.environ, DFLASH_GGUF_NUMBA=value)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = tmp_path / f"q{value}.gguf"
    r = subprocess.run([sys.executable, "-c", ENV_PROBE, str(src), str(out)], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[-2] == want
    from dflash_gguf.quants.gguf_file import quantize_gguf

    quantize_gguf(src, tmp_path / "here.gguf", "q4_k_m")
    assert out.read_bytes() == (tmp_path / "here.gguf").read_bytes()
