"""Tensor tables (name -> dtype, shape) of the published drafters in fixtures/published/.

Names and shapes come from the publishers' own code, never from dflash_gguf, so a comparison
built on them tests our converter against the outside world rather than against itself:

* DFlash1 / DFlash2 / MiMo backbones: z-lab's reference ``dflash.model.DFlashDraftModel`` /
  ``DFlash2DraftModel`` (PyPI ``dflash`` 0.1.0) built on torch's meta device; its ``state_dict()``
  is what ``save_pretrained`` writes.
* Families with no runnable reference here get an explicit table, each line citing the code it was
  read from. Where a publisher's safetensors header (or an inventory of it) is public, the entry
  stores it as ``safetensors_header.json`` and that wins over any derivation.

Deriving through the reference needs torch + transformers (seconds to import), so the tables are
cached per entry in ``tensors.json``; ``tests/convert/test_published.py`` checks every cache against
its derivation (the reference-backed ones in a slow test).
"""
from __future__ import annotations

import json
from pathlib import Path

Table = list[tuple[str, str, list[int]]]  # (name, safetensors dtype, shape), sorted by name


def _cfg_get(cfg: dict, key: str, default=None):
    # DFlash knobs live in dflash_config first, then top level (z-lab model.py::_draft_value).
    return (cfg.get("dflash_config") or {}).get(key, cfg.get(key, default))


def _sorted(rows: Table) -> Table:
    return sorted(rows, key=lambda r: r[0])


# ---------------------------------------------------------------- reference-backed (torch needed)

def reference_table(cfg: dict, *, dflash2: bool) -> Table:
    """The z-lab reference model's state_dict names/shapes for ``cfg`` (all BF16 on disk)."""
    import torch
    from transformers import Qwen3Config

    from dflash.model import DFlash2DraftModel, DFlashDraftModel

    qcfg = Qwen3Config(**{k: v for k, v in cfg.items() if k not in ("architectures", "auto_map")})
    # Qwen3Config drops keys it does not know only in some versions; the reference reads these.
    for key in ("dflash_config", "num_target_layers", "block_size"):
        if key in cfg:
            setattr(qcfg, key, cfg[key])
    cls = DFlash2DraftModel if dflash2 else DFlashDraftModel
    with torch.device("meta"):
        model = cls(qcfg)
    rows = []
    for name, tensor in model.state_dict().items():
        # DFlash2's from_pretrained maps the on-disk codebook names onto nn.Embedding's
        # ".weight" (key_mapping in model.py); the file spells them without it.
        if name.startswith("candidate_selector.") and name.endswith("_codebook.weight"):
            name = name[: -len(".weight")]
        rows.append((name, "BF16", list(tensor.shape)))
    return _sorted(rows)


# ---------------------------------------------------------------- explicit tables (no torch)

def _qwen3_layer(i: int, hidden: int, heads: int, kv: int, head_dim: int, inter: int) -> Table:
    # Qwen3-style decoder layer as z-lab's dflash/model.py (Qwen3DFlashDecoderLayer), DeepSpec's
    # deepspec/modeling/dspark/qwen3/modeling.py and speculators' dflash/model_definitions.py
    # all build it: q/k/v/o without bias, per-head q_norm/k_norm, SwiGLU MLP, two RMSNorms.
    p = f"layers.{i}."
    return [
        (p + "input_layernorm.weight", "BF16", [hidden]),
        (p + "post_attention_layernorm.weight", "BF16", [hidden]),
        (p + "self_attn.q_proj.weight", "BF16", [heads * head_dim, hidden]),
        (p + "self_attn.k_proj.weight", "BF16", [kv * head_dim, hidden]),
        (p + "self_attn.v_proj.weight", "BF16", [kv * head_dim, hidden]),
        (p + "self_attn.o_proj.weight", "BF16", [hidden, heads * head_dim]),
        (p + "self_attn.q_norm.weight", "BF16", [head_dim]),
        (p + "self_attn.k_norm.weight", "BF16", [head_dim]),
        (p + "mlp.gate_proj.weight", "BF16", [inter, hidden]),
        (p + "mlp.up_proj.weight", "BF16", [inter, hidden]),
        (p + "mlp.down_proj.weight", "BF16", [hidden, inter]),
    ]


def _qwen3_backbone(c: dict, n_taps: int) -> Table:
    h = c["hidden_size"]
    head_dim = c.get("head_dim") or h // c["num_attention_heads"]
    rows = [("fc.weight", "BF16", [h, n_taps * h]), ("hidden_norm.weight", "BF16", [h]),
            ("norm.weight", "BF16", [h])]
    for i in range(c["num_hidden_layers"]):
        rows += _qwen3_layer(i, h, c["num_attention_heads"], c["num_key_value_heads"], head_dim,
                             c["intermediate_size"])
    return rows


def _markov_confidence(h: int, vocab: int, draft_vocab: int, c: dict) -> Table:
    # DSpark heads. DeepSpec deepspec/modeling/dspark/markov_head.py::VanillaMarkov:
    # markov_w1 = Embedding(V, r), markov_w2 = Linear(r, V) -> both [V, r] on disk; speculators
    # models/dspark/model_definitions.py::MarkovHead sizes w2 by the draft vocabulary.
    # Confidence head (DeepSpec common.py::AcceptRatePredictor, speculators ConfidenceHead):
    # Linear(H [+ r when confidence_head_with_markov], 1) with bias.
    r = int(c["markov_rank"])
    rows = [("markov_head.markov_w1.weight", "BF16", [vocab, r]),
            ("markov_head.markov_w2.weight", "BF16", [draft_vocab, r])]
    if c.get("enable_confidence_head"):
        width = h + (r if c.get("confidence_head_with_markov") else 0)
        rows += [("confidence_head.proj.weight", "BF16", [1, width]),
                 ("confidence_head.proj.bias", "BF16", [1])]
    return rows


def mimo_table(c: dict) -> Table:
    """MiMo DFlash: the z-lab DFlash1 backbone plus one attention sink per head and layer.

    Names/shapes as the published inventory of XiaomiMiMo/MiMo-V2.5-DFlash@1f584461 lists them
    (``layers.{i}.self_attn.attention_sink_bias`` [num_attention_heads], no ``.weight``); the
    ``dflash_config.attention_sink_bias`` flag is what turns them on (vLLM qwen3_dflash.py).
    """
    rows = _qwen3_backbone(c, len(_cfg_get(c, "target_layer_ids")))
    if _cfg_get(c, "attention_sink_bias"):
        rows += [(f"layers.{i}.self_attn.attention_sink_bias", "BF16", [c["num_attention_heads"]])
                 for i in range(c["num_hidden_layers"])]
    return _sorted(rows)


def dspark_native_table(c: dict, *, ships_embeddings: bool) -> Table:
    """A DeepSpec-layout DSpark drafter (Qwen3DSparkModel / Lfm2DSparkDraftModel).

    DeepSpec's deepspec/modeling/dspark/qwen3/modeling.py::Qwen3DSparkModel holds frozen copies of
    the target's embed_tokens and lm_head and ckpt_manager.py saves the whole state_dict, so the
    published deepseek-ai checkpoints carry both (dspark_qwen3_4b_block7 is 2.79 GB, which only adds
    up with them). LiquidAI's LFM2 exports ship neither (their card and loaders say so).
    """
    h, vocab = c["hidden_size"], c["vocab_size"]
    rows = _qwen3_backbone(c, len(_cfg_get(c, "target_layer_ids")))
    if ships_embeddings:
        rows += [("embed_tokens.weight", "BF16", [vocab, h]), ("lm_head.weight", "BF16", [vocab, h])]
    rows += _markov_confidence(h, vocab, vocab, c)
    return _sorted(rows)


def dspark_speculators_table(c: dict) -> Table:
    """A speculators-format DSpark export (``transformer_layer_config`` + aux layer ids).

    speculators src/speculators/model.py::DraftVocabMixin: embed_tokens [V, H], lm_head [Vd, H],
    t2d (bool [V]) and d2t (int64 [Vd]) buffers only when draft_vocab_size < V; verifier_lm_head
    and verifier_norm are in _keys_to_ignore_on_save. Backbone per models/dflash/core.py, heads per
    models/dspark/core.py. RedHatAI/Qwen3.6-35B-A3B-speculator.dspark is 1.90 GB, which this sums to.
    """
    t = c["transformer_layer_config"]
    h, vocab = t["hidden_size"], t["vocab_size"]
    draft_vocab = c.get("draft_vocab_size") or vocab
    rows = _qwen3_backbone(t, len(c["aux_hidden_state_layer_ids"]))
    rows += [("embed_tokens.weight", "BF16", [vocab, h]), ("lm_head.weight", "BF16", [draft_vocab, h])]
    if draft_vocab != vocab:
        rows += [("t2d", "BOOL", [vocab]), ("d2t", "I64", [draft_vocab])]
    rows += _markov_confidence(h, vocab, draft_vocab, c)
    return _sorted(rows)


def gemma4_dspark_table(c: dict) -> Table:
    """DeepSpec's Gemma4DSparkModel (deepspec/modeling/dspark/gemma4/modeling.py).

    Attention uses global_head_dim and, with attention_k_eq_v, num_global_key_value_heads and no
    v_proj (V reuses K); v_norm has no scale. Each layer carries Gemma's four norms and a
    ``layer_scalar`` buffer [1] (persistent, so saved). embed_tokens / lm_head as in the Qwen3 variant.
    """
    h, vocab = c["hidden_size"], c["vocab_size"]
    heads, hd = c["num_attention_heads"], c["global_head_dim"]
    k_eq_v = bool(c.get("attention_k_eq_v"))
    kv = c["num_global_key_value_heads"] if k_eq_v else c["num_key_value_heads"]
    inter = c["intermediate_size"]
    rows = [("embed_tokens.weight", "BF16", [vocab, h]), ("lm_head.weight", "BF16", [vocab, h]),
            ("fc.weight", "BF16", [h, len(c["target_layer_ids"]) * h]),
            ("hidden_norm.weight", "BF16", [h]), ("norm.weight", "BF16", [h])]
    for i in range(c["num_hidden_layers"]):
        p = f"layers.{i}."
        rows += [(p + "layer_scalar", "BF16", [1])]
        rows += [(p + n + ".weight", "BF16", [h]) for n in (
            "input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
            "post_feedforward_layernorm")]
        rows += [(p + "self_attn.q_proj.weight", "BF16", [heads * hd, h]),
                 (p + "self_attn.k_proj.weight", "BF16", [kv * hd, h]),
                 (p + "self_attn.o_proj.weight", "BF16", [h, heads * hd]),
                 (p + "self_attn.q_norm.weight", "BF16", [hd]),
                 (p + "self_attn.k_norm.weight", "BF16", [hd]),
                 (p + "mlp.gate_proj.weight", "BF16", [inter, h]),
                 (p + "mlp.up_proj.weight", "BF16", [inter, h]),
                 (p + "mlp.down_proj.weight", "BF16", [h, inter])]
        if not k_eq_v:
            rows.append((p + "self_attn.v_proj.weight", "BF16", [kv * hd, h]))
    rows += _markov_confidence(h, vocab, vocab, c)
    return _sorted(rows)


def dsv4_dspark_checkpoint_table(c: dict) -> Table:
    """A DeepSeek-V4 checkpoint carrying a DSpark draft (deepseek-ai/DeepSeek-V4-Flash-DSpark).

    The draft is every ``mtp.*`` tensor, read from DeepSeek's own code by
    ``tests/convert/dsv4_ckpt.py::dsv4_dspark_table`` (inference/model.py's ``Attention``, ``MoE``
    and ``Block``; FP8 weights with E8M0 ``.scale``, FP4 routed experts as I8 + E8M0 scales, three
    stages as the repo's inference/config.json ``n_mtp_layers`` says). Beside it, a few tensors of
    the main model, which shares the checkpoint (``dsv4_ckpt.MAIN_MODEL``, shapes from the same
    model.py: ``ParallelEmbedding`` / ``ParallelHead`` [vocab, dim], ``RMSNorm`` [dim], the hash
    layers' ``tid2eid`` [vocab, n_activated_experts]): the converters must skip them unread.
    """
    from tests.convert.dsv4_ckpt import MAIN_MODEL, dsv4_dspark_table

    h, vocab = c["hidden_size"], c["vocab_size"]
    shapes = {"embed.weight": [vocab, h], "head.weight": [vocab, h], "norm.weight": [h],
              "layers.0.attn_norm.weight": [h], "layers.0.ffn.gate.tid2eid": [vocab, c["num_experts_per_tok"]]}
    rows = [(name, dtype, shapes[name]) for name, dtype in MAIN_MODEL]
    return _sorted(rows + list(dsv4_dspark_table(c)))


# ---------------------------------------------------------------- published headers

def header_table(path: Path) -> Table:
    """The (name, dtype, shape) rows of a published safetensors header, offsets aside."""
    header = json.loads(path.read_text(encoding="utf-8"))
    return _sorted([(n, v["dtype"], list(v["shape"])) for n, v in header.items() if n != "__metadata__"])


DERIVATIONS = {
    # entry["tensors"] -> how to derive the table from the drafter config (None: needs torch)
    "reference:DFlashDraftModel": None,
    "reference:DFlash2DraftModel": None,
    "table:mimo": mimo_table,
    "table:dspark-native": lambda c: dspark_native_table(c, ships_embeddings=True),
    "table:dspark-native-no-embeddings": lambda c: dspark_native_table(c, ships_embeddings=False),
    "table:dspark-speculators": dspark_speculators_table,
    "table:gemma4-dspark": gemma4_dspark_table,
    "table:dsv4-dspark": dsv4_dspark_checkpoint_table,
    "header": None,
}


def derive(kind: str, cfg: dict, header: Path | None = None) -> Table:
    """Derive a table the way ``kind`` says (see DERIVATIONS); ``header`` for kind == "header"."""
    if kind == "header":
        return header_table(header)
    if kind.startswith("reference:"):
        return reference_table(cfg, dflash2=kind.endswith("DFlash2DraftModel"))
    return DERIVATIONS[kind](cfg)
