"""DSpark drafters in the converter: the tensors they add to a DFlash checkpoint, the keys they
add to its GGUF, and the Gemma4 DSpark block — every choice the one mainline's converter makes
(``DSparkModel`` in ``conversion/qwen.py``, ``Gemma4DSparkModel`` in ``conversion/gemma.py``),
checked against it byte for byte in tests/convert/test_dspark.py.

- Markov head: ``markov_w1`` [vocab, rank] (indexed by the previous, target-vocab token) and
  ``markov_w2`` [draft_vocab, rank]; the rank comes from ``markov_rank`` or, absent, the tensors.
- Confidence head (optional): ``proj.weight`` [1, hidden + rank] and ``proj.bias`` [1];
  ``dflash.has_confidence_head`` says whether it is there.
- Reduced vocabularies: ``d2t`` holds per-draft-id *offsets*; it is written as absolute target
  ids (I64), validated (size, range, uniqueness) before anything is written. ``t2d`` is
  dropped, and so is ``lm_head`` when the draft vocabulary is the full one (the runtime then
  borrows the target's head), as mainline does.
- Gemma4 DSpark: k=v attention over ``global_head_dim`` (no v_proj), sandwich norms and a
  per-layer output scale under their own names, GELU, ``embedding_scale`` = sqrt(hidden),
  ``attention.scale`` = 1, and for proportional RoPE a generated ``rope_freqs`` whose
  unrotated dimensions get the factor 1e30 (their rotation angle becomes 0).

The plan reads the data of one small tensor, ``d2t``: a bad table must fail before the output
exists (and in --dry-run), like every other refusal.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as T

from ..config import DrafterConfig
from ..errors import WeightsError
from ..fileio.bf16 import bf16_to_f32
from ..fileio.safetensors import SourceTensor, read_raw
from ..formats import Format
from .family import Generated, PlanExtension
from ..formats.dspark import HAS_CONFIDENCE_HEAD, SAMPLE_FROM_ANCHOR, gemma4_gguf_name
from ..formats.meta import DrafterMeta
from ..formats.names import D2T, ROPE_FREQS, T2D

W1, W2 = "markov_head.markov_w1.weight", "markov_head.markov_w2.weight"
CONF_W, CONF_B = "confidence_head.proj.weight", "confidence_head.proj.bias"
GEMMA4_CONF = {"confidence_proj.weight": CONF_W, "confidence_proj.bias": CONF_B}
LM_HEAD = "lm_head.weight"
_INT_DTYPES = ("I64", "I32", "I16", "I8", "U8", "U16", "U32", "U64")


@dataclass
class DSparkPlan(PlanExtension):
    """What a DSpark checkpoint adds to the DFlash plan: its heads, d2t, Gemma4's block."""

    hparams: list[tuple[str, object, T, T | None]] = field(default_factory=list)  # set on the DrafterMeta
    d2t: np.ndarray | None = None  # absolute target ids, validated
    d2t_dtype: str = ""  # the checkpoint's dtype of d2t
    rope_freqs: np.ndarray | None = None  # Gemma4 proportional RoPE
    gemma4: bool = False

    def classify(self, name: str) -> str | None:
        if name == D2T and self.d2t is not None:
            return "written"  # from the validated ids, last (``generated``)
        return super().classify(name)

    def gguf_name(self, fmt: Format, name: str) -> str | None:
        """Gemma4's own names first, then the shared table."""
        return (gemma4_gguf_name(name) if self.gemma4 else None) or fmt.gguf_name(name)

    def apply(self, meta: DrafterMeta) -> None:
        """Write the DSpark keys into ``meta`` where mainline puts them: an override replaces
        the key DFlash wrote (in place, as gguf-py's writer does); the rest are appended."""
        meta.dspark = True
        for suffix, value, typ, sub in self.hparams:
            for i, (s, *_rest) in enumerate(meta.hparams):
                if s == suffix:
                    meta.hparams[i] = (suffix, value, typ, sub)
                    break
            else:
                meta.hparams.append((suffix, value, typ, sub))

    def generated(self) -> tuple[list[Generated], list[Generated]]:
        """rope_freqs leads (generated, as mainline's generate_extra_tensors), d2t closes
        (mainline adds it after the rest)."""
        head = [] if self.rope_freqs is None else [
            (ROPE_FREQS, self.rope_freqs, "generated", Q.F32,
             "Gemma4 proportional RoPE: 1 on rotated dims, 1e30 on the rest")]
        tail = [] if self.d2t is None else [
            (D2T, self.d2t, self.d2t_dtype, Q.I64, "DSpark d2t: draft id -> absolute target id (offset + draft id)")]
        return head, tail

    def written_from(self, gguf_name: str) -> str | None:
        return D2T if gguf_name == D2T and self.d2t is not None else None


def plan_dspark(cfg: DrafterConfig, base: dict[str, tuple[int, ...]], by_name: dict[str, SourceTensor],
                where: str) -> DSparkPlan:
    """The DSpark part of a conversion plan for ``cfg`` (whose ``dspark`` is set).

    Raises:
        WeightsError: a half Markov head, a confidence head the runtime cannot read, a reduced
            vocabulary without ``d2t`` or ``lm_head``, a bad ``d2t`` (size, range, duplicates:
            mainline's reasons), or a Gemma4 DSpark without its output head.
    """
    spec = cfg.dspark
    assert spec is not None
    H, draft = cfg.hidden_size, spec.draft_vocab_size
    names = dict(by_name)
    plan = DSparkPlan(expected=dict(base), by_name={}, gemma4=spec.gemma4)
    if spec.gemma4:
        _gemma4_layers(cfg, plan)
        for src, dst in GEMMA4_CONF.items():  # mainline renames them before anything else looks
            if src in names:
                names[dst] = names.pop(src)
    rank = _markov(cfg, names, plan, where)
    has_conf = any(CONF_W.rsplit(".", 1)[0] in n for n in names)  # mainline: any "confidence_head.proj"
    if has_conf:
        _confidence(cfg, names, rank, plan, where)
    if spec.gemma4:
        if LM_HEAD not in names and cfg.tie_word_embeddings is not True:
            raise WeightsError(f"{where}: Gemma4 DSpark requires lm_head.weight unless tie_word_embeddings is true "
                               "(the checkpoint has neither; mainline's converter refuses it too)")
        for n in (D2T, T2D):
            if n in names:
                raise WeightsError(f"{where}: {n} is a reduced-vocabulary table, but Gemma4 DSpark has no reduced "
                                   "vocabulary (mainline's converter cannot map it either); remove it")
    else:
        if T2D in names:
            plan.claimed[T2D] = "reduced-vocab membership mask: only the trainer uses it (mainline drops it too)"
        if spec.reduced_vocab:
            if LM_HEAD not in names:
                raise WeightsError(f"{where}: draft_vocab_size {draft} < vocab_size {cfg.vocab_size} but there is no "
                                   f"lm_head.weight [{draft}, {H}]; a reduced vocabulary needs the drafter's own head "
                                   "(the target's covers the full vocabulary)")
            plan.expected[LM_HEAD] = (draft, H)
        elif LM_HEAD in names:
            plan.claimed[LM_HEAD] = ("full draft vocabulary: the runtime uses the target's output head "
                                     "(mainline drops the drafter's copy too)")
        if D2T in names:
            plan.d2t = d2t_absolute(names[D2T], draft, cfg.vocab_size, where)
            plan.d2t_dtype = names[D2T].dtype
        elif spec.reduced_vocab:
            raise WeightsError(f"{where}: draft_vocab_size {draft} < vocab_size {cfg.vocab_size} but no d2t table "
                               "found (mainline refuses it too); the draft ids cannot be mapped to target ids")
    plan.hparams += [(SAMPLE_FROM_ANCHOR, spec.sample_from_anchor, T.BOOL, None),
                     (HAS_CONFIDENCE_HEAD, has_conf, T.BOOL, None)]
    plan.by_name = names
    return plan


def _gemma4_layers(cfg: DrafterConfig, plan: DSparkPlan) -> None:
    """Gemma4DSparkModel's block: k = v (no v_proj), attention over global_head_dim with the
    global kv heads, sandwich norms, a per-layer output scale; and its keys and rope_freqs."""
    g = cfg.dspark.gemma4_layout
    H, hd, nq, nkv = cfg.hidden_size, g.global_head_dim, cfg.num_attention_heads, g.num_global_key_value_heads
    for i in range(cfg.num_hidden_layers):
        p = f"layers.{i}."
        plan.expected.pop(p + "self_attn.v_proj.weight", None)
        plan.expected.update({
            p + "self_attn.q_proj.weight": (nq * hd, H), p + "self_attn.k_proj.weight": (nkv * hd, H),
            p + "self_attn.o_proj.weight": (H, nq * hd), p + "self_attn.q_norm.weight": (hd,),
            p + "self_attn.k_norm.weight": (hd,), p + "pre_feedforward_layernorm.weight": (H,),
            p + "post_feedforward_layernorm.weight": (H,), p + "layer_scalar": (1,)})
    plan.hparams += [("attention.head_count_kv", nkv, T.UINT32, None), ("attention.key_length", hd, T.UINT32, None),
                     ("attention.value_length", hd, T.UINT32, None), ("rope.dimension_count", hd, T.UINT32, None),
                     ("embedding_scale", float(H) ** 0.5, T.FLOAT32, None), ("attention.scale", 1.0, T.FLOAT32, None),
                     ("hidden_activation", "gelu_pytorch_tanh", T.STRING, None)]
    if g.rope_type == "proportional":
        n_rot = int(hd * g.rotary_fraction / 2)
        plan.rope_freqs = np.array([1.0] * n_rot + [1e30] * (hd // 2 - n_rot), dtype=np.float32)


def _markov(cfg: DrafterConfig, names: dict[str, SourceTensor], plan: DSparkPlan, where: str) -> int | None:
    """Expect the Markov head (both halves, or neither); its rank (None without a head)."""
    rank = cfg.dspark.markov_rank
    present = [n for n in (W1, W2) if n in names]
    if rank == 0 or (rank is None and not present):
        return None  # no Markov head: the unexpected-tensor check reports any stray half
    if rank is None:
        shape = names[present[0]].shape
        if len(shape) != 2:
            raise WeightsError(f"{where}: {names[present[0]].name} has shape {list(shape)}; a Markov head weight is "
                               "[vocab, rank]")
        rank = shape[1]
    plan.expected[W1] = (cfg.vocab_size, rank)
    plan.expected[W2] = (cfg.dspark.draft_vocab_size, rank)
    if len(present) == 1:
        other = W2 if present[0] == W1 else W1
        raise WeightsError(f"{where}: the Markov head is incomplete: {present[0]} is there but {other} is missing; "
                           "llama.cpp loads both or neither (is the checkpoint complete?)")
    return rank


def _confidence(cfg: DrafterConfig, names: dict[str, SourceTensor], rank: int | None, plan: DSparkPlan,
                where: str) -> None:
    H = cfg.hidden_size
    if rank is None:
        raise WeightsError(f"{where}: a confidence head without a Markov head: llama.cpp reads "
                           f"{CONF_W} only next to markov_w1, as [1, hidden + rank]; remove it or add the Markov head")
    w = names.get(CONF_W)
    if w is not None and w.shape == (1, H):
        raise WeightsError(f"{where}: {w.name} has shape [1, {H}]: a confidence head without the Markov features "
                           f"(confidence_head_with_markov=false); llama.cpp's runtime reads [1, hidden + rank] = "
                           f"[1, {H + rank}] and cannot load it")
    plan.expected[CONF_W] = (1, H + rank)
    plan.optional[CONF_B] = (1,)


def d2t_absolute(t: SourceTensor, draft_vocab: int, vocab: int, where: str) -> np.ndarray:
    """The checkpoint's d2t offsets as absolute target ids (``id = draft id + d2t[draft id]``),
    validated with mainline's three checks and reasons.

    Raises:
        WeightsError: not numeric, wrong size, an id outside the target vocabulary, a repeated id.
    """
    if t.dtype not in _INT_DTYPES and t.dtype not in ("BF16", "F16", "F32", "F64"):
        raise WeightsError(f"{where}: {t.name} has dtype {t.dtype}; d2t holds integer offsets (I64)")
    raw = read_raw(t)
    if t.dtype == "BF16":
        raw = bf16_to_f32(raw)
    # mainline casts every tensor to float32 before it sees d2t, then to int64: the same here
    data = np.asarray(raw, dtype=np.float32).astype(np.int64).reshape(-1)
    if data.size != draft_vocab:
        raise WeightsError(f"{where}: d2t size {data.size} does not match draft_vocab_size {draft_vocab}; "
                           "the table and config.json disagree")
    data = data + np.arange(data.size, dtype=np.int64)
    bad = np.flatnonzero((data < 0) | (data >= vocab))
    if bad.size:
        raise WeightsError(f"{where}: d2t target ids out of range for target vocab size {vocab} (draft id {bad[0]} "
                           f"maps to {data[bad[0]]}); d2t holds offsets: target id = draft id + d2t[draft id]")
    if np.unique(data).size != data.size:
        values, counts = np.unique(data, return_counts=True)
        raise WeightsError(f"{where}: d2t contains duplicate target ids (target id {values[counts > 1][0]} is "
                           "reached from more than one draft id); the table is corrupt")
    return data
