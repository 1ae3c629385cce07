"""Stage 3's target: the target quantized as the user runs it.

Two sources, one chosen per run (``plan_stage3``):

* ``--target-quant TYPE``: the full-precision target's weights round-tripped through our
  quantizers (parity's ``--target-quant``); it wins when both are given, since it is the one
  flag that only stage 3 reads;
* ``--target-gguf T.gguf`` whose weights are quantized (any tensor type but F32/F16/BF16): that
  file itself, dequantized by parity's GGUF target loader, the very weights llama-server loads.

A served GGUF the reference cannot load (another architecture, a type it does not dequantize,
another model than ``--target``) leaves stage 3 unrun, with the reason; stage 5 still serves it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

FULL_PRECISION_TYPES = ("F32", "F16", "BF16")


@dataclass(frozen=True)
class Stage3Target:
    """The target stage 3 (and then stage 4) runs with."""

    source: str  # "target-quant" (--target round-tripped) | "served" (the quantized --target-gguf)
    quant: str  # the quantization: Q4_K_M, or the file's type
    path: Path | None = None  # the served GGUF; None for a round trip
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def label(self) -> str:
        if self.path is not None:
            return f"target as served: {self.path.name} ({self.quant})"
        return f"the target's weights round-tripped through {self.quant} (--target-quant)"

    def to_json(self) -> dict:
        return {"source": self.source, "quant": self.quant, "path": None if self.path is None else str(self.path),
                "label": self.label}


def file_type(path: str | Path) -> str | None:
    """The GGUF's ``general.file_type`` by llama-quantize's name (BF16, Q4_K_M), or None."""
    from ..fileio.gguf_header import read_header
    from ..quants.ftypes import ALIASES, QUANT_OPTIONS

    ft = read_header(path).get("general.file_type")
    if not isinstance(ft, int) or isinstance(ft, bool):
        return None
    return next((n for n, i in QUANT_OPTIONS if i == ft and n not in ALIASES and n != "COPY"), None)


def served_quant(path: str | Path) -> str | None:
    """The file type of a GGUF with quantized weights (``general.file_type`` by llama-quantize's
    name, else ``mostly <TYPE>`` from its tensors), or None when every tensor is F32/F16/BF16."""
    from ..fileio.gguf_reader import read_gguf

    types = Counter(t.ggml_type.name for t in read_gguf(path).tensors)
    quantized = Counter({k: n for k, n in types.items() if k not in FULL_PRECISION_TYPES})
    if not quantized:
        return None
    ft = file_type(path)
    return ft if ft is not None and ft not in FULL_PRECISION_TYPES else f"mostly {quantized.most_common(1)[0][0]}"


def plan_stage3(target: str | Path, target_quant: str | None,
                target_gguf: str | Path | None) -> tuple[Stage3Target | None, str | None]:
    """(the stage-3 target, None) or (None, why stage 3 does not run)."""
    served = None if target_gguf is None else served_quant(target_gguf)
    if target_quant:
        notes = () if served is None else (
            f"--target-quant {target_quant} given: stage 3 round-trips --target; the served {Path(target_gguf).name} "
            f"({served}) is stage 5's target only",)
        return Stage3Target("target-quant", target_quant, None, notes), None
    if target_gguf is None:
        return None, "no --target-quant, and no quantized --target-gguf"
    if served is None:
        return None, (f"--target-gguf {Path(target_gguf).name} is full precision (F32/F16/BF16), like --target, and no "
                      "--target-quant")
    why = _cannot_load(Path(target_gguf), target)
    if why:
        return None, f"--target-gguf {Path(target_gguf).name} ({served}) cannot be the reference's target: {why}"
    return Stage3Target("served", served, Path(target_gguf)), None


def _cannot_load(path: Path, target: str | Path) -> str | None:
    """Why parity's GGUF target loader cannot take ``path`` as ``--target`` quantized, or None:
    read from the header, before any stage runs."""
    from ..fileio.gguf_reader import read_gguf
    from ..quants import QUANTIZE_TYPES
    from ..config.target import REFERENCE_GGUF_TARGET_ARCHS as SUPPORTED_TARGET_ARCHS  # no torch

    f = read_gguf(path)
    if f.arch not in SUPPORTED_TARGET_ARCHS:
        return f"architecture {f.arch!r} (the reference loads {', '.join(SUPPORTED_TARGET_ARCHS)} GGUF targets)"
    known = {t.name for t in QUANTIZE_TYPES} | set(FULL_PRECISION_TYPES)
    odd = sorted({t.ggml_type.name for t in f.tensors} - known)
    if odd:
        return f"the reference does not dequantize {', '.join(odd)}; use --target-quant instead"
    mine, theirs = _shape(path), _shape(target)
    if theirs is not None and mine != theirs:
        return (f"another model than --target (vocab, hidden size, layers: {mine} in the GGUF, {theirs} in --target): "
                "stage 3 must change only the weights' precision")
    return None


def _shape(model: str | Path) -> tuple[int, int, int] | None:
    """(vocab, hidden size, layers) of a target dir or GGUF; None when it cannot be read here
    (the stages that load it say why)."""
    from ..errors import DflashError

    p = Path(model)
    try:
        if p.is_dir():
            from ..config import load_target_config

            c = load_target_config(p)
            return c.vocab_size, c.hidden_size, c.num_hidden_layers
        from ..fileio.gguf_reader import read_gguf

        f = read_gguf(p)
        embd = next((t for t in f.tensors if t.name == "token_embd.weight"), None)
        layers = f.kvs.get(f"{f.arch}.block_count")
        if embd is None or len(embd.shape) != 2 or layers is None:
            return None
        return int(embd.shape[0]), int(embd.shape[1]), int(layers.value)
    except DflashError:
        return None
