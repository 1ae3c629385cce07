"""convert/plan.py: config + in-memory inventory → every KV and tensor, asserted on the plan itself
(no safetensors read, no GGUF written)."""
from __future__ import annotations

import json
import math
import re

import pytest

from dflash_gguf.config import DrafterConfig
from dflash_gguf.config.drafter import parse_config
from dflash_gguf.convert.plan import ConversionPlan, build_plan
from dflash_gguf.errors import WeightsError
from dflash_gguf.fileio.gguf_constants import GGMLQuantizationType as Q
from dflash_gguf.fileio.gguf_constants import GGUFValueType as T
from dflash_gguf.fileio.safetensors import SourceTensor
from dflash_gguf.fileio.types import KV
from dflash_gguf.formats import FORMATS
from dflash_gguf.formats.names import (
    DROPPED_TENSORS,
    FC,
    GLOBAL_TENSORS,
    HIDDEN_NORM,
    LAYER_TENSORS,
    PRE_FFN_NORM,
)
from tests.conftest import DRAFTERS

FLAT = DRAFTERS / "qwen3-flat" / "config.json"
TOKENIZER = [KV("tokenizer.ggml.model", "gpt2", T.STRING)]  # enough for the formats that need one
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4}
Q8_0_BLOCK = (32, 34)  # (elements, bytes) per Q8_0 block


def _config(tmp_path, **changes) -> DrafterConfig:
    """qwen3-flat's config.json with ``changes`` applied (a value of None removes the key)."""
    raw = json.loads(FLAT.read_text())
    for k, v in changes.items():
        if v is None:
            raw.pop(k, None)
        else:
            raw[k] = v
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return parse_config(raw, path)


def _shapes(cfg: DrafterConfig, target_hidden: int) -> dict[str, tuple[int, ...]]:
    """A Qwen3 DFlash1 checkpoint's tensors, spelled out from the config (not from plan.expected_shapes)."""
    H, I, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    nq, nkv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    out = {FC: (H, len(cfg.target_layer_ids) * target_hidden), HIDDEN_NORM: (H,), "norm.weight": (H,)}
    for i in range(cfg.num_hidden_layers):
        out.update({
            f"layers.{i}.input_layernorm.weight": (H,), f"layers.{i}.{PRE_FFN_NORM}": (H,),
            f"layers.{i}.self_attn.q_proj.weight": (nq, H), f"layers.{i}.self_attn.k_proj.weight": (nkv, H),
            f"layers.{i}.self_attn.v_proj.weight": (nkv, H), f"layers.{i}.self_attn.o_proj.weight": (H, nq),
            f"layers.{i}.self_attn.q_norm.weight": (hd,), f"layers.{i}.self_attn.k_norm.weight": (hd,),
            f"layers.{i}.mlp.gate_proj.weight": (I, H), f"layers.{i}.mlp.up_proj.weight": (I, H),
            f"layers.{i}.mlp.down_proj.weight": (H, I),
        })
    return out


def _inventory(cfg: DrafterConfig, tmp_path, dtype: str = "BF16", target_hidden: int = 64) -> list[SourceTensor]:
    """What read_inventory would return for that checkpoint (offsets made up: the plan reads no data)."""
    inv, offset = [], 0
    for name, shape in sorted(_shapes(cfg, target_hidden).items()):
        nbytes = math.prod(shape) * DTYPE_BYTES[dtype]
        inv.append(SourceTensor(name, dtype, shape, tmp_path / "model.safetensors", offset, nbytes))
        offset += nbytes
    return inv


def _tensor(name: str, shape: tuple[int, ...], tmp_path, dtype: str = "BF16") -> SourceTensor:
    return SourceTensor(name, dtype, shape, tmp_path / "model.safetensors", 0, math.prod(shape) * DTYPE_BYTES[dtype])


def _plan(tmp_path, fmt="llama.cpp", outtype="auto", cfg=None, inventory=None) -> ConversionPlan:
    cfg = cfg or _config(tmp_path)
    inventory = _inventory(cfg, tmp_path) if inventory is None else inventory
    return build_plan(cfg, FORMATS[fmt], inventory, outtype, tokenizer=TOKENIZER, target_hidden=64)


def _kv(plan: ConversionPlan, key: str) -> KV:
    hits = [kv for kv in plan.kvs if kv.key == key]
    assert len(hits) == 1, (key, [kv.key for kv in plan.kvs])
    return hits[0]


@pytest.mark.parametrize("fmt,offset,key", [
    ("llama.cpp", 1, "dflash.target_layers"),
    ("dflash-draft", 0, "dflash-draft.dflash.target_layer_ids"),
    ("lucebox", 0, "qwen35-dflash-draft.dflash.target_layer_ids"),
])
def test_stored_taps_are_zlab_ids_plus_one_only_for_mainline(tmp_path, fmt, offset, key):
    """z-lab's ids count layer outputs; mainline llama.cpp stores layer-input indices (id + 1), the
    other runtimes store z-lab's ids as they are. Checked on the plan's fields and on the INT32 KV."""
    plan = _plan(tmp_path, fmt)
    zlab = (0, 1, 2, 3)  # qwen3-flat's dflash_config.target_layer_ids
    assert plan.taps_zlab == zlab
    assert plan.taps_stored == tuple(i + offset for i in zlab)
    kv = _kv(plan, key)
    assert (list(kv.value), kv.type, kv.sub_type) == ([i + offset for i in zlab], T.ARRAY, T.INT32)


@pytest.mark.parametrize("fmt", ["llama.cpp", "dflash-draft", "lucebox"])
def test_every_checkpoint_tensor_gets_its_gguf_name(tmp_path, fmt):
    """Each checkpoint tensor maps to the names.py table entry (fc / hidden norm / pre-FFN norm per
    format), one plan tensor per checkpoint tensor, nothing generated and nothing dropped."""
    f = FORMATS[fmt]
    cfg = _config(tmp_path)
    plan = _plan(tmp_path, fmt, cfg=cfg)
    want = {FC: f.fc_name, HIDDEN_NORM: f.hidden_norm_name, "norm.weight": GLOBAL_TENSORS["norm.weight"]}
    for i in range(cfg.num_hidden_layers):
        for src, dst in LAYER_TENSORS.items():
            want[f"layers.{i}.{src}"] = f"blk.{i}.{dst}"
        want[f"layers.{i}.{PRE_FFN_NORM}"] = f"blk.{i}.{f.pre_ffn_norm}"
    got = {t.src: t.dst for t in plan.tensors}
    assert set(got) == set(_shapes(cfg, 64))  # no generated (src None) tensor for a default-rope drafter
    assert got == {src: want[src] for src in got}
    assert len({t.dst for t in plan.tensors}) == len(plan.tensors)
    assert plan.dropped == []


def _is_f32_kind(t) -> bool:
    return len(t.shape) == 1 or t.dst.endswith("_norm.weight")


@pytest.mark.parametrize("outtype,big_type", [("auto", Q.BF16), ("f16", Q.F16), ("f32", Q.F32), ("q8_0", Q.Q8_0)])
def test_norms_stay_f32_and_matrices_follow_the_outtype(tmp_path, outtype, big_type):
    """llama.cpp's converter rule: 1-D tensors and norms are F32 whatever the outtype; 2-D weights
    keep the source BF16 under auto and take the outtype otherwise (q8_0 as llama-quantize would)."""
    plan = _plan(tmp_path, outtype=outtype)
    ones = [t for t in plan.tensors if _is_f32_kind(t)]
    twos = [t for t in plan.tensors if not _is_f32_kind(t)]
    assert ones and twos
    assert {t.dst: t.ggml_type for t in ones} == {t.dst: Q.F32 for t in ones}
    assert {t.dst: t.ggml_type for t in twos} == {t.dst: big_type for t in twos}
    assert all(len(t.shape) == 2 for t in twos)


@pytest.mark.parametrize("outtype", ["auto", "f16", "q8_0"])
def test_tensor_bytes_and_total(tmp_path, outtype):
    """Each tensor's nbytes is what its type takes for its shape (F32 4, BF16/F16 2 per element, Q8_0
    34 per 32), and total_bytes is their sum: the size --dry-run reports."""
    plan = _plan(tmp_path, outtype=outtype)
    for t in plan.tensors:
        n = math.prod(t.shape)
        if t.ggml_type == Q.Q8_0:
            assert t.nbytes == n // Q8_0_BLOCK[0] * Q8_0_BLOCK[1], t.dst
        else:
            assert t.nbytes == n * {Q.F32: 4, Q.BF16: 2, Q.F16: 2}[t.ggml_type], t.dst
    assert plan.total_bytes == sum(t.nbytes for t in plan.tensors)
    assert plan.to_json()["total_tensor_bytes"] == plan.total_bytes


@pytest.mark.parametrize("fmt,arch", [("llama.cpp", "dflash"), ("lucebox", "qwen35-dflash-draft")])
def test_rope_theta_comes_from_rope_parameters(tmp_path, fmt, arch):
    """Transformers 5 nests the theta under rope_parameters; the historical converter read only the
    top-level rope_theta and wrote a default instead. The plan must carry the nested 1e7."""
    cfg = _config(tmp_path, rope_theta=None, rope_parameters={"rope_theta": 10000000, "rope_type": "default"})
    plan = _plan(tmp_path, fmt, cfg=cfg)
    kv = _kv(plan, f"{arch}.rope.freq_base")
    assert (kv.value, kv.type) == (1e7, T.FLOAT32)


def test_flat_rope_theta_is_used_when_not_nested(tmp_path):
    """The control for the test above: qwen3-flat's top-level rope_theta (1e6) lands as is."""
    kv = _kv(_plan(tmp_path), "dflash.rope.freq_base")
    assert (kv.value, kv.type) == (1e6, T.FLOAT32)


def test_unexpected_tensor_is_refused(tmp_path):
    """A tensor that is no part of a DFlash drafter is refused by name, not guessed into the file."""
    cfg = _config(tmp_path)
    inv = [*_inventory(cfg, tmp_path), _tensor("layers.0.mlp.extra_proj.weight", (64, 64), tmp_path)]
    with pytest.raises(WeightsError, match=r"unexpected tensor\(s\) layers\.0\.mlp\.extra_proj\.weight"):
        _plan(tmp_path, cfg=cfg, inventory=inv)


def test_known_extra_tensor_is_dropped_not_refused(tmp_path):
    """The contrast to the refusal: a known extra (d2t) is dropped with its reason and not written."""
    cfg = _config(tmp_path)
    inv = [*_inventory(cfg, tmp_path), _tensor("d2t", (512,), tmp_path, dtype="F32")]
    plan = _plan(tmp_path, cfg=cfg, inventory=inv)
    assert plan.dropped == [("d2t", DROPPED_TENSORS["d2t"])]
    assert "d2t" not in {t.src for t in plan.tensors}


def test_missing_tensor_is_refused(tmp_path):
    """A checkpoint without a tensor the config implies is refused, naming the tensor."""
    cfg = _config(tmp_path)
    gone = "layers.1.mlp.up_proj.weight"
    inv = [t for t in _inventory(cfg, tmp_path) if t.name != gone]
    with pytest.raises(WeightsError, match=f"tensor {re.escape(gone)} is missing"):
        _plan(tmp_path, cfg=cfg, inventory=inv)


def test_model_prefix_is_accepted(tmp_path):
    """Exports that keep the ``model.`` prefix plan the same tensors; the source name is kept as stored."""
    cfg = _config(tmp_path)
    bare = _plan(tmp_path, cfg=cfg)
    inv = [SourceTensor(f"model.{t.name}", t.dtype, t.shape, t.file, t.offset, t.nbytes)
           for t in _inventory(cfg, tmp_path)]
    prefixed = _plan(tmp_path, cfg=cfg, inventory=inv)
    assert [t.dst for t in prefixed.tensors] == [t.dst for t in bare.tensors]
    assert all(t.src.startswith("model.") for t in prefixed.tensors)
