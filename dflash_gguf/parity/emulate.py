"""--emulate: the reference drafter run with the semantics a runtime applies instead of the
reference's, to tell runtime differences from conversion or quantization losses."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .options import ParityOptions

EMULATIONS = ("llama.cpp",)
# Older llama.cpp builds gave the drafter at most the last 512 target-feature positions as
# context (``cross_ctx``; ik_llama.cpp PR #2341 replaced it with --ctx-size-draft).
LLAMA_CPP_DRAFT_CONTEXT = 512


def emulated_config(cfg, runtime: str):
    """The drafter config with a runtime's semantics in place of the reference's.

    llama.cpp (mainline) applies one causal flag to every drafter layer — ``dflash.attention.causal``,
    default non-causal — where the reference makes sliding layers causal when the config has
    no ``is_causal``.
    """
    if runtime not in EMULATIONS:
        raise UsageError(f"--emulate {runtime!r}: supported: {', '.join(EMULATIONS)}")
    changes = []
    if cfg.hf_attention.is_causal is not None:
        return cfg, changes
    kinds = set(cfg.layer_types or ())
    if "sliding_attention" in kinds:
        changes.append("all layers non-causal (the reference makes sliding layers causal)")
    else:
        changes.append("all layers non-causal (same as the reference for this drafter)")
    # both readings of the flag: z-lab's rules read the top-level one, vLLM's and mlx-dspark's the folded one
    hf = dataclasses.replace(cfg.hf_attention, is_causal=False)
    return dataclasses.replace(cfg, hf_attention=hf, is_causal=False), changes


@dataclass
class Emulation:
    """The emulated drafter, what differs from the reference, and its draft-context cap."""

    label: str
    changes: list[str]
    cap: int
    drafter: Any

    def notes(self, prompt_len: int, max_new_tokens: int) -> list[str]:
        notes = list(self.changes)
        if prompt_len + max_new_tokens - 2 <= self.cap:  # the last round drafts from start ≤ that
            notes.append(f"the cap never binds on this prompt ({prompt_len} + {max_new_tokens} "
                         "tokens): same context as the reference")
        return notes


def load_emulated(cfg, options: ParityOptions) -> Emulation:
    """The reference drafter (config ``cfg``) rebuilt with ``options.emulate``'s semantics."""
    from .. import reference as ref

    ecfg, changes = emulated_config(cfg, options.emulate)
    cap = options.draft_context if options.draft_context is not None else LLAMA_CPP_DRAFT_CONTEXT
    if cap < 1:
        raise UsageError(f"draft_context must be at least 1, got {cap}")
    why = ("historical llama.cpp cross_ctx default" if cap == LLAMA_CPP_DRAFT_CONTEXT
           else f"set explicitly; the historical llama.cpp cross_ctx default is {LLAMA_CPP_DRAFT_CONTEXT}")
    changes.append(f"draft context capped at the last {cap} positions ({why})")
    state = ref.load.read_safetensors(cfg.path.parent, cfg)
    drafter = ref.load.drafter_from_state(ecfg, state, dtype=options.dtype, device=options.device)
    return Emulation(f"reference drafter with {options.emulate} semantics", changes, cap,
                     ref.load.attach_mask_embedding(drafter))
