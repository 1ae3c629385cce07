"""GGUF → checkpoint-named float32 weights + the config the file implies (used by parity)."""
import numpy as np
import pytest

# dflash_gguf.reference imports torch (its models are torch modules), and so does the reference
# checkpoint reader below: every test here needs it.
pytest.importorskip("torch", reason="torch is not installed (the [torch] extra)")
from safetensors.torch import load_file  # noqa: E402

from dflash_gguf.config import load_config
from dflash_gguf.formats import FORMATS
from dflash_gguf.quants.ftypes import FTYPE_IDS
from dflash_gguf.reference.from_gguf import drafter_from_gguf, target_from_gguf, unpermute_rope

from tests.conftest import DRAFTERS, RUNTIME, TARGETS

FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
          "head_dim", "rms_norm_eps", "rope_theta", "mask_token_id", "target_layer_ids", "block_size",
          "sliding_window", "swa_pattern", "is_causal", "final_logit_softcapping", "output_multiplier",
          "input_embedding_scale", "is_dflash2", "conv_kernel_size", "selector_rank", "vocab_size",
          "max_position_embeddings")


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("drafter,target", [("qwen3-nested", ("--target-dir", TARGETS / "qwen3-tiny")),
                                            ("gemma-style", ("--target-gguf", TARGETS / "llama-tiny.gguf")),
                                            ("qwen3-dflash2", ("--target-dir", TARGETS / "qwen3-tiny"))])
def test_drafter_config_and_weights_round_trip(cli, tmp_path, drafter, target, fmt):
    out = tmp_path / "d.gguf"
    code, _, se = cli("convert", DRAFTERS / drafter, "--format", fmt, "-o", out, *target)
    if drafter == "qwen3-dflash2" and fmt != "llama.cpp":
        assert code == 2
        return
    assert code == 0, se
    cfg, weights, name = drafter_from_gguf(out)
    assert name == fmt
    ref = load_config(DRAFTERS / drafter)
    for f in FIELDS:
        got, want = getattr(cfg, f), getattr(ref, f)
        assert got == pytest.approx(want) if isinstance(want, float) else got == want, f
    src = {k: v.float().numpy() for k, v in load_file(DRAFTERS / drafter / "model.safetensors").items()}
    assert set(weights) == set(src)
    for k in src:
        assert np.array_equal(weights[k], src[k]), k


def test_quantized_drafter_dequantizes_close(cli, tmp_path):
    out = tmp_path / "q.gguf"
    assert cli("convert", DRAFTERS / "qwen3-flat", "--format", "lucebox", "--outtype", "q8_0", "-o", out)[0] == 0
    _, weights, _ = drafter_from_gguf(out)
    src = load_file(DRAFTERS / "qwen3-flat" / "model.safetensors")
    w, r = weights["fc.weight"], src["fc.weight"].float().numpy()
    assert not np.array_equal(w, r)
    assert np.abs(w - r).max() < 0.01 * np.abs(r).max()


def test_llama_target_gguf_unpermutes_q_and_k():
    tc, w = target_from_gguf(TARGETS / "llama-tiny.gguf")
    ref = load_file(TARGETS / "llama-tiny" / "model.safetensors")
    assert tc.model_type == "llama" and tc.num_hidden_layers == 3 and tc.tie_word_embeddings
    for k, v in ref.items():
        assert np.array_equal(w[k], v.float().numpy()), k
    x = np.arange(4 * 8 * 3, dtype=np.float32).reshape(32, 3)
    permuted = x.reshape(4, 2, 4, 3).swapaxes(1, 2).reshape(32, 3)
    assert np.array_equal(unpermute_rope(permuted, 4), x)


def test_not_a_target(cli, tmp_path):
    from dflash_gguf.errors import GGUFFormatError

    out = tmp_path / "d.gguf"
    assert cli("convert", DRAFTERS / "qwen3-flat", "--format", "lucebox", "-o", out)[0] == 0
    with pytest.raises(GGUFFormatError, match="not a supported reference target"):
        target_from_gguf(out)


# --- hostile keys (found by tests/fuzz/test_fuzz_gguf_doors.py): one GGUFFormatError naming the key
def _retyped(src, dst, kvs=None, tensors=None):
    """Copy ``src`` with gguf-py, ``kvs`` {key: (value, type, sub_type) | None to drop} and
    ``tensors`` {name: (array, raw_dtype)} replacing what the file has."""
    from gguf import GGUFReader, GGUFWriter

    r = GGUFReader(src)
    w = GGUFWriter(dst, str(r.fields["general.architecture"].contents()))
    kvs = kvs or {}
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture" or k in kvs:
            continue
        w.add_key_value(k, f.contents(), f.types[0], sub_type=f.types[1] if len(f.types) > 1 else None)
    for k, spec in kvs.items():
        if spec is not None:
            w.add_key_value(k, spec[0], spec[1], sub_type=spec[2] if len(spec) > 2 else None)
    for t in r.tensors:
        arr, typ = (tensors or {}).get(t.name, (np.array(t.data), t.tensor_type))
        w.add_tensor(t.name, arr, raw_dtype=typ)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return dst


@pytest.fixture(scope="module")
def flat_gguf(tmp_path_factory):
    from dflash_gguf.cli import main

    out = tmp_path_factory.mktemp("flat") / "flat.gguf"
    assert main(["convert", str(DRAFTERS / "qwen3-flat"), "--target-dir", str(TARGETS / "qwen3-tiny"),
                 "-o", str(out)]) == 0
    return out


@pytest.mark.parametrize("key,spec,match", [
    # was ValueError: could not convert string to float: '[bold'
    ("dflash.attention.layer_norm_rms_epsilon", ("[bold", "STRING"), "is STRING '\\[bold', but loaders read a number"),
    # was OverflowError: cannot convert float infinity to integer
    ("dflash.attention.key_length", (float("-inf"), "FLOAT32"), "is FLOAT32 -inf, but loaders read an integer"),
    ("dflash.rope.freq_base", (float("nan"), "FLOAT32"), "is FLOAT32 nan, but loaders read a positive finite number"),
    # was ZeroDivisionError
    ("dflash.attention.head_count", (0, "UINT32"), "is UINT32 0, but loaders read an integer in \\[1, 4,294,967,295\\]"),
    ("dflash.attention.causal", (1, "UINT8"), "is UINT8 1, but loaders read a BOOL"),
    ("dflash.rope.scaling.type", (3, "UINT32"), "is UINT32 3, but loaders read a STRING"),
    ("dflash.attention.sliding_window", ("8", "STRING"), "is STRING '8', but loaders read an integer"),
    ("dflash.logit_scale", ([0.5], "ARRAY", "FLOAT32"), "is ARRAY\\[FLOAT32\\] \\[0.5\\], but loaders read a number"),
])
def test_drafter_key_of_the_wrong_type(flat_gguf, tmp_path, key, spec, match):
    from gguf import GGUFValueType as V

    from dflash_gguf.errors import GGUFFormatError

    value, typ, *sub = spec
    bad = _retyped(flat_gguf, tmp_path / "bad.gguf", {key: (value, V[typ], *(V[s] for s in sub))})
    with pytest.raises(GGUFFormatError, match=f"key {key} \\(at byte [0-9,]+\\) has unexpected types: it {match}"):
        drafter_from_gguf(bad)


def test_drafter_block_count_must_match_the_tensors(flat_gguf, tmp_path):
    """A corrupt block_count (here 100,000) must not have the reference build that many layers."""
    from gguf import GGUFValueType as V

    from dflash_gguf.errors import GGUFFormatError

    bad = _retyped(flat_gguf, tmp_path / "bad.gguf", {"dflash.block_count": (100_000, V.UINT32)})
    with pytest.raises(GGUFFormatError, match="dflash.block_count = 100,000 but the file has tensors for 2 layers"):
        drafter_from_gguf(bad)


def test_drafter_sliding_window_pattern_is_checked(flat_gguf, tmp_path):
    from gguf import GGUFValueType as V

    from dflash_gguf.errors import GGUFFormatError

    bad = _retyped(flat_gguf, tmp_path / "bad.gguf", {"dflash.attention.sliding_window": (8, V.UINT32),
                                                       "dflash.attention.sliding_window_pattern": ([True], V.ARRAY, V.BOOL)})
    with pytest.raises(GGUFFormatError, match="sliding_window_pattern has 1 entries for 2 layers"):
        drafter_from_gguf(bad)
    bad = _retyped(flat_gguf, tmp_path / "bad2.gguf", {"dflash.attention.sliding_window": (8, V.UINT32),
                                                        "dflash.attention.sliding_window_pattern": ([1, 0], V.ARRAY, V.INT32)})
    with pytest.raises(GGUFFormatError, match="loaders read a non-empty array of BOOL"):
        drafter_from_gguf(bad)


def test_drafter_tensor_of_an_undequantizable_type_is_a_weights_error(flat_gguf, tmp_path):
    """An I8 tensor is a WeightsError naming the file and tensor (not a bare QuantizationError, exit 8)."""
    from gguf import GGMLQuantizationType as Q

    from dflash_gguf.errors import WeightsError

    bad = _retyped(flat_gguf, tmp_path / "bad.gguf", tensors={"blk.0.ffn_up.weight": (np.zeros((256, 64), np.int8), Q.I8)})
    with pytest.raises(WeightsError, match=r"bad.gguf: tensor blk.0.ffn_up.weight \(I8, ne \[64, 256\]\): dequantizing I8"):
        drafter_from_gguf(bad)


@pytest.mark.parametrize("key,spec,match", [
    # was RuntimeError: Storage size calculation overflowed (torch, building the target)
    ("llama.feed_forward_length", (2**62, "UINT64"), "an integer in \\[1, 4,294,967,295\\]"),
    ("llama.block_count", (7, "UINT32"), "llama.block_count = 7 but the file has tensors for 3 layers"),
    ("llama.attention.layer_norm_rms_epsilon", ("x", "STRING"), "loaders read a number"),
    # was ValueError from numpy's reshape in unpermute_rope: 3 heads do not split Q's rows
    ("llama.attention.head_count", (3, "UINT32"), "blk.0.attn_q.weight has shape .* undo llama.cpp's rope permutation"),
])
def test_target_key_of_the_wrong_type(tmp_path, key, spec, match):
    from gguf import GGUFValueType as V

    from dflash_gguf.errors import GGUFFormatError

    bad = _retyped(TARGETS / "llama-tiny.gguf", tmp_path / "bad.gguf", {key: (spec[0], V[spec[1]])})
    with pytest.raises(GGUFFormatError, match=match):
        target_from_gguf(bad)


# --- MiMo and DSpark drafters: what the converter cannot write yet is added with gguf-py, in
# mainline's names and layouts (blk.N.attn_sinks.weight; markov_w1/markov_w2/conf_proj, output,
# token_embd; d2t as I64 absolute target ids; {arch}.sample_from_anchor)
def _with_extra(src, dst, tensors: dict, kvs: dict | None = None):
    from gguf import GGUFReader, GGUFWriter

    r = GGUFReader(src)
    arch = str(r.fields["general.architecture"].contents())
    w = GGUFWriter(dst, arch)
    for k, f in r.fields.items():
        if not k.startswith("GGUF.") and k != "general.architecture":
            w.add_key_value(k, f.contents(), f.types[0], sub_type=f.types[1] if len(f.types) > 1 else None)
    for k, (value, typ) in (kvs or {}).items():
        w.add_key_value(f"{arch}.{k}", value, typ)
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return dst


@pytest.fixture(scope="module")
def runtime_setup(tmp_path_factory):
    import shutil

    pytest.importorskip("torch")
    from dflash_gguf.reference import load_target, tiny

    root = tmp_path_factory.mktemp("rt")
    tcfg = tiny.target_config(vocab=512, layers=3, tie=False)
    tiny.save_target(root / "t", tcfg, seed=3)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TARGETS / "qwen3-tiny" / name, root / "t" / name)
    return root, tcfg, load_target(root / "t")


DSPARK_ONLY = ("markov_head.", "confidence_head.", "lm_head.", "embed_tokens.", "d2t", "t2d")


def _convert_backbone(root, name, cfg: dict, drop) -> tuple:
    """Convert the drafter's DFlash backbone (the tensors the converter knows) to an f32 GGUF."""
    import json

    from safetensors.torch import load_file, save_file

    from dflash_gguf.convert import convert

    base = root / f"{name}-base"
    base.mkdir()
    plain = {k: v for k, v in cfg.items() if k not in ("sample_from_anchor", "draft_vocab_size", "markov_rank")}
    if any(drop(k) for k in load_file(root / name / "model.safetensors") if k.endswith("attention_sink_bias")):
        # the sinks are added to the GGUF by hand below: the backbone's config must not promise them
        plain["dflash_config"] = {k: v for k, v in plain.get("dflash_config", {}).items() if k != "attention_sink_bias"}
    (base / "config.json").write_text(json.dumps({**plain, "architectures": ["DFlashDraftModel"]}))
    state = load_file(root / name / "model.safetensors")
    save_file({k: v for k, v in state.items() if not drop(k)}, base / "model.safetensors")
    out = root / f"{name}-base.gguf"
    convert(base, out, format="llama.cpp", outtype="f32", target_dir=root / "t")
    return out, state


def test_mimo_gguf_replays_the_reference(runtime_setup):
    import torch

    from dflash_gguf.reference import generate, load_drafter, teacher_forced, tiny
    from dflash_gguf.reference.load import drafter_from_gguf as load_gguf

    root, tcfg, target = runtime_setup
    cfg = tiny.drafter_config(tcfg, taps=(0, 2), extra={"partial_rotary_factor": 0.5}, dflash_extra={
        "use_swa": True, "swa_window_size": 6, "attention_sink_bias": True, "attention_value_scale": 0.6})
    tiny.save_drafter(root / "mimo", cfg, seed=5, residual=0.5)
    ref = load_drafter(root / "mimo")
    run = generate(ref, target, [1, 2, 3, 4, 5], 12, record=True)
    base, state = _convert_backbone(root, "mimo", cfg, lambda k: k.endswith("attention_sink_bias"))
    sinks = {f"blk.{k.split('.')[1]}.attn_sinks.weight": v.numpy() for k, v in state.items()
             if k.endswith("attention_sink_bias")}
    g = load_gguf(_with_extra(base, root / "mimo.gguf", sinks), root / "mimo")
    # every layer sliding and bidirectional, as vLLM reads the checkpoint's use_swa (the GGUF says
    # sliding_window + pattern and no attention.causal, which a runtime reads as non-causal)
    assert g.rules.layers == ref.rules.layers == ((False, 6), (False, 6))
    assert (g.rules.rotary_dim, g.rules.sinks) == (8, True) and g.rules.value_scale == pytest.approx(0.6)
    assert g.gguf_notes == []
    tf = teacher_forced(g, target, run)
    assert tf.max_abs_diff <= 1e-4 and tf.token_agreement == 1.0
    assert torch.equal(g.layers[1].self_attn.attention_sink_bias, ref.layers[1].self_attn.attention_sink_bias)
    # MiMo's mask_embedding.pt has no GGUF tensor yet: parity names what the GGUF drafter lacks
    torch.save({"mask_token_id": ref.mask_token_id, "embedding": torch.ones(64)}, root / "mimo" / "mask_embedding.pt")
    (note,) = load_gguf(root / "mimo.gguf", root / "mimo").gguf_notes
    assert "mask_embedding.pt" in note and "target's row" in note


@pytest.mark.parametrize("anchor_key", [False, None])
def test_dspark_gguf_replays_the_reference(runtime_setup, anchor_key):
    from gguf import GGUFValueType as V

    from dflash_gguf.reference import generate, load_drafter, teacher_forced, tiny
    from dflash_gguf.reference.load import drafter_from_gguf as load_gguf

    root, tcfg, target = runtime_setup
    name = f"dspark-{anchor_key}"
    cfg = tiny.drafter_config(tcfg, taps=(0, 2), extra={"architectures": ["DSparkDraftModel"], "markov_rank": 8,
                                                        "sample_from_anchor": False, "draft_vocab_size": 300})
    tiny.save_drafter(root / name, cfg, seed=5, residual=0.5, own_embed=True)
    ref = load_drafter(root / name)
    run = generate(ref, target, [1, 2, 3, 4, 5], 12, record=True)
    base, st = _convert_backbone(root, name, cfg, lambda k: k.startswith(DSPARK_ONLY))
    extra = {"markov_w1.weight": st["markov_head.markov_w1.weight"].numpy(),
             "markov_w2.weight": st["markov_head.markov_w2.weight"].numpy(),
             "conf_proj.weight": st["confidence_head.proj.weight"].numpy(),
             "conf_proj.bias": st["confidence_head.proj.bias"].numpy(),
             "output.weight": st["lm_head.weight"].numpy(), "token_embd.weight": st["embed_tokens.weight"].numpy(),
             "d2t": (np.arange(300) + st["d2t"].numpy()).astype(np.int64)}  # absolute ids, as mainline stores them
    kvs = {} if anchor_key is None else {"sample_from_anchor": (anchor_key, V.BOOL)}
    g = load_gguf(_with_extra(base, root / f"{name}.gguf", extra, kvs), root / name)
    assert np.array_equal(g.d2t.numpy(), st["d2t"].numpy())  # back to the checkpoint's offsets
    assert g.dspark == ref.dspark
    if anchor_key is None:
        # no key: a runtime drafts from slot 0 (llama.cpp's default), and parity says so
        assert g.first_draft_slot == 0
        assert g.gguf_notes == ["DSpark sample_from_anchor is True in the GGUF but False in config.json; "
                                "the GGUF's value is used, as a runtime would"]
        return
    assert g.gguf_notes == [] and g.first_draft_slot == 1
    tf = teacher_forced(g, target, run)
    assert tf.max_abs_diff <= 1e-4 and tf.token_agreement == 1.0


@pytest.mark.parametrize("ftype", list(FTYPE_IDS))
def test_every_quantize_file_type_loads_as_ggml_reads_it(quantized_drafter, ftype):
    """Parity's GGUF drafter: every file type quantize writes loads, with the source file's
    config, its weights dequantized exactly as ggml's to_float does (the live libggml-base; only
    the band check where it is not built) and within the type's compare band of the source."""
    from dflash_gguf.compare import BANDS
    from dflash_gguf.fileio.gguf_reader import read_gguf
    from dflash_gguf.reference.load import drafter_from_gguf as load_gguf
    from tests.compare.test_sides import ggml_values
    from tests.quants.test_quants import _ggml_base

    try:
        lib = _ggml_base()
    except pytest.skip.Exception:
        lib = None
    path = quantized_drafter(ftype)
    cfg, weights, fmt = drafter_from_gguf(path)
    want_cfg, src, _ = drafter_from_gguf(RUNTIME / "drafter.gguf")
    assert fmt == "llama.cpp" and set(weights) == set(src)
    for f in FIELDS:
        assert getattr(cfg, f) == getattr(want_cfg, f), f
    f = read_gguf(path)
    for t in f.tensors:
        name = FORMATS[fmt].source_name(t.name)
        w, x = weights[name], src[name]
        assert w.dtype == np.float32 and w.shape == x.shape
        rel = np.linalg.norm((w - x).astype(np.float64)) / np.linalg.norm(x.astype(np.float64))
        assert rel <= BANDS[t.ggml_type.name].rel_rms, t.name
        if lib is not None:
            want = ggml_values(lib, np.ascontiguousarray(f.raw(t)).reshape(-1), t.ggml_type, w.size)
            assert np.array_equal(w.reshape(-1).view(np.uint32), want.view(np.uint32)), t.name
    model = load_gguf(path, RUNTIME / "drafter" / "config.json", device="cpu")
    assert model.gguf_notes == []
