"""KL divergence between two models' next-token distributions over the same positions, summed up
the way ``llama-perplexity --kl-divergence`` prints it (``tools/perplexity/perplexity.cpp``), so a
parity run and a perplexity run read the same way:

* per position, KL(P ‖ Q) = Σ_v P(v) · (log P(v) − log Q(v)) in nats, P from the *reference*
  logits (llama.cpp's "base"), Q from the other model's; both softmaxes at temperature 1;
* mean ± its uncertainty, the standard error sqrt((E[x²] − E[x]²) / (n − 1)), reported as 0 for
  10 positions or fewer (llama.cpp's rule);
* maximum, 99.9 %, 99 %, 95 %, 90 %, median, 10 %, 5 %, 1 %, 0.1 %, minimum: percentiles
  interpolated linearly between the sorted values at fraction · (n − 1), the median the mean of
  the middle two for an even count;
* "same top": the share of positions whose argmax agrees (first index on ties, as llama.cpp's
  strict ``>`` scan), ± sqrt(p (1 − p) / (n − 1)).

llama.cpp skips reference probabilities below e⁻¹⁶ in the sum; this sums every term exactly (in
float64), so tiny differences may show here and not there. NumPy only: torch tensors are
accepted and converted, so the runtime benchmark can use the same code without torch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

# (JSON key, fraction) in llama-perplexity's order, top down
PERCENTILES = (("p99_9", 0.999), ("p99", 0.99), ("p95", 0.95), ("p90", 0.90), ("p10", 0.10), ("p5", 0.05),
               ("p1", 0.01), ("p0_1", 0.001))


def _array(logits: Any) -> np.ndarray:
    """(n, V) float64 from a NumPy array, a torch tensor (any dtype or device) or nested lists."""
    if hasattr(logits, "detach"):  # torch: NumPy cannot take bfloat16 or device memory directly
        logits = logits.detach().float().cpu().numpy()
    a = np.asarray(logits, dtype=np.float64)
    return a.reshape(1, -1) if a.ndim == 1 else a.reshape(-1, a.shape[-1])


def _log_softmax(x: np.ndarray) -> np.ndarray:
    top = x.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)  # a row of −inf stays −inf instead of NaN
    with np.errstate(divide="ignore"):
        return x - top - np.log(np.exp(x - top).sum(axis=-1, keepdims=True))


def per_position(reference: Any, other: Any) -> tuple[np.ndarray, np.ndarray]:
    """KL(P_reference ‖ Q_other) in nats and "same argmax", one value per row of two (n, V)
    logit arrays over the same vocabulary.

    Q = 0 where P > 0 gives +inf (the other model rules out a token the reference may emit);
    P = 0 contributes nothing whatever Q is.

    Raises:
        ValueError: the two arrays differ in shape.
    """
    p, q = _array(reference), _array(other)
    if p.shape != q.shape:
        raise ValueError(f"logits of shape {p.shape} and {q.shape}: KL needs the same positions and vocabulary")
    lp, lq = _log_softmax(p), _log_softmax(q)
    prob = np.exp(lp)
    with np.errstate(invalid="ignore"):  # −inf − −inf where both are 0: that term is 0 (masked next)
        terms = prob * (lp - lq)
    terms = np.where(prob > 0, terms, 0.0)
    return terms.sum(axis=-1), p.argmax(axis=-1) == q.argmax(axis=-1)


@dataclass(frozen=True)
class KLStats:
    """The KL values of a set of positions and which of them share the argmax."""

    values: np.ndarray  # (n,) KL per position, nats, in position order
    same: np.ndarray  # (n,) bool

    @classmethod
    def of(cls, reference: Any, other: Any) -> "KLStats":
        """From two (n, V) logit arrays (see ``per_position``)."""
        return cls(*per_position(reference, other))

    @classmethod
    def pool(cls, parts: Iterable["KLStats"]) -> "KLStats":
        parts = list(parts)
        if not parts:
            return cls(np.zeros(0), np.zeros(0, dtype=bool))
        return cls(np.concatenate([p.values for p in parts]), np.concatenate([p.same for p in parts]))

    @property
    def count(self) -> int:
        return int(self.values.size)

    @property
    def mean(self) -> float:
        return float(self.values.mean()) if self.count else 0.0

    @property
    def mean_uncertainty(self) -> float:
        """Standard error of the mean, llama.cpp's ``mean_and_uncertainty``: 0 for ≤ 10 positions."""
        n = self.count
        if n <= 10:
            return 0.0
        if not math.isfinite(self.mean):
            return math.inf
        var = float((self.values**2).mean()) - self.mean**2
        return math.sqrt(var / (n - 1)) if var > 0 else 0.0

    def percentile(self, fraction: float) -> float:
        """Linear interpolation between sorted values at fraction · (n − 1) (NumPy's default)."""
        if not self.count:
            return 0.0
        with np.errstate(invalid="ignore"):  # between two +inf: inf − inf is NaN, the value is inf
            x = float(np.quantile(self.values, min(max(fraction, 0.0), 1.0)))
        return math.inf if math.isnan(x) else x

    @property
    def same_top(self) -> float:
        return float(self.same.mean()) if self.count else 1.0

    @property
    def same_top_uncertainty(self) -> float:
        n, p = self.count, self.same_top
        return math.sqrt(p * (1 - p) / (n - 1)) if n > 1 else 0.0

    def to_json(self) -> dict[str, Any]:
        """The llama-perplexity summary; non-finite values (a ruled-out token) as null."""
        def num(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        if not self.count:
            return {"positions": 0}
        out: dict[str, Any] = {"positions": self.count, "mean": num(self.mean),
                               "mean_uncertainty": num(self.mean_uncertainty), "max": num(self.percentile(1.0))}
        for key, f in PERCENTILES[:4]:
            out[key] = num(self.percentile(f))
        out["median"] = num(self.percentile(0.5))
        for key, f in PERCENTILES[4:]:
            out[key] = num(self.percentile(f))
        out["min"] = num(self.percentile(0.0))
        out["same_top"] = self.same_top
        out["same_top_uncertainty"] = self.same_top_uncertainty
        return out
