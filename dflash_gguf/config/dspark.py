"""DSpark drafters (DFlash + a semi-autoregressive Markov head): the config knobs they add and
the two schemas they are published in, normalised to DFlash's before the drafter parser runs.

Ground truth: ``DSparkModel`` / ``Gemma4DSparkModel`` in llama.cpp's converter (vendored in
llama-cpp-python 0.3.36) and mlx-dspark's ``config.py`` (the reference implementation's
config reader). Two schemas exist:

- DFlash-lineage (``DSparkDraftModel``, ``Qwen3DSparkModel``, …): Qwen3 keys at the top level,
  taps and mask id at the top level or under ``dflash_config``; the first block slot is
  sampled (``sample_from_anchor`` defaults to true).
- EAGLE3-style vLLM-speculators exports (``DSparkSpeculator``): the backbone under
  ``transformer_layer_config``, taps as ``aux_hidden_state_layer_ids`` (layer-*input* ids,
  i.e. z-lab id + 1); the first slot is a bonus anchor (``sample_from_anchor`` defaults false).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .values import coerce, flag

DSPARK_ARCHS = ("DSparkDraftModel", "Qwen3DSparkModel", "DSparkSpeculator", "Lfm2DSparkDraftModel", "LingDSparkModel")
GEMMA4_DSPARK_ARCH = "Gemma4DSparkModel"
ALL_DSPARK_ARCHS = (*DSPARK_ARCHS, GEMMA4_DSPARK_ARCH)


@dataclass(frozen=True)
class DSparkSpec:
    """What a DSpark drafter adds to a DFlash one."""

    architecture: str
    eagle3_style: bool  # published as a vLLM-speculators export
    sample_from_anchor: bool  # False: block slot 0 is a bonus anchor passed through unbiased
    markov_head_type: str  # only "vanilla" exists in any runtime
    draft_vocab_size: int  # == vocab_size unless the head predicts a reduced vocabulary (d2t)

    @property
    def gemma4(self) -> bool:
        return self.architecture == GEMMA4_DSPARK_ARCH


def normalize_dspark(raw: dict[str, Any], arch: str, path: Path) -> dict[str, Any]:
    """The config as the DFlash parser reads it: speculators' nesting flattened and the taps
    and mask id moved under ``dflash_config`` (only where that object is absent, as mainline).
    The input dict is not modified."""
    if arch not in DSPARK_ARCHS:
        return raw
    out = dict(raw)
    tlc = raw.get("transformer_layer_config")
    if tlc is not None:
        if not isinstance(tlc, dict):
            raise ConfigError(f"{path}: transformer_layer_config must be an object, got {type(tlc).__name__}")
        out.update(tlc)
    if "dflash_config" not in out:
        aux = out.get("aux_hidden_state_layer_ids")
        if aux is not None:
            if not isinstance(aux, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in aux):
                raise ConfigError(f"{path}: aux_hidden_state_layer_ids must be a list of integers, got {aux!r:.80}")
            # speculators stores layer-input ids; z-lab/DFlash ids name the layer whose output is tapped
            out["dflash_config"] = {"mask_token_id": out.get("mask_token_id"),
                                    "target_layer_ids": [i - 1 for i in aux]}
        else:
            out["dflash_config"] = {k: out[k] for k in ("target_layer_ids", "mask_token_id") if k in out}
    return out


def parse_dspark(raw: dict[str, Any], arch: str, vocab_size: int, path: Path) -> DSparkSpec | None:
    """DSpark knobs of a normalised config (``raw`` still holds the published keys), or None
    for a plain DFlash drafter.

    Raises:
        ConfigError: a Markov head other than "vanilla", or a draft vocabulary larger than the
            target's (both refused by mainline's converter with the same reason).
    """
    if arch not in ALL_DSPARK_ARCHS:
        return None
    eagle3 = "transformer_layer_config" in raw or "aux_hidden_state_layer_ids" in raw
    dflash = raw.get("dflash_config") if isinstance(raw.get("dflash_config"), dict) else {}
    anchor = raw.get("sample_from_anchor")
    anchor = (not eagle3) if anchor is None else flag(anchor, "sample_from_anchor", path)
    head = dflash.get("markov_head_type", raw.get("markov_head_type", "vanilla"))
    if head != "vanilla":
        raise ConfigError(f"{path}: unsupported markov_head_type {head!r} (only 'vanilla' is supported by any "
                          "runtime; mainline llama.cpp refuses it too)")
    draft_vocab = raw.get("draft_vocab_size")
    draft_vocab = vocab_size if not draft_vocab else coerce(draft_vocab, int, "draft_vocab_size", path)
    if draft_vocab > vocab_size:
        raise ConfigError(f"{path}: draft_vocab_size {draft_vocab} exceeds vocab_size {vocab_size}")
    return DSparkSpec(architecture=arch, eagle3_style=eagle3, sample_from_anchor=bool(anchor),
                      markov_head_type=head, draft_vocab_size=draft_vocab)
