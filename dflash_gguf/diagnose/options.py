"""DiagnoseOptions: the settings of one diagnose run (echoed in the report's ``settings``), and
every check of their values that can be made before a file is read or made."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import QuantizationError, UsageError


@dataclass(frozen=True)
class DiagnoseOptions:
    max_new_tokens: int = 64
    temperature: float = 0.0
    seed: int = 0
    runs: int = 1
    jobs: int = 0  # parity's: prompts at once on CPU (0 = one per core)
    device: str = "auto"
    dtype: str = "float32"
    target_backend: str = "native"  # parity's: the full-precision target built in, or through transformers
    device_map: str | None = None  # with transformers: accelerate's placement of that target
    quants: tuple[str, ...] = ()  # file types to make from the full-precision GGUF (--quants)
    quants_dir: Path | None = None  # where those files go (kept); None: a temp dir, removed
    target_quant: str | None = None  # stage 3 by round trip; wins over a quantized target_gguf
    emulate: str = "llama.cpp"  # stage 4
    draft_context: int | None = None  # stage 4's draft-context cap; None: the runtime's (llama.cpp: 512)
    target_gguf: Path | None = None  # the target as served: stage 3 when quantized, stage 5's -m, convert's tokenizer
    server_bin: Path | None = None  # stage 5: launch llama-server
    server_args: tuple[str, ...] = ()  # stage 5: extra flags for that llama-server (bench's --server-args)
    servers: tuple[tuple[str | None, str], ...] = ()  # stage 5: (drafter GGUF it serves, URL) of running servers
    engine: str = "llama.cpp"  # what the running servers are: llama.cpp | vllm | sglang (bench's clients)
    server_log: Path | None = None  # the one running server's LLAMA_TRACE log: its step counts
    expect: float | None = None  # the published mean acceptance length

    def __post_init__(self) -> None:
        from ..bench.client import ENGINES

        object.__setattr__(self, "quants", tuple(check_file_type("--quants", q) for q in self.quants))
        if self.target_quant is not None:
            object.__setattr__(self, "target_quant", check_file_type("--target-quant", self.target_quant))
        if self.expect is not None and not (math.isfinite(self.expect) and self.expect >= 1):
            raise UsageError(f"--expect {self.expect}: a mean acceptance length is at least 1")
        if self.draft_context is not None and self.draft_context < 1:
            raise UsageError(f"--draft-context {self.draft_context}: out of range; give at least 1")
        if self.engine not in ENGINES:
            raise UsageError(f"--engine {self.engine!r}: choose {', '.join(ENGINES)}")
        if self.server_bin is not None and self.servers:
            raise UsageError("--server-bin launches llama-server, --server measures a running one: give one of them")
        if self.engine != "llama.cpp" and not self.servers:
            raise UsageError(f"--engine {self.engine} names what a running --server is: diagnose launches llama-server "
                             f"only; point --server at the running {self.engine} endpoint")
        if self.server_log is not None and (len(self.servers) != 1 or self.engine != "llama.cpp"):
            raise UsageError("--server-log is the log of the one running llama-server --server names: give exactly one "
                             "--server (--engine llama.cpp)")
        if self.server_args and self.server_bin is None:
            raise UsageError("--server-args are flags for the llama-server diagnose starts: give --server-bin (a running "
                             "--server keeps the flags it was started with)")
        if self.server_bin is not None and self.target_gguf is None:
            raise UsageError("stage 5 launches llama-server with the target as GGUF: give --target-gguf T.gguf")

    def parity(self, target: str | Path | None = None, **changes):
        """parity's options for a run on ``target``. A GGUF target (a quantized --target-gguf as
        stage 3's) is loaded by the built-in backend: transformers reads Hugging Face dirs only."""
        from ..parity import ParityOptions

        hf = target is None or not Path(target).is_file()
        return ParityOptions(max_new_tokens=self.max_new_tokens, temperature=self.temperature, seed=self.seed,
                             runs=self.runs, jobs=self.jobs, device=self.device, dtype=self.dtype,
                             target_backend=self.target_backend if hf else "native",
                             device_map=self.device_map if hf else None, **changes)


def check_file_type(flag: str, name: str) -> str:
    """A llama-quantize file type we can write, by its canonical name (``q4_k_m`` -> ``Q4_K_M``).

    Raises:
        UsageError: unknown, or one dflash_gguf does not write (importance-matrix types).
    """
    from ..quants.ftypes import ftype_refusal, resolve_ftype

    try:
        canon = resolve_ftype(name)
    except QuantizationError as exc:
        raise UsageError(f"{flag} {name!r}: {exc}") from None
    why = ftype_refusal(canon)
    if why or canon == "COPY":
        raise UsageError(f"{flag} {name!r}: {why or 'COPY changes nothing'}")
    return canon
