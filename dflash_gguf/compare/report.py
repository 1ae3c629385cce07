"""What compare-weights answers: one ``TensorComparison`` per tensor, gathered in a
``CompareReport`` with the verdict. The CLI renders these; the library never prints."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from .bands import BANDS, EXPECTED_FACTOR

BIT_IDENTICAL, WITHIN, OUT = "bit-identical", "within", "out"
MISSING, EXTRA, SHAPE_MISMATCH = "missing", "extra", "shape-mismatch"
STATUSES = (BIT_IDENTICAL, WITHIN, OUT, MISSING, EXTRA, SHAPE_MISMATCH)
PASSING = (BIT_IDENTICAL, WITHIN)
# what each failing tensor status means (the rule ids ``tensor-<status>`` of the verdict formats)
TENSOR_FAILING = {OUT: "a tensor's error is beyond its type's tolerance band",
                  MISSING: "a checkpoint tensor has no tensor in the GGUF",
                  EXTRA: "a GGUF tensor that the checkpoint does not have",
                  SHAPE_MISMATCH: "a tensor's shape differs from the checkpoint's"}
# a constant (a KV convert derives from config.json) against the file's
SAME, DIFFERS, CONST_MISSING, CONST_EXTRA = "same", "differs", "missing", "extra"
CONSTANT_FAILING = {DIFFERS: "a key's value differs from what convert derives from config.json",
                    CONST_MISSING: "a key convert would write is absent from the file",
                    CONST_EXTRA: "a key the file has that convert would not write for this config"}


@dataclass
class TensorComparison:
    """One checkpoint tensor (or tensor of GGUF A) against its GGUF tensor (of B).

    Error metrics are of the lossier side against the more precise one (the checkpoint; in
    GGUF-vs-GGUF mode the side with more bits per weight, see ``reference``), relative to the
    reference's values. ``shape`` / ``gguf_shape`` are torch order; ``ne`` is ggml order.
    """

    source: str | None  # checkpoint name as stored (or A's tensor name)
    gguf_name: str | None  # name in the GGUF (or B's tensor name)
    type: str | None  # ggml type of the GGUF (B) tensor
    shape: tuple[int, ...] | None  # torch order, source / A
    status: str  # one of STATUSES
    source_type: str | None = None  # safetensors dtype, or A's ggml type
    gguf_shape: tuple[int, ...] | None = None  # torch order, GGUF / B
    rel_rms: float | None = None  # ||y - x|| / ||x||
    max_abs: float | None = None  # max |y - x|
    max_abs_index: tuple[int, ...] | None = None  # where (torch order, reference layout)
    cosine: float | None = None
    norm_ratio: float | None = None  # ||y|| / ||x||
    expected_rel_rms: float | None = None  # error of ggml's own encoding of the reference
    expected_max_abs: float | None = None
    deviation_from_ggml: float | None = None  # ||y - ggml(x)|| / ||x||; 0 when bit-identical
    bytes_differing: int | None = None  # bytes that differ from ggml's encoding
    limit: float | None = None  # the rel_rms limit applied
    limit_source: str | None = None  # "band", "expected", "--tolerance"
    flags: list[str] = field(default_factory=list)
    detail: str = ""  # why, for anything that is not bit-identical / within
    reference: str = "a"  # GGUF-vs-GGUF: the side used as x ("a" or "b")
    nbytes: int = 0  # bytes of the GGUF (B) tensor

    @property
    def name(self) -> str:
        return self.gguf_name or self.source or "?"

    @property
    def ne(self) -> list[int] | None:
        return None if self.gguf_shape is None else list(reversed(self.gguf_shape))

    @property
    def passed(self) -> bool:
        return self.status in PASSING

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for k in ("shape", "gguf_shape", "max_abs_index"):
            if d[k] is not None:
                d[k] = list(d[k])
        d["ne"] = self.ne
        d["source_ne"] = None if self.shape is None else list(reversed(self.shape))
        for k, v in d.items():  # JSON has no NaN/inf: spell them as strings
            if isinstance(v, float) and not math.isfinite(v):
                d[k] = str(v)
        return d


@dataclass
class CompareReport:
    mode: str  # "safetensors-gguf" | "gguf-gguf"
    a: Path  # drafter dir or GGUF A
    b: Path  # the GGUF
    format: str | None  # detected format of the GGUF (B)
    a_format: str | None  # GGUF-vs-GGUF: format of A
    tensors: list[TensorComparison]
    notes: list[str] = field(default_factory=list)
    requantized: bool = True
    tolerances: dict[str, float] = field(default_factory=dict)  # user overrides
    seconds: float = 0.0
    bytes_compared: int = 0  # reference + GGUF bytes read in the main pass
    constants: list = field(default_factory=list)  # ConstantComparison per key (checkpoint mode, unless skipped)

    @property
    def counts(self) -> dict[str, int]:
        c = {s: 0 for s in STATUSES}
        for t in self.tensors:
            c[t.status] += 1
        return c

    @property
    def constants_differing(self) -> list:
        return [c for c in self.constants if not c.passed]

    @property
    def verdict(self) -> str:
        ok = self.tensors and all(t.passed for t in self.tensors) and not self.constants_differing
        return "pass" if ok else "fail"

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @property
    def summary(self) -> str:
        """``N tensors: X bit-identical, Y within tolerance, Z out of tolerance, M missing``.

        A shape mismatch counts as out of tolerance; extra GGUF tensors are appended as
        ``, E extra`` only when there are some, so N always equals the sum; then, when
        constants were compared, ``; K constants match`` or ``; K constants: D differ``."""
        c = self.counts
        line = (f"{len(self.tensors)} tensors: {c[BIT_IDENTICAL]} bit-identical, {c[WITHIN]} within tolerance, "
                f"{c[OUT] + c[SHAPE_MISMATCH]} out of tolerance, {c[MISSING]} missing")
        if c[EXTRA]:
            line += f", {c[EXTRA]} extra"
        if self.constants:
            bad = len(self.constants_differing)
            line += f"; {len(self.constants)} constants: {bad} differ" if bad else f"; {len(self.constants)} constants match"
        return line

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "a": str(self.a),
            "b": str(self.b),
            "format": self.format,
            "a_format": self.a_format,
            "verdict": self.verdict,
            "summary": {"line": self.summary, "tensors": len(self.tensors), **self.counts},
            "requantized": self.requantized,
            "tolerance_overrides": self.tolerances,
            "default_bands": {k: {"rel_rms": b.rel_rms, "block_err": b.block_err, "elem_rel": b.elem_rel,
                                  "elem_abs": b.elem_abs} for k, b in BANDS.items()},
            "expected_factor": EXPECTED_FACTOR,
            "seconds": round(self.seconds, 4),
            "bytes_compared": self.bytes_compared,
            "notes": self.notes,
            "tensors": [t.to_json() for t in self.tensors],
            "constants": [c.to_json() for c in self.constants],
        }
