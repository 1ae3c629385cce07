"""ParityOptions: the settings of one parity run (echoed in the report's ``settings``)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..config.values import MAX_BLOCK_SIZE
from ..errors import UsageError


# transformers' named placements (``from_pretrained(device_map=...)``), done by accelerate
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


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
    device_map: str | None = None  # transformers backend: accelerate's placement ("auto": every GPU, then CPU memory)
    jobs: int = 0  # prompts run at once on CPU, one torch thread each (reference/pool.py); 0 = one per core

    def __post_init__(self) -> None:
        """Flag values that would size buffers absurdly or mean nothing: refused before any model loads."""
        checks = (
            ("block_size", self.block_size is None or 2 <= self.block_size <= MAX_BLOCK_SIZE, f"2..{MAX_BLOCK_SIZE:,}"),
            ("max_new_tokens", self.max_new_tokens >= 1, "at least 1"),
            ("runs", self.runs >= 1, "at least 1"),
            ("jobs", self.jobs >= 0, "0 (one per core) or more"),
            ("top_k", self.top_k >= 0, "0 (off) or more"),
            ("temperature", math.isfinite(self.temperature) and self.temperature >= 0, "finite and >= 0"),
            ("top_p", 0 < self.top_p <= 1, "in (0, 1]"),
            ("draft_context", self.draft_context is None or self.draft_context >= 1, "at least 1"),
        )
        for name, ok, rule in checks:
            if not ok:
                raise UsageError(f"--{name.replace('_', '-')} {getattr(self, name)}: out of range; give {rule}")
        if self.device_map is not None:
            if self.target_backend != "transformers":
                raise UsageError(f"--device-map {self.device_map}: it places a transformers target; add "
                                 "--target-backend transformers")
            if self.device_map not in DEVICE_MAPS:
                raise UsageError(f"--device-map {self.device_map!r}: choose {', '.join(DEVICE_MAPS)}")
