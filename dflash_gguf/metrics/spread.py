"""Run-to-run spread: mean ± sd over repeated runs, and the >1σ rule for calling a difference real."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence


@dataclass
class Stat:
    mean: float
    sd: float  # sample standard deviation over runs; 0 for a single run
    values: list[float]

    @classmethod
    def of(cls, values: Sequence[float]) -> "Stat":
        values = [float(v) for v in values]
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        return cls(statistics.fmean(values) if values else 0.0, sd, values)

    def to_json(self) -> dict[str, float | list[float]]:
        return {"mean": self.mean, "sd": self.sd, "values": self.values}


def beyond_sigma(a: Stat, b: Stat) -> dict[str, float | bool]:
    """``b − a``, called real only when it exceeds the spread of that difference,
    ``sqrt(sd_a² + sd_b²)`` (with no spread at all, any difference is real)."""
    d = b.mean - a.mean
    sigma = math.hypot(a.sd, b.sd)
    return {"delta": d, "sigma": sigma, "real": abs(d) > sigma if sigma > 0 else d != 0}
