"""reference/load.py: checkpoint dirs → torch modules, through the validated safetensors reader."""
from __future__ import annotations

import json
import shutil
import time

import pytest

from dflash_gguf.errors import WeightsError
from tests.conftest import DRAFTERS

torch = pytest.importorskip("torch")

from dflash_gguf.reference import load_drafter  # noqa: E402


def test_depth_is_checked_before_the_module_is_built(tmp_path):
    # Found by the convert fuzz: a config claiming 60,000 layers over 2-layer weights made the
    # loader build 60,000 layers (minutes) before noticing the weights were missing.
    d = tmp_path / "d"
    shutil.copytree(DRAFTERS / "qwen3-flat", d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_hidden_layers"] = 60000
    (d / "config.json").write_text(json.dumps(cfg))
    t0 = time.perf_counter()
    with pytest.raises(WeightsError, match="the config says 60000 layers but the weights hold 2 "):
        load_drafter(d)
    assert time.perf_counter() - t0 < 10  # not a timing benchmark: a hang guard with a wide margin


def test_corrupt_safetensors_is_a_weights_error(tmp_path):
    d = tmp_path / "d"
    shutil.copytree(DRAFTERS / "qwen3-flat", d)
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[:-100])
    with pytest.raises(WeightsError):
        load_drafter(d)


def _mask_file(tmp_path, obj):
    d = tmp_path / "d"
    shutil.copytree(DRAFTERS / "qwen3-flat", d)
    torch.save(obj, d / "mask_embedding.pt")
    return d


def test_mask_embedding_replaces_the_mask_row(tmp_path):
    # MiMo ships {"mask_token_id", "embedding"}; vLLM and SGLang substitute it for the MASK row
    probe = load_drafter(DRAFTERS / "qwen3-flat", device="cpu")
    cfg = probe.cfg
    vec = torch.arange(cfg.hidden_size, dtype=torch.bfloat16)
    d = load_drafter(_mask_file(tmp_path, {"mask_token_id": cfg.mask_token_id, "embedding": vec}), device="cpu")
    table = torch.randn(cfg.vocab_size, cfg.hidden_size)
    ids = torch.tensor([[3, cfg.mask_token_id, cfg.mask_token_id]])
    x = d.embed(ids, table)
    assert torch.equal(x[0, 0], table[3]) and torch.equal(x[0, 1], vec.float()) and torch.equal(x[0, 2], vec.float())
    assert probe.mask_embedding is None and torch.equal(probe.embed(ids, table)[0, 1], table[cfg.mask_token_id])


@pytest.mark.parametrize("obj,match", [
    ("bare", None),  # a bare (1, H) tensor is accepted
    ({"mask_token_id": 0, "embedding": None}, "for mask_token_id 0"),
    ({"embedding": torch.zeros(3)}, "one embedding of"),
    ({"per_position": True, "embedding": None}, "per-position"),
])
def test_mask_embedding_file_is_checked(tmp_path, obj, match):
    h = load_drafter(DRAFTERS / "qwen3-flat", device="cpu").cfg.hidden_size
    if obj == "bare":
        obj = torch.ones(1, h)
    elif obj.get("embedding", 0) is None:
        obj["embedding"] = torch.zeros(h)
    d = _mask_file(tmp_path, obj)
    if match is None:
        assert torch.equal(load_drafter(d, device="cpu").mask_embedding, torch.ones(h))
        return
    with pytest.raises(WeightsError, match=match):
        load_drafter(d)


@pytest.mark.parametrize("kind", ["fp8", "w4a16", "bitnet"])
def test_a_pre_quantized_drafter_loads_as_convert_dequantizes_it(cli, tmp_path, kind):
    """The reference (parity's drafter) reads a pre-quantized checkpoint as convert does: its
    weights equal, bit for bit, those of the F32 GGUF convert writes from it."""
    from dflash_gguf.reference import drafter_from_gguf
    from tests.convert.prequant_ckpt import ct_package, fp8_block

    if kind == "fp8":
        d = fp8_block(tmp_path / "fp8")
    elif kind == "bitnet":  # unpacked in place: the weight keeps its name, its shape is 4x the rows stored
        from tests.convert.prequant_ckpt import bitnet

        d = bitnet(tmp_path / "bitnet")
    else:
        pytest.importorskip("compressed_tensors", reason="compressed-tensors is not installed (the test extra)")
        d = ct_package(tmp_path / "w4", "W4A16", group_size=32)
    out = tmp_path / "f32.gguf"
    code, _, err = cli("convert", d, "--format", "lucebox", "--outtype", "f32", "-o", out)
    assert code == 0, err
    ours, ref = load_drafter(d, device="cpu").state_dict(), drafter_from_gguf(out, d / "config.json",
                                                                             device="cpu").state_dict()
    assert ours.keys() == ref.keys()
    for k in ref:
        assert torch.equal(ours[k], ref[k]), k
    # the dequantized weights really differ from a plain read of the stored bytes
    assert any("proj" in k for k in ours) and not torch.equal(ours["layers.0.mlp.up_proj.weight"],
                                                              torch.zeros_like(ours["layers.0.mlp.up_proj.weight"]))
