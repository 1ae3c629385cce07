"""MiMo-style drafters (attention sinks, value scale, partial rotary, use_swa, a mask_embedding.pt
side file) and interleaved-rope checkpoints: ours against llama.cpp's own converter, byte for
byte, and the side file's failure modes."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import DRAFTERS, TARGETS
from tests.convert.conftest import kvs, tensors

torch = pytest.importorskip("torch")

MIMO_KNOBS = {"use_swa": True, "swa_window_size": 8, "backbone_rotary_base": 5000000,
              "attention_value_scale": 0.612, "attention_sink_bias": True, "num_anchors": 4096}


def make_mimo(tmp_path: Path, *, mask: bool = True, neox: bool = True, name: str = "mimo") -> Path:
    """qwen3-flat with MiMo's published knobs (see fixtures/published) and its extra tensors."""
    from safetensors.torch import load_file, save_file

    d = tmp_path / name
    shutil.copytree(DRAFTERS / "qwen3-flat", d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(v_head_dim=cfg["head_dim"], partial_rotary_factor=0.5, sliding_window=8)
    cfg["dflash_config"].update(MIMO_KNOBS)
    if not neox:
        cfg["rope_is_neox_style"] = False
    (d / "config.json").write_text(json.dumps(cfg))
    g = torch.Generator().manual_seed(0)
    weights = load_file(d / "model.safetensors")
    for i in range(cfg["num_hidden_layers"]):
        weights[f"layers.{i}.self_attn.attention_sink_bias"] = torch.randn(
            cfg["num_attention_heads"], generator=g).to(torch.bfloat16)
    save_file(weights, d / "model.safetensors")
    if mask:
        torch.save({"mask_token_id": cfg["dflash_config"]["mask_token_id"],
                    "embedding": torch.randn(cfg["hidden_size"], generator=g, dtype=torch.float32)},
                   d / "mask_embedding.pt")
    return d


def target_with_head(tmp_path: Path, tied: bool) -> Path:
    """llama-tiny (same vocab and hidden as qwen3-flat), deepened, with an untied output head
    unless ``tied``."""
    from safetensors.torch import load_file, save_file

    d = tmp_path / ("tied" if tied else "untied")
    shutil.copytree(TARGETS / "llama-tiny", d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(num_hidden_layers=5, tie_word_embeddings=tied)
    (d / "config.json").write_text(json.dumps(cfg))
    if not tied:
        w = load_file(d / "model.safetensors")
        w["lm_head.weight"] = torch.randn(w["model.embed_tokens.weight"].shape,
                                          generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
        save_file(w, d / "model.safetensors")
    return d


def run_reference(src: Path, drafter: Path, target: Path, out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(src / "gguf-py")}
    r = subprocess.run([sys.executable, str(src / "convert_hf_to_gguf.py"), str(drafter), "--target-model-dir",
                        str(target), "--outfile", str(out), "--outtype", "auto"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("tied,neox", [(False, True), (True, False)])
def test_mimo_matches_llama_cpp_converter(cli, tmp_path, tied, neox):
    from tests.convert.test_llamacpp_ground_truth import IGNORED, llama_src

    src = llama_src()
    drafter, target = make_mimo(tmp_path, neox=neox), target_with_head(tmp_path, tied)
    ref, ours = tmp_path / "ref.gguf", tmp_path / "ours.gguf"
    run_reference(src, drafter, target, ref)
    code, _, err = cli("convert", drafter, "--target-dir", target, "-o", ours)
    assert code == 0, err
    ref_kv = {k: v for k, v in kvs(ref).items() if k not in IGNORED}
    our_kv = {k: v for k, v in kvs(ours).items() if k not in IGNORED}
    assert our_kv == ref_kv
    ref_t, our_t = tensors(ref), tensors(ours)
    assert our_t == ref_t
    # the cases under test really happened
    assert {"token_embd.weight", "output.weight", "blk.0.attn_sinks.weight"} <= set(ref_t)
    assert our_kv["dflash.attention.value_scale"][0] == pytest.approx(0.612)
    assert list(our_kv["dflash.attention.sliding_window_pattern"][0]) == [True, True]


def test_mask_row_and_permutation_values(cli, tmp_path):
    """Independent of llama.cpp: the embedding table is the target's with exactly one row
    replaced by the side file's vector (torch's bf16 rounding), and interleaved Q rows come
    out even-dims-first per head."""
    from safetensors.torch import load_file

    drafter, target = make_mimo(tmp_path, neox=False), target_with_head(tmp_path, tied=False)
    out = tmp_path / "d.gguf"
    code, _, err = cli("convert", drafter, "--target-dir", target, "-o", out)
    assert code == 0, err
    t = tensors(out)
    table = load_file(target / "model.safetensors")["model.embed_tokens.weight"].view(torch.int16).numpy()
    got = np.frombuffer(t["token_embd.weight"][1], dtype=np.int16).reshape(table.shape)
    mask = torch.load(drafter / "mask_embedding.pt", weights_only=True)
    row = mask["embedding"].to(torch.bfloat16).view(torch.int16).numpy()
    i = mask["mask_token_id"]
    assert np.array_equal(got[i], row) and not np.array_equal(table[i], row)
    assert np.array_equal(np.delete(got, i, 0), np.delete(table, i, 0))
    q = load_file(drafter / "model.safetensors")["layers.0.self_attn.q_proj.weight"].view(torch.int16).numpy()
    gq = np.frombuffer(t["blk.0.attn_q.weight"][1], dtype=np.int16).reshape(q.shape)
    hd = 16
    assert np.array_equal(gq[:hd // 2], q[0:hd:2]) and np.array_equal(gq[hd // 2:hd], q[1:hd:2])


def test_mask_tables_from_a_target_gguf(cli, tmp_path):
    """--target-gguf: a float target GGUF gives the same table bytes (tied: token_embd is the head)."""
    from tests.conftest import rewrite_gguf

    drafter = make_mimo(tmp_path)
    target = rewrite_gguf(TARGETS / "llama-tiny.gguf", tmp_path / "t.gguf", values={"llama.block_count": 5})
    out = tmp_path / "d.gguf"
    code, _, err = cli("convert", drafter, "--target-gguf", target, "-o", out)
    assert code == 0, err
    t, ref = tensors(out), tensors(target)
    assert t["output.weight"] == ref["token_embd.weight"]
    diff = np.frombuffer(t["token_embd.weight"][1], np.int16) != np.frombuffer(ref["token_embd.weight"][1], np.int16)
    assert np.flatnonzero(diff.reshape(512, 64).any(1)).tolist() == [500]  # only the mask row differs


@pytest.mark.parametrize("case,needle", [
    ("no-target", "mask_embedding.pt needs the target's embeddings and output head"),
    ("wrong-id", "does not match dflash_config's 500"),
    ("wrong-shape", "expected [64] (hidden_size)"),
    ("pickle", "not a readable tensor file"),
    ("lucebox", "--format lucebox borrows the target's embeddings"),
])
def test_side_file_errors_are_one_line_and_leave_nothing(cli, tmp_path, case, needle):
    drafter = make_mimo(tmp_path)
    target = target_with_head(tmp_path, tied=True)
    args = ["--target-dir", target]
    if case == "no-target":  # lucebox needs no tokenizer, so the side file's own need is what fails
        args = ["--format", "lucebox"]
    elif case == "wrong-id":
        torch.save({"mask_token_id": 7, "embedding": torch.zeros(64)}, drafter / "mask_embedding.pt")
    elif case == "wrong-shape":
        torch.save({"mask_token_id": 500, "embedding": torch.zeros(65)}, drafter / "mask_embedding.pt")
    elif case == "pickle":
        import pickle

        class Evil:
            def __reduce__(self):
                return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))
        (drafter / "mask_embedding.pt").write_bytes(pickle.dumps(Evil()))
    elif case == "lucebox":
        args += ["--format", "lucebox"]
    out = tmp_path / "out.gguf"
    rc, _, err = cli("convert", drafter, *args, "-o", out)
    assert rc != 0 and needle in err and err.strip().count("\n") == 0, err
    assert not out.exists() and not (tmp_path / "pwned").exists()


def test_compare_weights_understands_the_conversion(cli, tmp_path):
    """compare-weights on a MiMo + interleaved-rope conversion: everything bit-identical (the
    permutation applied to the checkpoint side, the target tables noted, not flagged)."""
    import json as _json

    drafter, target = make_mimo(tmp_path, neox=False), target_with_head(tmp_path, tied=False)
    out = tmp_path / "d.gguf"
    assert cli("convert", drafter, "--target-dir", target, "-o", out)[0] == 0
    code, so, err = cli("compare-weights", drafter, out, "--json")
    doc = _json.loads(so)["payload"]
    statuses = {t["status"] for t in doc["tensors"]}
    assert code == 0 and statuses == {"bit-identical"}, (statuses, err)
    assert any("mask_embedding.pt" in n for n in doc["notes"])


@pytest.mark.slow
def test_real_llama_cpp_loads_a_mimo_drafter(cli, tmp_path):
    from tests.convert.test_llamacpp_ground_truth import load

    drafter, target = make_mimo(tmp_path, neox=False), target_with_head(tmp_path, tied=False)
    out = tmp_path / "d.gguf"
    assert cli("convert", drafter, "--target-dir", target, "-o", out)[0] == 0
    assert load(out) == "LOADED"
