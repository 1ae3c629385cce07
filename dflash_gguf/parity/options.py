"""ParityOptions: the settings of one parity run (echoed in the report's ``settings``)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParityOptions:
    max_new_tokens: int = 64
    block_size: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    runs: int = 1
    device: str = "auto"
    dtype: str = "float32"
    target_quant: str | None = None
    emulate: str | None = None
    draft_context: int | None = None  # the emulated run's draft-context cap; None: the runtime's (llama.cpp: 512)
    stop_ids: tuple[int, ...] | None = None  # None: the target's eos ids
    target_backend: str = "native"  # "native" (our Qwen3/Llama) | "transformers" (any HF causal LM)
    jobs: int = 0  # prompts run at once on CPU, one torch thread each (reference/pool.py); 0 = one per core
